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

from tinylm.files import write_json

# Pseudo-counts of the unigram added to every previous character's counts: enough that a pair never seen in
# training is possible, few enough that a frequent character's own counts dominate.
BIGRAM_PRIOR = 10.0


@dataclass(frozen=True)
class ReferenceLevels:
    uniform: float
    unigram: float
    bigram: float


def reference_levels(train: np.ndarray, val: np.ndarray, vocab_size: int) -> ReferenceLevels:
    """The three levels of `val` (token ids) under models counted on `train`."""
    train, val = np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
    unigram = (np.bincount(train, minlength=vocab_size) + 1.0) / (len(train) + vocab_size)
    pairs = np.bincount(train[:-1] * vocab_size + train[1:], minlength=vocab_size * vocab_size)
    pairs = pairs.reshape(vocab_size, vocab_size).astype(np.float64)
    bigram = (pairs + BIGRAM_PRIOR * unigram) / (pairs.sum(axis=1, keepdims=True) + BIGRAM_PRIOR)
    log_unigram = np.log(unigram[val])
    log_bigram = np.concatenate([log_unigram[:1], np.log(bigram[val[:-1], val[1:]])])
    return ReferenceLevels(math.log(vocab_size), float(-log_unigram.mean()), float(-log_bigram.mean()))


def cached_reference_levels(
    tokens_file: str | Path, train: np.ndarray, val: np.ndarray, vocab_size: int
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
