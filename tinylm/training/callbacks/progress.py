"""How a run shows its progress: the step-counting progress bar on a terminal, a line per validation
elsewhere, and the validation that ends every run."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.callbacks import TQDMProgressBar
from tqdm.contrib.logging import logging_redirect_tqdm

log = logging.getLogger(__name__)


class StepProgressBar(TQDMProgressBar):
    """Lightning's progress bar, counting optimizer steps up to `max_steps` (training windows are an endless
    stream, so the default per-epoch bar would show `Epoch 0: 1234/?` forever), drawn on a terminal only.

    While it is drawn, log lines go through tqdm, on lines of their own above it, not onto its end. With no
    terminal (stdout piped to a file or `tee`), where every redraw would stay in the log as a frame of its own,
    it draws nothing and logs one line per validation instead (`step 250/5000: loss/train=…, loss/val=…`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logs_validations = False
        self._console_logging = contextlib.ExitStack()
        self._started: tuple[float, int] | None = None  # when training started, and at which step
        self._drawing = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)  # disables the bar on every rank but the first
        if not trainer.is_global_zero:
            return
        if not sys.stdout.isatty():
            self.disable()
            self.logs_validations = True
        elif self.is_enabled and _logs_to_console():
            self._console_logging.enter_context(logging_redirect_tqdm())

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._console_logging.close()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        # Lightning leaves the bar open on an error, and calls no teardown: the error line would follow its end.
        if self._drawing:
            self.train_progress_bar.close()
            self._drawing = False
        self._console_logging.close()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._drawing = self.is_enabled
        self._started = (time.monotonic(), trainer.global_step)
        self.count_from_here(trainer)  # a run resumed mid-epoch gets no on_train_epoch_start

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self._drawing = False

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.logs_validations and not trainer.sanity_checking and trainer.state.fn == "fit":
            log.info(self.validation_line(trainer, pl_module))

    def validation_line(self, trainer: L.Trainer, pl_module: L.LightningModule) -> str:
        """What the bar shows, as one line: the step, the losses, the time since training started and its rate."""
        metrics = self.get_metrics(trainer, pl_module)
        shown = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        step = trainer.global_step
        line = f"step {step}/{trainer.max_steps}" if trainer.max_steps > 0 else f"step {step}"
        if metrics:
            line += f": {shown}"
        if self._started is not None:
            started, first_step = self._started
            took = time.monotonic() - started
            minutes, seconds = divmod(round(took), 60)
            line += f" ({minutes}m{seconds:02d}s, {(step - first_step) / max(took, 1e-9):.2f} steps/s)"
        return line

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


def _logs_to_console() -> bool:
    """Whether the root logger has a handler writing to stdout or stderr (Hydra's console handler): only those
    are routed through tqdm; with none, tqdm's routing would add one."""
    return any(
        isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr)
        for handler in logging.getLogger().handlers
    )


class ValidateOnLastStep(L.Callback):
    """Ends training on a validation, so the final metrics, `last.ckpt` and `best.ckpt` describe the final
    model even when `max_steps` is not a multiple of `val_check_interval` (Lightning validates on a step
    where `should_stop` is set)."""

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True
