"""What a report compares each run on (`--metric`): its final validation loss (the default), or the optimizer
steps or training seconds at which its validation loss first reached a level (metrics.json's `target/...`)."""

from __future__ import annotations

from dataclasses import dataclass

from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.layout import target_tags

LOSS, STEPS_TO, TIME_TO = "loss", "steps_to", "time_to"
# δ by default, in the metric's units: the smallest difference worth a claim (report.py --min-effect).
DEFAULT_MIN_EFFECT = {LOSS: MIN_EFFECT, STEPS_TO: 50.0, TIME_TO: 10.0}


@dataclass(frozen=True)
class Metric:
    """The loss (`level` None), or the steps or seconds to `level` nats/char."""

    kind: str = LOSS
    level: float | None = None

    @property
    def is_loss(self) -> bool:
        return self.kind == LOSS

    @property
    def flag(self) -> str:
        """As `--metric` names it: `loss`, `steps_to=1.88`."""
        return self.kind if self.level is None else f"{self.kind}={self.level:g}"

    @property
    def tag(self) -> str | None:
        """The key of a run's result in its metrics.json, for a level (None: the loss, read as ever)."""
        if self.level is None:
            return None
        step, time_s = target_tags(self.level)
        return step if self.kind == STEPS_TO else time_s

    @property
    def noun(self) -> str:
        """`final validation loss`, `steps to 1.88`, `seconds to 1.88`."""
        if self.level is None:
            return "final validation loss"
        return f"{'steps' if self.kind == STEPS_TO else 'seconds'} to {self.level:g}"

    @property
    def units(self) -> str:
        return {LOSS: "nats/char", STEPS_TO: "steps", TIME_TO: "s"}[self.kind]

    @property
    def lower(self) -> str:
        """What a difference below 0 means."""
        return {LOSS: "a lower loss", STEPS_TO: "fewer steps", TIME_TO: "less time"}[self.kind]

    @property
    def min_effect(self) -> float:
        return DEFAULT_MIN_EFFECT[self.kind]

    @property
    def digits(self) -> int:
        """Decimals of a mean or a difference as the report prints it."""
        return 4 if self.is_loss else 1


FINAL_LOSS = Metric()
