"""The errors tinylm reports to the user as one line instead of a traceback.

Anything raised as a `UserError` is something the user can act on: a bad setting, a missing or unreadable
file, an incompatible checkpoint, a run that diverged or was stopped. Its message names the problem and the
fix. The scripts (through `tinylm.cli.hydra_entry_point`) print it as `error: <message>` on stderr and exit
with the error's `exit_code`; every other exception is a bug and keeps its traceback.

Plain Python, no Lightning or Hydra, so the pure-PyTorch model can raise these too.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do instead."""

    exit_code: int = 2  # like argparse's usage errors


class ConfigError(UserError, ValueError):
    """A setting has a value that cannot work (a ValueError too, so callers catching ValueError still do)."""


class TrainingDiverged(UserError, FloatingPointError):
    """The training loss became NaN or infinite; no checkpoint was written from the broken weights.

    A sweep wrapper catches this type to mark one job failed and go on with the others.
    """

    exit_code = 3

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


class TrainingInterrupted(UserError):
    """SIGINT or SIGTERM stopped training after a complete step, and a checkpoint to resume from was saved.

    Exits with 128 + the signal's number, as a shell reports a process ended by that signal.
    """

    def __init__(self, message: str, signum: int, step: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.step = step
        self.exit_code = 128 + signum
