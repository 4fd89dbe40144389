"""Callbacks that break a real training run on purpose, for the fault-tolerance tests.

Added through the real config, e.g. `+callbacks.fault._target_=fault_injection.SendSignal`, so the run under
test is otherwise exactly what a user gets (subprocesses need `tests/` on PYTHONPATH).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch


class SendSignal(L.Callback):
    """Sends `signum` to this very process at the end of optimizer step `at_step`, as a user or a scheduler would.
    With a `marker`, once: it touches the file, and where the file exists already (a sweep's later job, or the
    same command run again) sends nothing."""

    def __init__(self, at_step: int, signum: int = signal.SIGINT, marker: str | None = None) -> None:
        self.at_step = at_step
        self.signum = signum
        self.marker = marker

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if trainer.global_step != self.at_step:
            return
        if self.marker is not None:
            if Path(self.marker).exists():
                return
            Path(self.marker).touch()
        os.kill(os.getpid(), self.signum)


class PoisonWeights(L.Callback):
    """Sets the first weight matrix to NaN after optimizer step `at_step`, as an overflowing update would."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if trainer.global_step == self.at_step:
            with torch.no_grad():
                next(p for p in pl_module.parameters() if p.dim() >= 2).fill_(float("nan"))


class PauseAtStep(L.Callback):
    """Holds training after optimizer step `at_step`, having touched `marker`, until StopOnSignal has noted a
    signal (or `timeout_s` passed): a test sends the signal from outside (`scancel --signal`) and knows the
    step it came at. Once: where `marker` exists already (a resumed run), it does not hold again."""

    def __init__(self, at_step: int, marker: str, timeout_s: float = 120.0) -> None:
        self.at_step = at_step
        self.marker = marker
        self.timeout_s = timeout_s

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if trainer.global_step != self.at_step or Path(self.marker).exists():
            return
        from tinylm.training.callbacks import StopOnSignal

        stop = next(c for c in trainer.callbacks if isinstance(c, StopOnSignal))
        Path(self.marker).touch()
        deadline = time.monotonic() + self.timeout_s
        while stop.received is None and time.monotonic() < deadline:
            time.sleep(0.05)
