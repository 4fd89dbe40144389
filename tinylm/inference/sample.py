"""Sampling from a trained checkpoint: `python scripts/sample.py ckpt=runs/.../ prompt="ROMEO:"`."""

from __future__ import annotations

from omegaconf import DictConfig

from tinylm import checks
from tinylm.data import VocabularyError
from tinylm.errors import ConfigError
from tinylm.training.checkpoints import CheckpointError, load_module


def check_sampling_settings(cfg: DictConfig) -> None:
    if not cfg.get("ckpt"):
        raise CheckpointError("say which model to sample: ckpt=<checkpoint.ckpt or run directory>")
    checks.whole_number("chars", cfg.chars, minimum=0)
    checks.number("temperature", cfg.temperature, above=0, hint="1 samples as trained, lower is safer")
    if cfg.get("top_k") is not None:
        checks.whole_number("top_k", cfg.top_k, hint="or null for no cut-off")
    checks.whole_number("seed", cfg.get("seed"), minimum=0)
    if cfg.prompt is None or str(cfg.prompt) == "":
        raise ConfigError(
            "prompt= must hold at least one character, e.g. prompt='ROMEO:' (the default is a newline)"
        )


def run(cfg: DictConfig) -> str:
    check_sampling_settings(cfg)
    module = load_module(cfg.ckpt)
    assert module.tokenizer is not None
    try:
        module.tokenizer.encode(str(cfg.prompt))
    except VocabularyError as err:
        raise ConfigError(
            f"the prompt has characters the model never saw: {err.unknown!r}; use only characters of its "
            f"training corpus ({module.tokenizer.vocab_size} characters)"
        ) from None
    text = module.sample(int(cfg.chars), str(cfg.prompt), float(cfg.temperature), cfg.top_k, int(cfg.seed))
    print(f"{cfg.prompt}{text}")
    return text
