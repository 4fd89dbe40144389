"""Sampling from a trained checkpoint: `python scripts/sample.py ckpt=runs/.../ prompt="ROMEO:"`."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from tinylm.checkpoints import CheckpointError, read_checkpoint, resolve_checkpoint
from tinylm.module import LitGPT


def load_module(path: str | Path, map_location: str = "cpu") -> LitGPT:
    """Rebuild the trained model and its tokenizer from a checkpoint (or run directory) alone.

    Loading uses `weights_only=True`: a checkpoint can carry tensors and plain data, never code.
    """
    ckpt = resolve_checkpoint(path)
    read_checkpoint(ckpt)  # turns a truncated or foreign file into a clear CheckpointError first
    module = LitGPT.load_from_checkpoint(ckpt, map_location=map_location, weights_only=True)
    if module.tokenizer is None:
        raise CheckpointError(f"checkpoint {str(ckpt)!r} carries no tokenizer")
    module.eval()
    return module


def run(cfg: DictConfig) -> str:
    if not cfg.get("ckpt"):
        raise CheckpointError("say which model to sample: ckpt=<checkpoint.ckpt or run directory>")
    if cfg.chars < 0:
        raise ValueError(f"chars={cfg.chars} must be >= 0")
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    module = load_module(cfg.ckpt)
    text = module.sample(int(cfg.chars), str(cfg.prompt), float(cfg.temperature), cfg.top_k, int(cfg.seed))
    print(f"{cfg.prompt}{text}")
    return text
