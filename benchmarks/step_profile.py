"""Where a training step's time goes: data loading and logging as shares of the step, timed inside a real run.

`StepProfile` is a callback. At fit start it wraps, with a wall-clock timer, one training step (Lightning's
`_TrainingEpochLoop.advance`: fetch a batch, forward, backward, optimizer, callbacks, logging; validation runs
outside it) and, within steps only, the parts below; at teardown it puts everything back.

  data loading:  Lightning's data fetcher (which iterates our batch stream) and moving the batch to the device;
  logging:       `LightningModule.log`, Lightning's logger connector (which writes TensorBoard), the
                 progress bar's and the throughput monitor's training-step hooks;
  health:        TrainingHealth's hooks (an extra forward pass every 100 steps), reported apart from
                 logging because it computes.

It patches private Lightning classes (listed in docs/internals.md); they are imported at the top, so a
rename fails loudly when the benchmark starts.

A timer costs about a microsecond per call, against steps of tens of milliseconds: unlike a tracing profiler,
which slows every Python call and so inflates exactly these Python-heavy parts, it leaves the shares as
they are.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.loops import fetchers
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.trainer.connectors.logger_connector.logger_connector import _LoggerConnector

from tinylm.training.callbacks import StepThroughput, TrainingHealth

# The callback hooks Lightning calls inside a training step.
TRAINING_STEP_HOOKS = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
)
CALLBACK_CATEGORIES: tuple[tuple[type, str], ...] = (
    (ProgressBar, "logging"),
    (StepThroughput, "logging"),
    (TrainingHealth, "health"),
)


@dataclass
class StepShares:
    steps: int = 0
    step_s: float = 0.0
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # per category
    parts_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # per wrapped function

    def share(self, category: str) -> float:
        return self.seconds[category] / self.step_s if self.step_s else 0.0


class StepProfile(L.Callback):
    """Times data loading, logging and health inside every training step of the run it is attached to."""

    def __init__(self) -> None:
        self.result = StepShares()
        self._in_step = False
        # Whether a part is being timed now: a timed call inside another is the outer part's time.
        self._timing = False
        self._restore: list[Callable[[], None]] = []

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._wrap_step(_TrainingEpochLoop, "advance")
        for fetcher in (fetchers._DataFetcher, fetchers._PrefetchDataFetcher):
            self._wrap(fetcher, "__next__", "data loading", "data fetcher")
        self._wrap(type(trainer.strategy), "batch_to_device", "data loading", "batch_to_device")
        self._wrap(type(pl_module), "log", "logging", "LightningModule.log")
        for method in ("on_batch_start", "on_batch_end", "update_train_step_metrics"):
            self._wrap(_LoggerConnector, method, "logging", "logger connector")
        for callback in trainer.callbacks:
            category = next((c for kind, c in CALLBACK_CATEGORIES if isinstance(callback, kind)), None)
            if category is not None:
                for hook in TRAINING_STEP_HOOKS:
                    if getattr(type(callback), hook) is not getattr(L.Callback, hook):
                        self._wrap(type(callback), hook, category, type(callback).__name__)

    def teardown(self, *_: Any, **__: Any) -> None:
        while self._restore:
            self._restore.pop()()

    def _patch(self, owner: type, name: str, replacement: Callable) -> None:
        had_own = name in owner.__dict__
        original = owner.__dict__.get(name)
        setattr(owner, name, replacement)
        self._restore.append(
            (lambda: setattr(owner, name, original)) if had_own else (lambda: delattr(owner, name))
        )

    def _wrap_step(self, owner: type, name: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed_step(*args: Any, **kwargs: Any) -> Any:
            self._in_step = True
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.result.step_s += time.perf_counter() - start
                self.result.steps += 1
                self._in_step = False

        self._patch(owner, name, timed_step)

    def _wrap(self, owner: type, name: str, category: str, part: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self._in_step or self._timing:
                return original(*args, **kwargs)
            self._timing = True
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                self._timing = False
                self.result.seconds[category] += elapsed
                self.result.parts_s[part] += elapsed

        self._patch(owner, name, timed)
