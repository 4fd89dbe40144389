"""Validation that is training: the share of the validation split's windows whose characters also occur,
verbatim and whole, somewhere in the training split (a corpus that repeats itself validates on what it trained
on, and its validation loss then measures memory, not generalisation). Windows are compared by a polynomial
hash mod 2^64 of their tokens: one pass over the training split, a chunk at a time, whatever its size."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from tinylm.data.token_cache import TokenSpan
from tinylm.files import write_json

# Validation windows looked up: evenly spaced over the split, so a large split costs no more than this many
# (the share's binomial standard error is then at most 1.6 percentage points).
OVERLAP_SAMPLE = 1000
# The shortest window compared, in characters: shorter passages recur in any natural text by chance (a speaker's
# name and a common line), and a context of one or two characters is all repeats (docs/diagnosis.md has the
# shares measured on the corpora shipped).
OVERLAP_MIN_LENGTH = 64
# The share above which a run warns at its start and the report names it: above what the shipped corpora repeat
# of themselves, where memorised windows already move the mean validation loss (docs/diagnosis.md).
VAL_IN_TRAINING_SHARE = 0.1
# Training tokens hashed at a time (each chunk overlaps the next by a window less one token).
_CHUNK = 1 << 22
# An odd multiplier, so that it has an inverse mod 2^64 and a window's hash does not depend on its position.
_BASE = np.uint64(0x9E3779B97F4A7C15)
_INVERSE = np.uint64(pow(int(_BASE), -1, 1 << 64))


def window_hashes(tokens: np.ndarray, length: int) -> np.ndarray:
    """The hash of every window of `length` tokens of `tokens` (len(tokens) - length + 1 of them): the sum of
    token × BASE^offset, mod 2^64, the same wherever the window starts."""
    count = len(tokens) - length + 1
    if count < 1:
        return np.empty(0, np.uint64)
    with np.errstate(over="ignore"):  # the arithmetic is mod 2^64 on purpose
        values = tokens.astype(np.uint64) + np.uint64(1)
        powers = np.cumprod(np.full(len(values), _BASE, np.uint64)) * _INVERSE  # BASE^0, BASE^1, ...
        inverses = np.cumprod(np.full(count, _INVERSE, np.uint64)) * _BASE  # BASE^-0, BASE^-1, ...
        prefix = np.concatenate([np.zeros(1, np.uint64), np.cumsum(values * powers, dtype=np.uint64)])
        return (prefix[length:] - prefix[:count]) * inverses


def validation_in_training(
    train: np.ndarray | TokenSpan, val: np.ndarray | TokenSpan, length: int, sample: int = OVERLAP_SAMPLE
) -> float:
    """The share of (up to `sample` evenly spaced) validation windows of `length` tokens that occur in `train`."""
    available = len(val) - length + 1
    if available < 1 or len(train) < length:
        return 0.0
    starts = np.unique(np.linspace(0, available - 1, min(sample, available)).astype(np.int64))
    if isinstance(val, TokenSpan):
        rows = val.windows(starts, length)
    else:
        rows = np.asarray(val)[starts[:, None] + np.arange(length)]
    row_hashes = np.array([window_hashes(row, length)[0] for row in rows], dtype=np.uint64)
    wanted = np.unique(row_hashes)
    seen = np.zeros(len(wanted), dtype=bool)
    for first in range(0, len(train) - length + 1, _CHUNK):
        chunk = np.asarray(train[first : min(len(train), first + _CHUNK + length - 1)])
        hashes = window_hashes(chunk, length)
        where = np.searchsorted(wanted, hashes).clip(max=len(wanted) - 1)
        seen[where[wanted[where] == hashes]] = True
    return float(np.isin(row_hashes, wanted[seen]).mean())


def cached_validation_in_training(
    tokens_file: str | Path, train: np.ndarray | TokenSpan, val: np.ndarray | TokenSpan, length: int
) -> float:
    """`validation_in_training`, computed once per token file, split and window length (as the reference
    levels are): a large corpus is hashed through once, not at every run's start."""
    path = Path(f"{tokens_file}.overlap-{len(train)}-{len(val)}-{length}-{OVERLAP_SAMPLE}.json")
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["share"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    share = validation_in_training(train, val, length)
    with contextlib.suppress(OSError):  # a read-only cache still gives the share, computed again next time
        write_json(path, {"share": share})
    return share
