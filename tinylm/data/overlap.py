"""Validation that is training: the share of the validation split's characters that lie in a passage found
verbatim in the training split (a corpus that repeats itself validates on what it trained on, and its
validation loss then measures memory, not generalisation). A passage is a window of a fixed length, or a whole
line (between two line breaks) of at least OVERLAP_MIN_LINE characters: a single line copied, shorter than a
window, is found too. Passages are compared by a polynomial hash mod 2^64 of their tokens: one pass over the
training split, a chunk at a time, whatever its size."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from tinylm.data.token_cache import TokenSpan
from tinylm.files import write_json

# Validation characters looked up: evenly spaced over the split, so a large split costs no more than this many
# (the share's binomial standard error is then at most 1.6 percentage points).
OVERLAP_SAMPLE = 1000
# The shortest window compared, in characters: shorter passages recur in any natural text by chance (a speaker's
# name and a common line), and a context of one or two characters is all repeats (docs/diagnosis.md has the
# shares measured on the corpora shipped).
OVERLAP_MIN_LENGTH = 64
# The shortest line compared whole, in characters, not counting its line break: the shipped plays repeat shorter
# lines as a matter of course (a speaker's `ROMEO:`, `Exeunt`, `My lord?`), a line of 20 or more only by chance
# (docs/diagnosis.md has the shares at each length).
OVERLAP_MIN_LINE = 20
# Training tokens hashed at a time (each chunk overlaps the next by two windows, so a short line is whole in one).
_CHUNK = 1 << 22
# The top bits of a hash that index the filter of hashes looked for (4M flags: a wanted share of under 2%).
_FILTER_BITS = 22
# An odd multiplier, so that it has an inverse mod 2^64 and a passage's hash does not depend on its position.
_BASE = np.uint64(0x9E3779B97F4A7C15)
_INVERSE = np.uint64(pow(int(_BASE), -1, 1 << 64))


def _prefix_sums(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Along the last axis, the prefix sums of token × BASE^position, mod 2^64 (one more than the tokens), and
    BASE^-position: the hash of tokens[a:b] is (prefix[b] - prefix[a]) × inverse[a], the same wherever the
    passage starts."""
    length = tokens.shape[-1]
    with np.errstate(over="ignore"):  # the arithmetic is mod 2^64 on purpose
        values = tokens.astype(np.uint64) + np.uint64(1)
        powers = np.cumprod(np.full(length, _BASE, np.uint64)) * _INVERSE  # BASE^0, BASE^1, ...
        inverses = np.cumprod(np.full(length, _INVERSE, np.uint64)) * _BASE  # BASE^-0, BASE^-1, ...
        zeros = np.zeros((*tokens.shape[:-1], 1), np.uint64)
        prefix = np.concatenate([zeros, np.cumsum(values * powers, axis=-1, dtype=np.uint64)], axis=-1)
    return prefix, inverses


