"""Training throughput: characters/s (`train/device/items_per_sec`), FLOP/s and, on GPUs whose peak Lightning
knows, MFU, over the last `window_size` steps."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as L
import torch
from lightning.fabric.utilities.throughput import Throughput, get_available_flops

from tinylm.training.logging_steps import logs_after, write_at
from tinylm.training.precision import compute_dtype


class StepThroughput(L.Callback):
    """Lightning's `Throughput` measures; this logs it at the optimizer step it measured, like every other
    tag. (Lightning's ThroughputMonitor logs at its own counter, which lags `global_step` after a resume from
    the checkpoint of a validation that ended a run early: Lightning #12274.) Validation time is left out."""

    def __init__(self, window_size: int = 50) -> None:
        self.window_size = window_size
        self.throughput: Throughput | None = None
        self._started = self._paused = 0.0
        self._batches = self._windows = self._chars = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        peak = get_available_flops(trainer.strategy.root_device, compute_dtype(str(trainer.precision)))
        self.throughput = Throughput(
            available_flops=peak, world_size=trainer.world_size, window_size=self.window_size, separator="/"
        )
        self._started = time.perf_counter()
        self._batches = self._windows = self._chars = 0

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._paused = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._started += time.perf_counter() - self._paused

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.throughput is None or not trainer.is_global_zero:
            return
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # the step's kernels are done: the clock reads its real end
        inputs = batch[0]  # (windows, block_size)
        self._batches += 1
        self._windows += inputs.shape[0]
        self._chars += inputs.numel()
        self.throughput.update(
            time=time.perf_counter() - self._started,
            batches=self._batches,
            samples=self._windows,
            lengths=self._chars,
            flops=getattr(pl_module, "flops_per_batch", None),
        )
        # After the last micro-batch of a step, on the logger's steps: global_step has just counted it.
        if (batch_idx + 1) % trainer.accumulate_grad_batches == 0 and logs_after(
            trainer, trainer.global_step
        ):
            metrics = {f"train/{name}": value for name, value in self.throughput.compute().items()}
            write_at(trainer.loggers, metrics, trainer.global_step - 1)
