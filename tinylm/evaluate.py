"""Loss and bits per character of a trained checkpoint on a text file: `python scripts/eval.py ckpt=... file=...`."""

from __future__ import annotations

import math

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from tinylm.corpora import load_corpus
from tinylm.data import FixedWindows
from tinylm.module import LitGPT
from tinylm.sample import load_module


@torch.no_grad()
def evaluate_text(
    module: LitGPT, text: str, batch_size: int = 32, max_windows: int | None = None
) -> dict[str, float]:
    """Mean next-character cross-entropy over non-overlapping `block_size` windows covering `text`."""
    assert module.tokenizer is not None
    tokens = torch.from_numpy(module.tokenizer.encode_array(text))
    windows = FixedWindows(tokens, module.model_config.block_size, max_windows)
    total, count = 0.0, 0
    for inputs, targets in DataLoader(windows, batch_size=batch_size):
        _, loss = module.model(inputs.to(module.device), targets.to(module.device))
        total += float(loss) * targets.numel()
        count += targets.numel()
    loss = total / count
    return {"loss": loss, "bpc": loss / math.log(2), "chars": count, "windows": len(windows)}


def run(cfg: DictConfig) -> dict[str, float]:
    if not cfg.get("file"):
        raise ValueError("say which text to evaluate on: file=<path to a UTF-8 text file>")
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    module = load_module(cfg.ckpt) if cfg.get("ckpt") else None
    if module is None:
        raise ValueError("say which model to evaluate: ckpt=<checkpoint.ckpt or run directory>")
    text = "".join(load_corpus("text", files=str(cfg.file))["text"])
    metrics = evaluate_text(module, text, int(cfg.batch_size), cfg.get("max_windows"))
    print(
        f"{cfg.file}: loss {metrics['loss']:.4f} nats/char, {metrics['bpc']:.4f} bits/char "
        f"over {metrics['chars']:,} chars ({metrics['windows']} windows of {module.model_config.block_size})"
    )
    return metrics
