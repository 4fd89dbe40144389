"""Small Lightning callbacks for tinylm's training runs."""

from __future__ import annotations

import math
import time
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.callbacks import ThroughputMonitor, TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.tensorboard.summary import hparams


def _windows_in_batch(batch: Any) -> int:
    return batch[0].shape[0]


def _tokens_in_batch(batch: Any) -> int:
    return batch[0].numel()


class TokenThroughput(ThroughputMonitor):
    """Lightning's ThroughputMonitor counting characters: logs `train/device/items_per_sec` (tokens/s), and
    FLOP/s and MFU where the device's peak is known (from the module's `flops_per_batch`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(batch_size_fn=_windows_in_batch, length_fn=_tokens_in_batch, **kwargs)


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
