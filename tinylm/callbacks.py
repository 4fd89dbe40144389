"""Small Lightning callbacks for tinylm's training runs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as L
import torch
from lightning.fabric.utilities.throughput import Throughput, get_available_flops
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.tensorboard.summary import hparams

from tinylm.precision import compute_dtype


def writes_metrics(trainer: L.Trainer, steps_done: int) -> bool:
    """Whether the logger writes metrics once `steps_done` optimizer steps are complete: every
    `log_every_n_steps`-th step and the last (Lightning's schedule, which `self.log` values follow)."""
    every = trainer.log_every_n_steps
    return (
        (every > 0 and steps_done % every == 0) or steps_done >= trainer.max_steps > 0 or trainer.should_stop
    )


class TokenThroughput(L.Callback):
    """Training throughput: characters per second (`train/device/items_per_sec`), FLOP/s and MFU where the
    device's peak is known (Lightning's per-device table), over the last `window_size` steps.

    The tags and formulas are those of Lightning's ThroughputMonitor (`lightning.fabric`'s `Throughput`
    computes them), but the clock is read, CUDA synchronised and the rates computed only on the steps the
    logger writes; a step in between costs three integer additions. ThroughputMonitor did all of that on every
    step: 0.3-0.55% of a baby-model step on CPU (this callback: 0.1%, measured by scripts/bench.py's step
    profile), and a device synchronisation per step on GPU. Validation time is left out of the training time.
    """

    def __init__(self, window_size: int = 50, clock: Callable[[], float] = time.perf_counter) -> None:
        if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 1:
            raise ValueError(f"TokenThroughput window_size={window_size!r} must be an integer >= 1")
        self.window_size = window_size
        self.clock = clock
        self._throughput: Throughput | None = None
        self._reset(self.clock())

    def _reset(self, now: float) -> None:
        self._start = now
        self._paused_s = 0.0  # validation time, left out
        self._validation_start: float | None = None
        self._batches = self._samples = self._tokens = 0
        self._batches_at_last_update = 0
        self._last_written_step = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        every = max(1, trainer.log_every_n_steps)
        self._throughput = Throughput(
            available_flops=get_available_flops(
                trainer.strategy.root_device, compute_dtype(str(trainer.precision))
            ),
            world_size=trainer.world_size,
            # Updated every `every` steps: this many updates span `window_size` steps.
            window_size=math.ceil(self.window_size / every) + 1,
        )
        self._reset(self.clock())

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        inputs = batch[0]
        self._batches += 1
        self._samples += inputs.shape[0]
        self._tokens += inputs.numel()
        step = trainer.global_step
        if step == self._last_written_step or not writes_metrics(trainer, step):
            return
        self._last_written_step = step
        if self._throughput is None or not trainer.is_global_zero:
            return
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # the clock must see the work the device has queued
        flops_per_batch = getattr(pl_module, "flops_per_batch", None)
        new_batches, self._batches_at_last_update = (
            self._batches - self._batches_at_last_update,
            self._batches,
        )
        self._throughput.update(
            time=self.clock() - self._start - self._paused_s,
            batches=self._batches,
            samples=self._samples,
            lengths=self._tokens,
            flops=flops_per_batch * new_batches if flops_per_batch else None,
        )
        metrics = {f"train/{name}": value for name, value in self._throughput.compute().items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step - 1)  # the step train/loss of this step is logged at

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validation_start = self.clock()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._validation_start is not None:
            self._paused_s += self.clock() - self._validation_start
            self._validation_start = None


class StepProgressBar(TQDMProgressBar):
    """Counts optimizer steps up to `max_steps`. Training windows are an endless stream, so Lightning's
    default per-epoch bar would show `Epoch 0: 1234/?` forever.

    Redraws at most every `min_interval_s` seconds (and on the last step): redrawing on every step cost 1%
    of the baby model's step time on CPU, for updates faster than anyone reads.
    """

    def __init__(self, min_interval_s: float = 0.25, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_interval_s = min_interval_s
        self._last_redraw = -math.inf

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps if trainer.max_steps > 0 else None)
        bar.n = bar.initial = trainer.global_step
        bar.set_description("Training")

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the run name, cut to four characters: noise on a named run
        return metrics

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        now = time.monotonic()
        due = trainer.global_step % self.refresh_rate == 0 and now - self._last_redraw >= self.min_interval_s
        if due or trainer.global_step == trainer.max_steps:
            self._last_redraw = now
            bar = self.train_progress_bar
            bar.n = trainer.global_step
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=True)


class ValidateOnLastStep(L.Callback):
    """Ends training on a validation, so the final metrics, `last.ckpt` and `best.ckpt` describe the final
    model even when `max_steps` is not a multiple of `val_check_interval`.

    Lightning validates on a step where `should_stop` is set; stopping there is what max_steps does anyway.
    """

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True


class TensorBoardHParams(L.Callback):
    """Registers the run's choices in TensorBoard's HParams tab, with `val/loss` as the metric to compare.

    Only the metric's tag is registered here; TensorBoard reads its values from the `val/loss` scalars the
    run logs, and shows the latest, so the tab compares runs by their final val/loss without placeholders.
    """

    def __init__(self, params: dict[str, Any], metrics: tuple[str, ...] = ("val/loss", "val/bpc")) -> None:
        self.params = params
        self.metrics = metrics

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger) and trainer.is_global_zero:
                experiment, session_start, session_end = hparams(
                    self.params, dict.fromkeys(self.metrics, 0.0)
                )
                # Lightning's log_hyperparams would also log each metric as a scalar with a made-up value.
                writer = logger.experiment._get_file_writer()
                for summary in (experiment, session_start, session_end):
                    writer.add_summary(summary)
