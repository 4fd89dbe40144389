"""Sampling from a trained checkpoint: `python scripts/sample.py ckpt=runs/.../ prompt="ROMEO:"`."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from tinylm.checkpoints import CheckpointError, checkpoint_model_config, read_checkpoint, resolve_checkpoint
from tinylm.data import VocabularyError
from tinylm.errors import ConfigError
from tinylm.module import LitGPT


def load_module(path: str | Path, map_location: str = "cpu") -> LitGPT:
    """Rebuild the trained model and its tokenizer from a checkpoint (or run directory) alone.

    Loading uses `weights_only=True`: a checkpoint can carry tensors and plain data, never code.
    """
    ckpt = resolve_checkpoint(path)
    # Turns a truncated, foreign or malicious file, or one without a usable model config, into a clear
    # CheckpointError before Lightning touches it.
    checkpoint_model_config(read_checkpoint(ckpt), ckpt)
    module = LitGPT.load_from_checkpoint(ckpt, map_location=map_location, weights_only=True)
    if module.tokenizer is None:
        raise CheckpointError(f"checkpoint {str(ckpt)!r} carries no tokenizer; use one written by tinylm")
    module.eval()
    return module


def check_sampling_settings(cfg: DictConfig) -> None:
    if not cfg.get("ckpt"):
        raise CheckpointError("say which model to sample: ckpt=<checkpoint.ckpt or run directory>")
    if isinstance(cfg.chars, bool) or not isinstance(cfg.chars, int) or cfg.chars < 0:
        raise ConfigError(f"chars={cfg.chars!r} must be a whole number >= 0")
    if (
        isinstance(cfg.temperature, bool)
        or not isinstance(cfg.temperature, int | float)
        or cfg.temperature <= 0
    ):
        raise ConfigError(
            f"temperature={cfg.temperature!r} must be a number > 0 (1 samples as trained, lower is safer)"
        )
    top_k = cfg.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0):
        raise ConfigError(f"top_k={top_k!r} must be a positive whole number, or null for no cut-off")
    if cfg.prompt is None or str(cfg.prompt) == "":
        raise ConfigError(
            "prompt= must hold at least one character, e.g. prompt='ROMEO:' (the default is a newline)"
        )


def run(cfg: DictConfig) -> str:
    check_sampling_settings(cfg)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
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
