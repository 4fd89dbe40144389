"""How a run shows its progress: the step-counting progress bar, and the validation that ends every run."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as L
from lightning.pytorch.callbacks import TQDMProgressBar


class StepProgressBar(TQDMProgressBar):
    """Lightning's progress bar, counting optimizer steps up to `max_steps`: training windows are an endless
    stream, so the default per-epoch bar would show `Epoch 0: 1234/?` forever."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self.count_from_here(trainer)  # a run resumed mid-epoch gets no on_train_epoch_start

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        self.count_from_here(trainer)

    def count_from_here(self, trainer: L.Trainer) -> None:
        """The bar runs from the step the run is at (a resumed run's) to `max_steps`; tqdm's rate and time
        left count only the steps since `initial`."""
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps if trainer.max_steps > 0 else None)
        bar.n = bar.initial = bar.last_print_n = trainer.global_step
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
