"""Where every tag of a run is written: at the optimizer steps the measured weights have taken, through the
loggers' public API, on Lightning's schedule. Lightning's own logging step lags `global_step` after a resume
from the checkpoint of a validation that ended a run early (Lightning #12274), so nothing uses it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.loggers import Logger


def logs_after(trainer: L.Trainer, steps_done: int) -> bool:
    """Whether the loggers write the step that makes `steps_done` optimizer steps: Lightning's schedule,
    every `log_every_n_steps`-th step and the last."""
    every = trainer.log_every_n_steps
    return (
        (every > 0 and steps_done % every == 0) or steps_done >= trainer.max_steps > 0 or trainer.should_stop
    )


def write_at(loggers: Iterable[Logger], values: dict[str, Any], step: int) -> None:
    """`values` to every logger of the run, at `step`."""
    for logger in loggers:
        logger.log_metrics(values, step=step)
