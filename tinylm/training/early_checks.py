"""The part of a training run's settings that plain Python can check from the config alone, checked here and
nowhere else, before torch and Lightning load: `trainer.max_steps=abc` is refused in a moment, not after
seconds of imports. scripts/train.py checks them at its boundary and hands the result on;
`RunSettings.from_cfg` checks them for the callers that do not come through the script. The rest of the
schema: settings.py. The one check made twice: a local corpus's files, here before `datasets` loads, and where
tinylm/data reads them, for its callers that never come through training (scripts/eval.py, the probe)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from tinylm import checks
from tinylm.layout import METRICS


@dataclass(frozen=True)
class EarlySettings:
    """The settings checked before torch loads, as checked."""

    seed: int
    # The trainer settings that count optimizer steps, by their `trainer.` name: training windows are an
    # endless stream, so steps, not epochs, end a run, and intervals are whole steps.
    steps: dict[str, int]
    # The metric a run hands its sweeper (None: none), one of the metrics a run records.
    optimized_metric: str | None = None


def check_before_imports(cfg: DictConfig) -> EarlySettings:
    """Check the step counts, the seed, the optimized metric and a local corpus's files; what scripts/train.py
    runs before it imports torch and Lightning."""
    trainer = cfg.get("trainer")
    values: dict[str, Any] = OmegaConf.to_container(trainer, resolve=True) if trainer is not None else {}
    steps = {
        "max_steps": checks.whole_number(
            "trainer.max_steps",
            values.get("max_steps"),
            hint="training windows are an endless stream: max_steps is what ends a run",
        ),
        # In optimizer steps: an endless stream has no epochs to take a fraction of.
        "val_check_interval": checks.whole_number(
            "trainer.val_check_interval", values.get("val_check_interval")
        ),
        "log_every_n_steps": checks.whole_number(
            "trainer.log_every_n_steps", values.get("log_every_n_steps")
        ),
    }
    metric = cfg.get("optimized_metric")
    _check_local_corpus(cfg.get("data"))
    return EarlySettings(
        seed=checks.whole_number("seed", cfg.get("seed"), minimum=0),
        steps=steps,
        optimized_metric=None if metric is None else checks.choice("optimized_metric", metric, METRICS),
    )


def _check_local_corpus(data: DictConfig | None) -> None:
    """A local corpus file that is not there is refused here, naming its key: the corpora import `datasets`,
    and a run reaches them only after torch and Lightning have loaded."""
    if data is None:
        return
    source = data.get("source")
    if source == "text" and data.get("files"):
        files = data.files
        files = OmegaConf.to_container(files, resolve=True) if isinstance(files, ListConfig) else files
        checks.text_files([files] if isinstance(files, str) else list(files), "data.files")
    elif source == "tinyshakespeare" and data.get("path"):
        checks.text_files([data.path], "data.path")
