"""The errors tinylm reports to the user as one line instead of a traceback.

A `ReportedError` ends a script with `error: <message>` on stderr and the error's `exit_code` (through
`tinylm.cli.hydra_entry_point`); every other exception is a bug and keeps its traceback. Two kinds:

- `UserError`: something the user can act on (a bad setting, a missing or unreadable file, an incompatible
  checkpoint, a run that diverged). The message names the problem and the fix. A sweep may catch these to
  mark one job failed and go on with the next.
- `TrainingInterrupted`: the user or a scheduler stopped the run (Ctrl-C, SIGTERM) after a checkpoint was
  saved. Deliberately not a `UserError`, so that a sweep catching those still stops on Ctrl-C.

Plain Python, no Lightning or Hydra, so the pure-PyTorch model can raise these too.
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


class TrainingDiverged(UserError, FloatingPointError):
    """The training loss became NaN or infinite; no checkpoint was written from the broken weights.

    A sweep wrapper catches this type to mark one job failed and go on with the others.
    """

    exit_code = 3

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


class TrainingInterrupted(ReportedError):
    """SIGINT or SIGTERM stopped training after a complete step, and a checkpoint to resume from was saved.

    Exits with 128 + the signal's number, as a shell reports a process ended by that signal.
    """

    def __init__(self, message: str, signum: int, step: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.step = step
        self.exit_code = 128 + signum
