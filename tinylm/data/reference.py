"""What a model that ignores most of its context would reach on the validation split: the reference levels a
run's loss is read against (docs/sweeps.md). A run stalled at the unigram level has learned the characters'
frequencies and nothing else.

- uniform: ln V, every character equally likely;
- unigram: the training split's character frequencies (add-one smoothed, so that no character is impossible);
- bigram: the next character given the previous one, counted on the training split and smoothed toward the
  unigram with `BIGRAM_PRIOR` pseudo-counts per previous character (the first character by the unigram).

All three are cross-entropies on the validation split, in nats/char, estimated on the training split. They
are cached beside the corpus's token cache, keyed by the split.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tinylm.data.token_cache import TokenSpan
from tinylm.files import write_json

# Pseudo-counts of the unigram added to every previous character's counts: enough that a pair never seen in
# training is possible, few enough that a frequent character's own counts dominate.
BIGRAM_PRIOR = 10.0


@dataclass(frozen=True)
class ReferenceLevels:
    uniform: float
    unigram: float
    bigram: float


def reference_levels(
    train: np.ndarray | TokenSpan, val: np.ndarray | TokenSpan, vocab_size: int, chunk: int = 1 << 22
) -> ReferenceLevels:
    """The three levels of `val` (token ids) under models counted on `train`, read `chunk` tokens at a time:
    the splits may be far larger than memory (a 2 GB corpus as int64 pairs is 32 GB)."""
    unigram_counts = np.zeros(vocab_size, dtype=np.int64)
    pair_counts = np.zeros(vocab_size * vocab_size, dtype=np.int64)
    for start in range(0, len(train), chunk):
        # One token past the chunk: the pair across the seam is counted once.
        piece = np.asarray(train[start : start + chunk + 1], dtype=np.int64)
        unigram_counts += np.bincount(piece[:chunk], minlength=vocab_size)
        pair_counts += np.bincount(piece[:-1] * vocab_size + piece[1:], minlength=vocab_size * vocab_size)
    unigram = (unigram_counts + 1.0) / (len(train) + vocab_size)
    pairs = pair_counts.reshape(vocab_size, vocab_size).astype(np.float64)
    bigram = (pairs + BIGRAM_PRIOR * unigram) / (pairs.sum(axis=1, keepdims=True) + BIGRAM_PRIOR)
    unigram_nats = bigram_nats = -math.log(
        unigram[int(val[:1][0])]
    )  # the first character has no previous one
    for start in range(0, len(val), chunk):
        piece = np.asarray(val[start : start + chunk + 1], dtype=np.int64)
        unigram_nats -= float(np.log(unigram[piece[1:]]).sum())
        bigram_nats -= float(np.log(bigram[piece[:-1], piece[1:]]).sum())
    return ReferenceLevels(math.log(vocab_size), unigram_nats / len(val), bigram_nats / len(val))


def cached_reference_levels(
    tokens_file: str | Path, train: np.ndarray | TokenSpan, val: np.ndarray | TokenSpan, vocab_size: int
) -> ReferenceLevels:
    """`reference_levels`, computed once per token file and split: the corpus can be far larger than memory
    is quick to count through."""
    path = Path(f"{tokens_file}.levels-{len(train)}-{len(val)}.json")
    try:
        return ReferenceLevels(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pass
    levels = reference_levels(train, val, vocab_size)
    with contextlib.suppress(OSError):  # a read-only cache still gives the levels, computed again next time
        write_json(path, asdict(levels))
    return levels
