"""The errors tinylm reports as one line, `error: <message>`, with their `exit_code` instead of a traceback
(through `tinylm.cli.hydra_entry_point`; see docs/errors.md). Plain Python, no Lightning or Hydra, so the
pure-PyTorch model can raise them too.
"""

from __future__ import annotations


class ReportedError(Exception):
    """Ends a script with its message as one line and `exit_code`, without a traceback."""

    exit_code: int = 1


class UserError(ReportedError):
    """A problem the user can fix; the message says what is wrong and what to do instead."""

    exit_code = 2  # like argparse's usage errors


class ConfigError(UserError, ValueError):
    """A setting has a value that cannot work (a ValueError too, so callers catching ValueError still do)."""


class CorpusError(UserError, ValueError):
    """A corpus cannot be loaded; the message says what to do instead. Here, not beside the corpora, so that a
    script refuses a missing file before it imports them (and `datasets`)."""


class TrainingDiverged(UserError, FloatingPointError):
    """The training loss became NaN or infinite; no checkpoint was written from the broken weights. A sweep
    records the job as diverged and goes on."""

    exit_code = 3

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


class Interrupted(ReportedError):
    """SIGINT or SIGTERM stopped a script cleanly: training after a complete step, with a checkpoint saved
    (`step`), or sampling after the characters printed. Exits with 128 + the signal's number, as a shell
    would; not a `UserError`, so that a sweep catching those still stops."""

    def __init__(self, message: str, signum: int, step: int = 0) -> None:
        super().__init__(message)
        self.signum = signum
        self.step = step
        self.exit_code = 128 + signum
