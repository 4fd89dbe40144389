"""TensorBoard as tinylm writes it: no `epoch` scalar, and the run's choices in the HParams tab."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as L
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.tensorboard.summary import hparams

from tinylm.layout import FINAL_VAL_LOSS, VAL_BPC, VAL_LOSS


class StepTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger without the `epoch` scalar, which Lightning adds to every write: the
    training windows are one endless epoch, so it would be a flat 0 sorted first in TensorBoard."""

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        super().log_metrics({k: v for k, v in metrics.items() if k != "epoch"}, step)


class TensorBoardHParams(L.Callback):
    """Registers the run's choices in TensorBoard's HParams tab, with the losses as its metrics, the run's
    result (the final loss, `loss/val_full`) first: only their tags, as TensorBoard shows the latest value the
    run logs. HParams reads a metric's value from the run's scalar of that tag, so the final loss is also a
    scalar, one point at the last step."""

    def __init__(
        self, params: dict[str, Any], metrics: tuple[str, ...] = (FINAL_VAL_LOSS, VAL_LOSS, VAL_BPC)
    ) -> None:
        self.params = params
        self.metrics = metrics

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                # Into the run's own event file: Lightning's log_hyperparams would also log each metric as a
                # scalar with a made-up value, and SummaryWriter.add_hparams writes to a new run of its own.
                for summary in hparams(shown_as_typed(self.params), dict.fromkeys(self.metrics, 0.0)):
                    logger.experiment.file_writer.add_summary(summary)


def shown_as_typed(params: dict[str, Any]) -> dict[str, Any]:
    """TensorBoard stores every number as a float and shows `seed=1` as 1.0000: a whole number goes in as its
    text, so that it reads as typed."""
    return {k: str(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in params.items()}
