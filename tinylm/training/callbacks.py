"""Small Lightning callbacks for tinylm's training runs, its TensorBoard logger, and what Lightning's
ThroughputMonitor needs to know about a batch."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.tensorboard.summary import hparams

from tinylm.training.module import VAL_BPC, VAL_LOSS


def windows_in_batch(batch: tuple[torch.Tensor, torch.Tensor]) -> int:
    """ThroughputMonitor's `batch_size_fn`: a batch holds (inputs, targets) of shape (windows, block_size)."""
    return batch[0].shape[0]


def chars_in_batch(batch: tuple[torch.Tensor, torch.Tensor]) -> int:
    """ThroughputMonitor's `length_fn`: the characters a batch trains on, so items/s is characters/s."""
    return batch[0].numel()


class StepProgressBar(TQDMProgressBar):
    """Lightning's progress bar, counting optimizer steps up to `max_steps`: training windows are an endless
    stream, so the default per-epoch bar would show `Epoch 0: 1234/?` forever."""

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps if trainer.max_steps > 0 else None)
        bar.n = bar.initial = trainer.global_step
        bar.set_description("Training")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        step = trainer.global_step
        if step % self.refresh_rate == 0 or step == trainer.max_steps:
            bar = self.train_progress_bar
            bar.n = step
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=True)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the run name, cut to four characters: noise on a named run
        return metrics


class ValidateOnLastStep(L.Callback):
    """Ends training on a validation, so the final metrics, `last.ckpt` and `best.ckpt` describe the final
    model even when `max_steps` is not a multiple of `val_check_interval` (Lightning validates on a step
    where `should_stop` is set)."""

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True


class StepTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger without the `epoch` scalar, which Lightning adds to every write: the
    training windows are one endless epoch, so it would be a flat 0 sorted first in TensorBoard."""

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        super().log_metrics({k: v for k, v in metrics.items() if k != "epoch"}, step)


class TensorBoardHParams(L.Callback):
    """Registers the run's choices in TensorBoard's HParams tab, with the validation loss as the metric: only
    its tag, as TensorBoard shows the latest value the run logs, i.e. the final validation loss."""

    def __init__(self, params: dict[str, Any], metrics: tuple[str, ...] = (VAL_LOSS, VAL_BPC)) -> None:
        self.params = params
        self.metrics = metrics

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                # Into the run's own event file: Lightning's log_hyperparams would also log each metric as a
                # scalar with a made-up value, and SummaryWriter.add_hparams writes to a new run of its own.
                for summary in hparams(self.params, dict.fromkeys(self.metrics, 0.0)):
                    logger.experiment.file_writer.add_summary(summary)
