"""The settings of a training run that plain Python can check from the config alone, checked before torch and
Lightning load: `trainer.max_steps=abc` is refused in a moment, not after seconds of imports. `run(cfg)`
applies the same rules (settings.py), for the callers that do not come through a script."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tinylm import checks


def check_step_counts(trainer: Mapping[str, Any]) -> None:
    """The trainer settings that count optimizer steps: training windows are an endless stream, so steps, not
    epochs, end a run, and intervals are whole steps."""
    checks.whole_number(
        "trainer.max_steps",
        trainer.get("max_steps"),
        hint="training windows are an endless stream: max_steps is what ends a run",
    )
    # In optimizer steps: an endless stream has no epochs to take a fraction of.
    checks.whole_number("trainer.val_check_interval", trainer.get("val_check_interval"))
    checks.whole_number("trainer.log_every_n_steps", trainer.get("log_every_n_steps"))


def check_before_imports(cfg: DictConfig) -> None:
    """What scripts/train.py checks before it imports torch and Lightning."""
    trainer = cfg.get("trainer")
    check_step_counts(OmegaConf.to_container(trainer, resolve=True) if trainer is not None else {})
    checks.whole_number("seed", cfg.get("seed"), minimum=0)
