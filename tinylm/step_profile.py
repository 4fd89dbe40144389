"""Where a training step's time goes: data loading and logging as shares of the step, from Python's cProfile.

The real training path runs under cProfile; a step is one call of Lightning's `_TrainingEpochLoop.advance`
(fetch a batch, forward, backward, optimizer, callbacks, logging; validation runs outside it). Within those
calls we add up
  data loading: fetching the batch (Lightning's data fetcher and our DataLoader) and moving it to the device;
  logging: `LightningModule.log` in `training_step`, Lightning's logger connector (which writes TensorBoard),
           and the training-step hooks of the callbacks that only report (progress bar, throughput monitor,
           TrainingHealth).
cProfile charges every Python call a little, and these parts are Python while the model's work is mostly in
C++ kernels, so the shares come out larger than without the profiler: they are upper bounds.
"""

from __future__ import annotations

import cProfile
import pstats
from dataclasses import dataclass
from typing import Any

from lightning.pytorch.callbacks import Callback, ProgressBar, ThroughputMonitor

from tinylm.health import TrainingHealth

# TensorBoardHParams reports too, but only at fit start.
REPORTING_CALLBACKS = (ProgressBar, ThroughputMonitor, TrainingHealth)
# The callback hooks Lightning calls inside a training step.
TRAINING_STEP_HOOKS = frozenset(
    {
        "on_train_batch_start",
        "on_train_batch_end",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_before_zero_grad",
    }
)

# (file name ending, function) of the step itself, and of what it calls to load data and to log.
STEP = ("loops/training_epoch_loop.py", "advance")
DATA_LOADING_CALLS = (
    ("loops/fetchers.py", "__next__"),
    ("core/module.py", "_on_before_batch_transfer"),
    # From advance directly: batch_to_device (and the strategy's on_train_batch_start, a no-op on one device).
    ("trainer/call.py", "_call_strategy_hook"),
)
LOGGER_CONNECTOR_CALLS = (
    ("logger_connector/logger_connector.py", "on_batch_start"),
    ("logger_connector/logger_connector.py", "on_batch_end"),
    ("logger_connector/logger_connector.py", "update_train_step_metrics"),
)


@dataclass
class StepShares:
    steps: int
    step_s: float  # total time in training steps, under the profiler
    data_loading_s: float
    logging_s: float
    logging_parts_s: dict[str, float]

    @property
    def data_loading_share(self) -> float:
        return self.data_loading_s / self.step_s

    @property
    def logging_share(self) -> float:
        return self.logging_s / self.step_s


Key = tuple[str, int, str]


def _find(stats: dict[Key, Any], where: tuple[str, str]) -> list[Key]:
    suffix, name = where
    return [k for k in stats if k[0].replace("\\", "/").endswith(suffix) and k[2] == name]


def _time_called_from(stats: dict[Key, Any], callees: list[Key], callers: list[Key]) -> float:
    """Cumulative time of `callees` in the calls made directly by `callers`."""
    total = 0.0
    for callee in callees:
        for caller, (_, _, _, cumulative) in stats[callee][4].items():
            if caller in callers:
                total += cumulative
    return total


def _hook_keys(callback: Callback) -> list[Key]:
    """The profile keys of the training-step hooks `callback`'s class really runs (not Callback's no-ops)."""
    keys = []
    for hook in TRAINING_STEP_HOOKS:
        function = getattr(type(callback), hook)
        if function is not getattr(Callback, hook):
            code = function.__code__
            keys.append((code.co_filename, code.co_firstlineno, code.co_name))
    return keys


def step_shares(profile: cProfile.Profile, callbacks: list[Callback]) -> StepShares:
    stats: dict[Key, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    steps_keys = _find(stats, STEP)
    if not steps_keys:
        raise RuntimeError("the profile holds no training step (Lightning's training_epoch_loop.advance)")
    step_calls = sum(stats[k][1] for k in steps_keys)
    step_s = sum(stats[k][3] for k in steps_keys)

    data = sum(_time_called_from(stats, _find(stats, call), steps_keys) for call in DATA_LOADING_CALLS)

    parts: dict[str, float] = {}
    training_step = _find(stats, ("tinylm/module.py", "training_step"))
    parts["LightningModule.log"] = _time_called_from(
        stats, _find(stats, ("core/module.py", "log")), training_step
    )
    parts["logger connector"] = sum(
        _time_called_from(stats, _find(stats, call), steps_keys) for call in LOGGER_CONNECTOR_CALLS
    )
    hook_caller = _find(stats, ("trainer/call.py", "_call_callback_hooks"))
    reporting = [c for c in callbacks if isinstance(c, REPORTING_CALLBACKS)]
    for callback in reporting:
        hooks = [k for k in _hook_keys(callback) if k in stats]
        parts[type(callback).__name__] = _time_called_from(stats, hooks, hook_caller)
    return StepShares(step_calls, step_s, data, sum(parts.values()), parts)
