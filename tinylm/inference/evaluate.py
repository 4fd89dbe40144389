"""Loss and bits per character of a trained checkpoint on a text file: `python scripts/eval.py ckpt=... file=...`."""

from __future__ import annotations

import math
import sys

import numpy as np
from omegaconf import DictConfig
from tqdm.auto import tqdm

from tinylm import checks
from tinylm.data import CharTokenizer, CorpusError, FixedWindows, VocabularyError, load_corpus
from tinylm.data.token_cache import TokenSpan, corpus_tokens
from tinylm.errors import ConfigError
from tinylm.inference.trained import load_model
from tinylm.layout import CheckpointError
from tinylm.model import GPT
from tinylm.model.evaluation import window_losses


def evaluate_text(
    model: GPT, tokenizer: CharTokenizer, text: str, batch_size: int = 32, max_windows: int | None = None
) -> dict[str, float]:
    """Mean next-character cross-entropy over non-overlapping `block_size` windows covering `text`."""
    return evaluate_tokens(model, tokenizer.encode_array(text), batch_size, max_windows)


def evaluate_tokens(
    model: GPT,
    tokens: np.ndarray | TokenSpan,
    batch_size: int = 32,
    max_windows: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """Mean next-character cross-entropy over non-overlapping `block_size` windows covering `tokens`, on
    whatever device the model is; the model's train/eval mode is restored."""
    block_size = model.config.block_size
    if len(tokens) <= block_size:
        raise CorpusError(
            f"the text has {len(tokens)} characters, fewer than one window of block_size+1={block_size + 1}; "
            "evaluate on a longer text"
        )
    windows = FixedWindows(tokens, block_size, max_windows)
    batches = windows.batches(batch_size)
    if progress:
        batches = tqdm(batches, total=math.ceil(len(windows) / batch_size), desc="evaluating", unit="batch",
                       file=sys.stderr, disable=None)  # fmt: skip
    # Every window holds block_size characters: the mean over windows is the mean over characters.
    loss = float(window_losses(model, batches).mean())
    count = len(windows) * block_size
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
    trained = load_model(cfg.ckpt)
    try:
        tokens, _ = corpus_tokens(corpus, trained.tokenizer)
        metrics = evaluate_tokens(
            trained.gpt, tokens, int(cfg.batch_size), cfg.get("max_windows"), progress=True
        )
    except VocabularyError as err:
        raise CorpusError(
            f"{cfg.file} has characters the model never saw: {err.unknown!r}; evaluate on text made of the "
            f"{trained.tokenizer.vocab_size} characters of its training corpus"
        ) from None
    print(
        f"{cfg.file}: loss {metrics['loss']:.4f} nats/char, {metrics['bpc']:.4f} bits/char "
        f"over {metrics['chars']:,} chars ({metrics['windows']} windows of {trained.config.block_size})"
    )
    return metrics
