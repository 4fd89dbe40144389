"""Steps and time to a target: the optimizer step and the training wall time at which the validation loss
first reached each of a few levels, the measure of how much a setting learns per step and per second.
Validation is not training: as in modded-nanogpt's speedrun rule, its time is left out, so a target checked
often costs no more than one checked rarely."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as L

from tinylm import checks
from tinylm.layout import VAL_LOSS, target_tags
from tinylm.training.logging_steps import write_at


class LossTargets(L.Callback):
    """At each validation, every level of `levels` (nats/char) that `loss/val` reaches for the first time gets
    `target/<level>/step` (the optimizer steps the weights had taken) and `target/<level>/time_s` (seconds of
    training since the run began, summed over resumed segments; each validation, with the checkpoints written
    at it, is left out: the clock stops when a validation starts and runs again at the next training batch),
    written to the loggers at that step and kept among the run's final metrics (metrics.json). A level never
    reached has neither. The levels reached and the time so far are saved in checkpoints, so a resumed run
    continues them. The clock starts at `on_train_start`: a compiled run's warm-up, at `on_fit_start`, is not
    in it (callbacks/warmup.py)."""

    def __init__(self, levels: Sequence[float] = ()) -> None:
        self.levels = sorted(
            (checks.number(f"callbacks.targets.levels[{i}]", v, above=0) for i, v in enumerate(levels)),
            reverse=True,
        )
        self.reached: dict[str, dict[str, float]] = {}  # f"{level:g}" -> {"step": ..., "time_s": ...}
        self._elapsed_before = 0.0  # training time of earlier segments
        self._started = time.perf_counter()
        self._excluded = 0.0  # this segment's time in validation
        self._paused_at: float | None = None

    @property
    def state_key(self) -> str:
        return "LossTargets"

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started, self._excluded, self._paused_at = time.perf_counter(), 0.0, None

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._paused_at is None:
            self._paused_at = time.perf_counter()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self._paused_at is not None:
            self._excluded += time.perf_counter() - self._paused_at
            self._paused_at = None

    def elapsed(self) -> float:
        """Seconds of training so far, validation left out (a paused clock reads its time at the pause)."""
        now = self._paused_at if self._paused_at is not None else time.perf_counter()
        return self._elapsed_before + now - self._started - self._excluded

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loss = trainer.callback_metrics.get(VAL_LOSS)
        if trainer.sanity_checking or loss is None:
            return
        now, step = self.elapsed(), trainer.global_step
        values = {}
        for level in self.levels:
            if f"{level:g}" not in self.reached and float(loss) <= level:
                self.reached[f"{level:g}"] = {"step": step, "time_s": now}
                step_tag, time_tag = target_tags(level)
                values.update({step_tag: float(step), time_tag: now})
        if values:
            write_at(trainer.loggers, values, step)
        self.publish(trainer)

    def publish(self, trainer: L.Trainer) -> None:
        """Every level reached so far among the metrics the run ends with (metrics.json)."""
        for level, at in self.reached.items():
            step_tag, time_tag = target_tags(float(level))
            trainer.callback_metrics[step_tag] = float(at["step"])
            trainer.callback_metrics[time_tag] = at["time_s"]

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.publish(trainer)  # also the levels an earlier segment reached

    def state_dict(self) -> dict[str, Any]:
        return {"reached": dict(self.reached), "elapsed": self.elapsed()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.reached = dict(state_dict.get("reached", {}))
        self._elapsed_before = float(state_dict.get("elapsed", 0.0))
