"""A corpus tokenised once into a compact array on disk (uint8 while the vocabulary fits, else uint16 or
uint32), read a window at a time, so a corpus far larger than memory trains like a small one (docs/cli.md). One
directory per corpus identity holds `vocab.json` and a token file per tokenizer, each written atomically: a
killed run leaves no half-written cache, and two runs tokenising at once each write a complete copy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import datasets
import numpy as np

from tinylm.data.corpora import Corpus, CorpusError, scan_characters
from tinylm.data.tokenizer import CharTokenizer, VocabularyError
from tinylm.files import write_atomically

log = logging.getLogger(__name__)

VOCABULARY = "vocab.json"


def cache_root() -> Path:
    return Path(datasets.config.HF_DATASETS_CACHE) / "tinylm-tokens"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def token_dtype(vocab_size: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise CorpusError(f"a vocabulary of {vocab_size:,} characters is too large for a character model")


@dataclass(frozen=True)
class TokenSpan:
    """Tokens [start, stop) of a token file, read with plain file reads, never memory-mapped: the page cache
    keeps a file read from start to end in large folios, and a mapping of one token of a folio maps all of it
    into the process, so a few thousand random windows of a mapped 2 GB corpus count a gigabyte of resident
    memory (docs/performance.md). Read this way, only the windows read are the process's."""

    path: str
    dtype: np.dtype
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: slice) -> np.ndarray:
        first, last, step = index.indices(len(self))
        if step != 1:
            raise ValueError("a TokenSpan is read in contiguous slices")
        count = max(0, last - first)
        return np.fromfile(self.path, self.dtype, count, offset=(self.start + first) * self.dtype.itemsize)

    def part(self, start: int, stop: int) -> TokenSpan:
        """Tokens [start, stop) of this span, as a span."""
        return TokenSpan(self.path, self.dtype, self.start + start, self.start + min(stop, len(self)))

    def windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """`length` tokens from each of `starts`, one row each: one positioned read per window."""
        size = self.dtype.itemsize
        rows = np.empty((len(starts), length), dtype=self.dtype)
        with open(self.path, "rb", buffering=0) as file:
            for row, start in zip(rows, starts, strict=True):
                row[:] = np.frombuffer(
                    os.pread(file.fileno(), length * size, (self.start + int(start)) * size), self.dtype
                )
        return rows


def corpus_tokens(corpus: Corpus, tokenizer: CharTokenizer | None = None) -> tuple[TokenSpan, CharTokenizer]:
    """The corpus as token ids (the token file, read as needed) and the tokenizer that made them: by default every
    character of the corpus; a given one (a resumed run's, a trained model's) raises `VocabularyError` on
    characters it lacks, before anything is encoded."""
    directory = cache_root() / _digest(corpus.identity)
    chars = _vocabulary(corpus, directory)
    if not chars:
        raise CorpusError(f"{corpus.description} holds no text; choose a corpus with text in it")
    if tokenizer is None:
        tokenizer = CharTokenizer(chars)
    unknown = sorted(set(chars) - set(tokenizer.chars))
    if unknown:
        raise VocabularyError(
            f"characters not in the vocabulary: {''.join(unknown)!r} "
            f"(the vocabulary has {tokenizer.vocab_size} characters)",
            "".join(unknown),
        )
    dtype = token_dtype(tokenizer.vocab_size)
    tokens = directory / f"tokens-{_digest(tokenizer.chars)}.{dtype.name}"
    if not tokens.is_file():
        _encode(corpus, tokenizer, dtype, tokens)
    return TokenSpan(str(tokens), dtype, 0, tokens.stat().st_size // dtype.itemsize), tokenizer


def _cache_write(target: Path, write: Callable[[IO[bytes]], Any]) -> None:
    try:
        write_atomically(target, write)
    except OSError as err:
        raise CorpusError(
            f"cannot write the token cache {str(target.parent)!r} ({err.strerror or err}); free some space, or "
            "point HF_HOME at a writable directory with room for the corpus"
        ) from None


def _vocabulary(corpus: Corpus, directory: Path) -> list[str]:
    path = directory / VOCABULARY
    try:
        return json.loads(path.read_text(encoding="utf-8"))["chars"]
    except (OSError, ValueError, KeyError):
        pass
    with _announce(corpus, "reading the characters of") as progress:
        chars = sorted(scan_characters(corpus, progress))
    text = json.dumps({"chars": chars, "corpus": corpus.identity}, ensure_ascii=False)
    _cache_write(path, lambda file: file.write(text.encode("utf-8")))
    return chars


def _encode(corpus: Corpus, tokenizer: CharTokenizer, dtype: np.dtype, target: Path) -> None:
    def write(out: IO[bytes]) -> None:
        with _announce(corpus, "tokenising") as progress:
            for chunk in corpus.stream():
                out.write(tokenizer.encode_array(chunk).astype(dtype))  # the array's buffer: no copy
                if progress is not None:
                    progress(len(chunk.encode("utf-8")))

    _cache_write(target, write)


@contextmanager
def _announce(corpus: Corpus, what: str) -> Iterator[Callable[[int], Any] | None]:
    """Log a pass over the corpus and its duration; yield a progress callback (bytes done) that draws a bar
    when stderr is a terminal."""
    size = corpus.size_bytes
    log.info("%s %s%s (once: later runs read the cache)", what, corpus.description,
             f", {size / 1e6:,.0f} MB" if size else "")  # fmt: skip
    started = time.perf_counter()
    bar = None
    if size and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=size, unit="B", unit_scale=True, desc=what, leave=False)
    try:
        yield bar.update if bar is not None else None
    finally:
        if bar is not None:
            bar.close()
    log.info("%s %s: done in %.0f s", what, corpus.description, time.perf_counter() - started)
