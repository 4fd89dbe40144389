"""Every Lightning callback of a training run, and the order they run in (`in_order`)."""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as L
from lightning.pytorch.callbacks import ProgressBar

from tinylm.training.callbacks.health import TrainingHealth
from tinylm.training.callbacks.progress import StepProgressBar, ValidateOnLastStep
from tinylm.training.callbacks.safety import StopOnNonFiniteLoss, StopOnSignal, TrainingRandomState
from tinylm.training.callbacks.targets import LossTargets
from tinylm.training.callbacks.tensorboard import StepTensorBoardLogger, TensorBoardHParams
from tinylm.training.callbacks.throughput import StepThroughput
from tinylm.training.callbacks.warmup import CompileWarmUp


def in_order(
    configured: Sequence[L.Callback],
    always: Sequence[L.Callback],
    progress_bar: bool = True,
    observers: Sequence[L.Callback] = (),
) -> list[L.Callback]:
    """A run's callbacks in the order they must run: `configured` ones (conf/callbacks/, less the progress
    bar when it is off) and `always` ones (checkpoints, HParams) between tinylm's own guards, `observers`
    (benchmarks, tests) after them.

    First, the steps' random stream is swapped in before anything else runs in a step and before StopOnSignal
    saves a checkpoint, and the last step is known to be the last (should_stop) before the others decide
    whether to log; last, the stops on non-finite losses and on signals see every other callback's work."""
    if not progress_bar:
        configured = [c for c in configured if not isinstance(c, ProgressBar)]
    return [
        TrainingRandomState(),
        ValidateOnLastStep(),
        *configured,
        *always,
        *observers,
        StopOnNonFiniteLoss(),
        StopOnSignal(),
    ]


__all__ = [
    "CompileWarmUp",
    "LossTargets",
    "StepProgressBar",
    "StepTensorBoardLogger",
    "StepThroughput",
    "StopOnNonFiniteLoss",
    "StopOnSignal",
    "TensorBoardHParams",
    "TrainingHealth",
    "TrainingRandomState",
    "ValidateOnLastStep",
    "in_order",
]
