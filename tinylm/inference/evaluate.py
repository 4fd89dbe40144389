"""Loss and bits per character of a trained checkpoint on a text file: `python scripts/eval.py ckpt=... file=...`."""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from tinylm import checks
from tinylm.data import CorpusError, FixedWindows, VocabularyError, load_corpus
from tinylm.data.token_cache import corpus_tokens
from tinylm.errors import ConfigError
from tinylm.training.checkpoints import CheckpointError, load_module
from tinylm.training.module import CharLM


def evaluate_text(
    module: CharLM, text: str, batch_size: int = 32, max_windows: int | None = None
) -> dict[str, float]:
    """Mean next-character cross-entropy over non-overlapping `block_size` windows covering `text`."""
    assert module.tokenizer is not None
    return evaluate_tokens(module, module.tokenizer.encode_array(text), batch_size, max_windows)


@torch.no_grad()
def evaluate_tokens(
    module: CharLM,
    tokens: np.ndarray,
    batch_size: int = 32,
    max_windows: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """Mean next-character cross-entropy over non-overlapping `block_size` windows covering `tokens`."""
    block_size = module.model_config.block_size
    if len(tokens) <= block_size:
        raise CorpusError(
            f"the text has {len(tokens)} characters, fewer than one window of block_size+1={block_size + 1}; "
            "evaluate on a longer text"
        )
    windows = FixedWindows(tokens, block_size, max_windows)
    total, count = 0.0, 0
    batches = windows.batches(batch_size)
    if progress:
        batches = tqdm(batches, total=math.ceil(len(windows) / batch_size), desc="evaluating", unit="batch",
                       file=sys.stderr, disable=None)  # fmt: skip
    module.eval()
    for inputs, targets in batches:
        _, loss = module.model(inputs.to(module.device), targets.to(module.device))
        total += float(loss) * targets.numel()
        count += targets.numel()
    loss = total / count
    return {"loss": loss, "bpc": loss / math.log(2), "chars": count, "windows": len(windows)}


def run(cfg: DictConfig) -> dict[str, float]:
    if not cfg.get("ckpt"):
        raise CheckpointError("say which model to evaluate: ckpt=<checkpoint.ckpt or run directory>")
    if not cfg.get("file"):
        raise ConfigError("say which text to evaluate on: file=<path to a UTF-8 text file>")
    checks.whole_number("batch_size", cfg.get("batch_size"))
    if cfg.get("max_windows") is not None:
        checks.whole_number("max_windows", cfg.max_windows)
    corpus = load_corpus("text", files=str(cfg.file))
    module = load_module(cfg.ckpt)
    try:
        tokens, _ = corpus_tokens(corpus, module.tokenizer)
        metrics = evaluate_tokens(module, tokens, int(cfg.batch_size), cfg.get("max_windows"), progress=True)
    except VocabularyError as err:
        raise CorpusError(
            f"{cfg.file} has characters the model never saw: {err.unknown!r}; evaluate on text made of the "
            f"{module.tokenizer.vocab_size} characters of its training corpus"
        ) from None
    print(
        f"{cfg.file}: loss {metrics['loss']:.4f} nats/char, {metrics['bpc']:.4f} bits/char "
        f"over {metrics['chars']:,} chars ({metrics['windows']} windows of {module.model_config.block_size})"
    )
    return metrics