def _hashes(prefix: np.ndarray, inverses: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The hashes of tokens[starts:stops] from `_prefix_sums` (of one sequence, or of rows: then `starts` and
    `stops` are a column per row, or one row for all)."""
    with np.errstate(over="ignore"):
        if prefix.ndim == 1:
            return (prefix[stops] - prefix[starts]) * inverses[starts]
        return (np.take_along_axis(prefix, np.broadcast_to(stops, (len(prefix), stops.shape[-1])), 1)
                - np.take_along_axis(prefix, np.broadcast_to(starts, (len(prefix), starts.shape[-1])), 1)
                ) * inverses[starts]  # fmt: skip


def window_hashes(tokens: np.ndarray, length: int) -> np.ndarray:
    """The hash of every window of `length` tokens of `tokens` (len(tokens) - length + 1 of them): the sum of
    token × BASE^offset, mod 2^64, the same wherever the window starts."""
    count = len(tokens) - length + 1
    if count < 1:
        return np.empty(0, np.uint64)
    starts = np.arange(count)
    return _hashes(*_prefix_sums(tokens), starts, starts + length)


def _line_hashes(tokens: np.ndarray, newline: int, prefix: np.ndarray, inverses: np.ndarray) -> np.ndarray:
    """The hash of every whole line of `tokens` at least OVERLAP_MIN_LINE long, with the line breaks on both
    sides (so a line matches a whole line only, not the end of a longer one)."""
    breaks = np.flatnonzero(tokens == newline)
    starts, stops = breaks[:-1], breaks[1:] + 1
    long_enough = stops - starts - 2 >= OVERLAP_MIN_LINE
    return _hashes(prefix, inverses, starts[long_enough], stops[long_enough])


def validation_in_training(
    train: np.ndarray | TokenSpan,
    val: np.ndarray | TokenSpan,
    length: int,
    newline: int | None = None,
    sample: int = OVERLAP_SAMPLE,
) -> float:
    """The share of (up to `sample` evenly spaced) validation characters that lie in a passage occurring
    verbatim in `train`: a window of `length` tokens, or a whole line (between two `newline` tokens; None: the
    corpus has none) of at least OVERLAP_MIN_LINE tokens. A line break belongs to the line it ends."""
    size = len(val)
    if size < 1 or len(train) < 1:
        return 0.0
    # Around each sampled character, every window that covers it; a line shorter than a window fits too (a
    # longer one that occurs in training is covered by its windows).
    span = min(2 * length - 1, size)
    positions = np.unique(np.linspace(0, size - 1, min(sample, size)).astype(np.int64))
    firsts = np.clip(positions - length + 1, 0, size - span)
    if isinstance(val, TokenSpan):
        rows = val.windows(firsts, span)
    else:
        rows = np.asarray(val)[firsts[:, None] + np.arange(span)]
    prefix, inverses = _prefix_sums(rows)
    offsets = np.arange(span)
    at = (positions - firsts)[:, None]  # where the sampled character sits in its row
    count = max(span - length + 1, 0)
    windows = _hashes(prefix, inverses, offsets[:count], offsets[:count] + length)
    covering = (offsets[:count] > at - length) & (offsets[:count] <= at)
    if newline is not None:  # the line break before the character, and the one at or after it
        breaks = rows == newline
        before = np.where(breaks & (offsets < at), offsets, -1).max(axis=1)
        after = np.where(breaks & (offsets >= at), offsets, span).min(axis=1)
        whole = (before >= 0) & (after < span) & (after - before - 1 >= OVERLAP_MIN_LINE)
        lines = _hashes(prefix, inverses, before.clip(min=0)[:, None], np.minimum(after + 1, span)[:, None])
    else:
        whole = np.zeros(len(rows), dtype=bool)
        lines = np.zeros((len(rows), 1), dtype=np.uint64)
    found_windows, found_lines = _found_in(train, windows[covering], lines[whole, 0], length, newline)
    covered = (np.isin(windows, found_windows) & covering).any(axis=1) | (
        np.isin(lines[:, 0], found_lines) & whole
    )
    return float(covered.mean())


def _found_in(
    train: np.ndarray | TokenSpan, windows: np.ndarray, lines: np.ndarray, length: int, newline: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Those of the hashes of windows of `length` and of whole lines that occur in `train`: one pass."""
    wanted = [np.unique(windows), np.unique(lines)]
    seen = [np.zeros(len(hashes), dtype=bool) for hashes in wanted]
    # A flag per value of a hash's top bits: most training hashes are ruled out by one look-up, and only the
    # few left are searched for (a binary search of every one was most of the cost).
    shift = np.uint64(64 - _FILTER_BITS)
    filters = [np.zeros(1 << _FILTER_BITS, dtype=bool) for _ in wanted]
    for flags, known in zip(filters, wanted, strict=True):
        flags[known >> shift] = True
    for first in range(0, len(train), _CHUNK):
        chunk = np.asarray(train[first : min(len(train), first + _CHUNK + 2 * length)])
        prefix, inverses = _prefix_sums(chunk)
        starts = np.arange(max(len(chunk) - length + 1, 0))
        found = [
            _hashes(prefix, inverses, starts, starts + length),
            _line_hashes(chunk, newline, prefix, inverses) if newline is not None else np.empty(0, np.uint64),
        ]
        for known, marks, flags, hashes in zip(wanted, seen, filters, found, strict=True):
            if len(known):
                hashes = hashes[flags[hashes >> shift]]
                where = np.searchsorted(known, hashes).clip(max=len(known) - 1)
                marks[where[known[where] == hashes]] = True
    return wanted[0][seen[0]], wanted[1][seen[1]]


def cached_validation_in_training(
    tokens_file: str | Path,
    train: np.ndarray | TokenSpan,
    val: np.ndarray | TokenSpan,
    length: int,
    newline: int | None,
) -> float:
    """`validation_in_training`, computed once per token file, split and window length (as the reference
    levels are): a large corpus is hashed through once, not at every run's start."""
    path = Path(
        f"{tokens_file}.overlap-chars-{len(train)}-{len(val)}-{length}-{OVERLAP_MIN_LINE}-{OVERLAP_SAMPLE}.json"
    )
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["share"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    share = validation_in_training(train, val, length, newline)
    with contextlib.suppress(OSError):  # a read-only cache still gives the share, computed again next time
        write_json(path, {"share": share})
    return share
