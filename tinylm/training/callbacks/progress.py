"""How a run shows its progress: the step-counting progress bar on a terminal, progress lines in the log at a
steady rhythm and at each validation, and the validation that ends every run."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.callbacks import TQDMProgressBar
from tqdm.contrib.logging import logging_redirect_tqdm

from tinylm.layout import VAL_LOSS

log = logging.getLogger(__name__)

# A progress line at least every tenth of the run and at most this many seconds after the last line.
LINES_PER_RUN = 10
LINE_EVERY_S = 30.0


class StepProgressBar(TQDMProgressBar):
    """Lightning's progress bar, counting optimizer steps up to `max_steps` (training windows are an endless
    stream, so the default per-epoch bar would show `Epoch 0: 1234/?` forever), drawn on a terminal only.

    While it is drawn, log lines go through tqdm, on lines of their own above it, not onto its end. With no
    terminal (stdout piped to a file or `tee`), where every redraw would stay in the log as a frame of its own,
    it draws nothing. Either way the run's log gets progress lines: one per validation
    (`step 300/700: loss/train=…, loss/val=… (2m10s, 2.31 steps/s, 2m53s left)`), and between them one at
    every tenth of `max_steps` or `LINE_EVERY_S` seconds after the last line, whichever comes first (the
    training loss only). Piped, they are logged as every other line is; on a terminal, where the bar says the
    same, they go to the log files only (Hydra's `train.log`). `clock` (seconds) is for tests."""

    def __init__(self, *args: Any, clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = clock
        self.write_line: Callable[[str], None] | None = None  # where progress lines go; None: nowhere
        self._console_logging = contextlib.ExitStack()
        self._started: tuple[float, int] | None = None  # when training started, and at which step
        self._drawing = False
        self._last_line_at = 0.0
        self._last_step = 0  # the optimizer step seen last (a step spans several batches when accumulating)
        self._due: int | None = None  # a line for the step just taken, written when the next one starts

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)  # disables the bar on every rank but the first
        if not trainer.is_global_zero:
            return
        if not sys.stdout.isatty():
            self.disable()
            self.write_line = log.info
        else:
            self.write_line = _to_log_files
            if self.is_enabled and _logs_to_console():
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
        self._started = (self.clock(), trainer.global_step)
        self._last_line_at, self._last_step, self._due = self._started[0], trainer.global_step, None
        self.count_from_here(trainer)  # a run resumed mid-epoch gets no on_train_epoch_start

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self.write_due_line(trainer, pl_module)
        self._drawing = False

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self.write_due_line(trainer, pl_module)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_start(trainer, pl_module)
        if not trainer.sanity_checking:
            self._due = None  # the validation's line says the same step, with its loss

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.write_line is not None and not trainer.sanity_checking and trainer.state.fn == "fit":
            self.write_line(self.validation_line(trainer, pl_module))
            self._last_line_at = self.clock()

    def validation_line(self, trainer: L.Trainer, pl_module: L.LightningModule) -> str:
        """What the bar shows, as one line: the step, the losses, the time since training started, its rate
        and the time left at that rate."""
        return self.progress_line(trainer, self.get_metrics(trainer, pl_module))

    def progress_line(self, trainer: L.Trainer, metrics: dict[str, Any]) -> str:
        """`metrics` at the step the run is at, the time since training started, its rate and the time left."""
        shown = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        step, max_steps = trainer.global_step, trainer.max_steps
        line = f"step {step}/{max_steps}" if max_steps > 0 else f"step {step}"
        if metrics:
            line += f": {shown}"
        if self._started is not None:
            started, first_step = self._started
            took = self.clock() - started
            rate = (step - first_step) / max(took, 1e-9)
            timing = [_minutes(took), f"{rate:.2f} steps/s"]
            if rate > 0 and step < max_steps:
                timing.append(f"{_minutes((max_steps - step) / rate)} left")
            line += f" ({', '.join(timing)})"
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
        if self.write_line is not None and step != self._last_step:
            if self.line_due(step, trainer.max_steps):
                # Written when the next step starts, or not at all if a validation follows: its line says
                # the same. By then Lightning has the loss of this step among the bar's metrics.
                self._due = step
            self._last_step = step

    def line_due(self, step: int, max_steps: int) -> bool:
        """Whether `step`, just taken, gets a progress line: it enters a new tenth of `max_steps`, or the last
        line was `LINE_EVERY_S` seconds ago or more."""
        if max_steps > 0 and _tenths(step, max_steps) > _tenths(self._last_step, max_steps):
            return True
        return self.clock() - self._last_line_at >= LINE_EVERY_S

    def write_due_line(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The progress line of a step `on_train_batch_end` found due, if no validation has said it since."""
        if self._due is None or self.write_line is None:
            return
        self._due = None
        metrics = self.get_metrics(trainer, pl_module)
        metrics.pop(VAL_LOSS, None)  # the last validation's: the line would say it was measured at this step
        self.write_line(self.progress_line(trainer, metrics))
        self._last_line_at = self.clock()

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the run name, cut to four characters: noise on a named run
        return metrics


def _tenths(step: int, max_steps: int) -> int:
    """The tenths of the run (`LINES_PER_RUN`ths) `step` has completed: integers, where a float step size
    would misplace a line (1 // 0.1 == 9.0)."""
    return LINES_PER_RUN * step // max_steps


def _minutes(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


def _logs_to_console() -> bool:
    """Whether the root logger has a handler writing to stdout or stderr (Hydra's console handler): only those
    are routed through tqdm; with none, tqdm's routing would add one."""
    return any(
        isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr)
        for handler in logging.getLogger().handlers
    )


def _to_log_files(line: str) -> None:
    """Log `line` to the root logger's files only (Hydra's `train.log`): on a terminal the bar shows it."""
    if not log.isEnabledFor(logging.INFO):
        return
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
            handler.handle(record)


class ValidateOnLastStep(L.Callback):
    """Ends training on a validation, so the final metrics, `last.ckpt` and `best.ckpt` describe the final
    model even when `max_steps` is not a multiple of `val_check_interval` (Lightning validates on a step
    where `should_stop` is set)."""

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True
