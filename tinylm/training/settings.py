"""The schema of a training run's settings: typed sections (ModelConfig in tinylm/model, DataConfig in
tinylm/data, OptimConfig in optimizers.py, SampleConfig, the Trainer's keyword arguments), each checked once,
when the run starts, with messages that name the user's key (`optim.lr=0 must be a number > 0`). The step
counts, the seed and the optimized metric come checked from early_checks.py (before torch loads);
`RunSettings.from_cfg` is the one place that checks them for a caller that did not. Nothing after this module
re-checks a setting. The settings dataclasses, not Hydra's structured configs: they already name the user's key
in one line, check ranges and pairs of settings, and ModelConfig is rebuilt from a checkpoint without Hydra."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import lightning.pytorch as L
from omegaconf import DictConfig, OmegaConf, open_dict

from tinylm import checks
from tinylm.data import CharTokenizer, DataConfig, VocabularyError
from tinylm.errors import ConfigError
from tinylm.model import ModelConfig
from tinylm.training.distributed import strategy_splits_matrices
from tinylm.training.early_checks import EarlySettings, check_before_imports
from tinylm.training.optimizers import OptimConfig
from tinylm.training.precision import FULL_FP32, describe_precision, resolve_precision


@dataclass
class SampleConfig:
    """The sample printed after training (and 200 characters of it in TensorBoard at each validation)."""

    chars: int = 500
    prompt: str | None = None  # None: the tokenizer's default prompt
    temperature: float = 0.8
    top_k: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks.sampling(asdict(self), prefix="sample.")

    def prompt_for(self, tokenizer: CharTokenizer) -> str:
        """The prompt as the tokenizer can read it: a prompt the model cannot read is refused before training."""
        if self.prompt is None:
            return tokenizer.default_prompt
        try:
            tokenizer.encode(str(self.prompt))
        except VocabularyError as err:
            raise ConfigError(
                f"sample.prompt has characters the corpus does not: {err.unknown!r}; use only characters of "
                f"the corpus ({tokenizer.vocab_size} characters), or leave sample.prompt unset"
            ) from None
        return str(self.prompt)


# The trainer section's settings: the keyword arguments of Lightning's Trainer (which checks their values).
TRAINER_KEYS = frozenset(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
# Keys of a section that follow another setting, refused as settings of their own, and why: the run sets them
# from the one setting they follow.
FOLLOWING = {
    "data.block_size": "did you mean model.block_size? (the windows are the model's context)",
    "model.vocab_size": "the vocabulary is the corpus's characters, read from the corpus",
}


def section(cfg: DictConfig, name: str, settings: type | Iterable[str], see: str = "") -> dict[str, Any]:
    """The section `name` of `cfg`, resolved, each key a setting of it (`settings`: the keys, or a dataclass
    whose fields they are, less those FOLLOWING others), else a `ConfigError` naming the key."""
    values = OmegaConf.to_container(cfg[name], resolve=True) if cfg.get(name) is not None else {}
    for key in values:
        if f"{name}.{key}" in FOLLOWING:
            raise ConfigError(f"{name}.{key} is not a setting; {FOLLOWING[f'{name}.{key}']}")
    keys = [f.name for f in fields(settings)] if isinstance(settings, type) else settings
    checks.known_keys(f"{name}.", values, [key for key in keys if f"{name}.{key}" not in FOLLOWING], see)
    return values


def trainer_settings(trainer: dict[str, Any], steps: dict[str, int]) -> dict[str, Any]:
    """The `trainer` section: keyword arguments of `lightning.pytorch.Trainer`, its step counts as
    early_checks.py checked them, and `precision: auto` resolved to what this machine runs."""
    precision = resolve_precision(trainer.get("precision", FULL_FP32), trainer.get("accelerator", "auto"))
    return {**trainer, **steps, "precision": precision}


@dataclass
class RunSettings:
    """Every section of a training run, checked. `cfg` is the composed config with `trainer.precision`
    resolved (`auto` made concrete), as config.yaml saves it."""

    cfg: DictConfig
    run_dir: Path
    seed: int
    model: ModelConfig  # checked; the run's model has the corpus's vocabulary (run.build_module)
    optim: OptimConfig
    data: DataConfig
    trainer: dict[str, Any]
    sample: SampleConfig
    precision_reason: str
    ckpt_path: str | None = None
    compile: bool = False
    # Training steps a compiled run takes, and undoes, before its clock starts (callbacks/warmup.py).
    compile_warmup_steps: int = 2
    multirun: bool = False  # a job of a Hydra multirun (`-m`)

    @classmethod
    def from_cfg(
        cls, cfg: DictConfig, early: EarlySettings | None = None, multirun: bool = False
    ) -> RunSettings:
        """`early`: the settings scripts/train.py checked before torch loaded; None checks them here (a
        caller that does not come through the script)."""
        early = early or check_before_imports(cfg)
        requested = section(cfg, "trainer", TRAINER_KEYS, see=" of Lightning's Trainer")
        trainer = trainer_settings(requested, early.steps)
        model = ModelConfig(**section(cfg, "model", ModelConfig))
        optim = OptimConfig(**section(cfg, "optim", OptimConfig))
        data = DataConfig(**section(cfg, "data", DataConfig), block_size=model.block_size)
        if optim.name == "muon" and strategy_splits_matrices(trainer.get("strategy")):
            raise ConfigError(
                f"optim.name=muon cannot train with trainer.strategy={trainer['strategy']}: Muon orthogonalises "
                "whole weight matrices and this strategy splits them over the ranks; use optim=adamw, or "
                "trainer=ddp"
            )
        accelerator = trainer.get("accelerator", "auto")
        return cls(
            cfg=with_precision(cfg, trainer["precision"]),
            run_dir=Path(str(cfg.run_dir)),
            seed=early.seed,
            model=model,
            optim=optim,
            data=data,
            trainer=trainer,
            sample=SampleConfig(**section(cfg, "sample", SampleConfig)),
            precision_reason=describe_precision(
                requested.get("precision", FULL_FP32), trainer["precision"], accelerator
            ),
            ckpt_path=cfg.get("ckpt_path") or None,
            compile=checks.boolean("compile", cfg.get("compile", False)),
            compile_warmup_steps=checks.whole_number(
                "compile_warmup_steps", cfg.get("compile_warmup_steps", 2), minimum=0, hint="0: no warm-up"
            ),
            multirun=multirun,
        )


def with_precision(cfg: DictConfig, precision: str | int) -> DictConfig:
    """A copy of `cfg` with `trainer.precision` as the run resolved it (what config.yaml saves)."""
    resolved = cfg.copy()
    with open_dict(resolved):
        resolved.trainer = cfg.trainer.copy()
        resolved.trainer.precision = precision
    return resolved
