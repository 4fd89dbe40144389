"""The token cache: a corpus tokenised once to a compact memory-mapped array, read back on later runs, and
redone when the corpus changes; and a corpus far larger than memory (slow)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from tinylm.data import CharDataModule, CharTokenizer, DataConfig, VocabularyError, load_corpus
from tinylm.data.corpora import Corpus
from tinylm.data.token_cache import TokenSpan, cache_root, corpus_tokens


def counted(corpus: Corpus) -> tuple[Corpus, list[int]]:
    """The corpus with a counter of how often its text is streamed."""
    calls: list[int] = []

    def stream() -> Iterator[str]:
        calls.append(1)
        yield from corpus.stream()

    return Corpus(corpus.description, corpus.identity, stream, corpus.files), calls


def test_tokens_are_the_encoded_text_as_uint8_and_a_second_run_reads_the_cache(tmp_path):
    path = tmp_path / "corpus.txt"
    text = "to be, or not to be: that is the question.\n" * 300
    path.write_text(text, encoding="utf-8")
    corpus, calls = counted(load_corpus("text", files=str(path)))

    tokens, tokenizer = corpus_tokens(corpus)
    assert isinstance(tokens, TokenSpan) and tokens.dtype == np.uint8
    assert tokenizer.chars == sorted(set(text))
    assert tokens[:].tolist() == tokenizer.encode(text)
    assert len(calls) == 1  # local files: characters scanned from the bytes, then one streamed pass

    again, again_tokenizer = corpus_tokens(corpus)
    assert len(calls) == 1, "the second run must read the cache, not the corpus"
    assert again.path == tokens.path and again_tokenizer.chars == tokenizer.chars
    assert Path(tokens.path).is_relative_to(cache_root())
    assert not list(Path(tokens.path).parent.glob(".*.tmp"))  # nothing half-written left behind


def test_an_edited_file_is_a_new_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abc" * 100, encoding="utf-8")
    first, _ = corpus_tokens(load_corpus("text", files=str(path)))
    path.write_text("abd" * 100 + "e", encoding="utf-8")
    second, tokenizer = corpus_tokens(load_corpus("text", files=str(path)))
    assert first.path != second.path
    assert tokenizer.chars == ["a", "b", "d", "e"] and len(second) == 301


def test_a_given_tokenizer_encodes_with_its_ids_and_refuses_characters_it_lacks(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abcabc" * 50, encoding="utf-8")
    corpus, calls = counted(load_corpus("text", files=str(path)))
    given = CharTokenizer(list("cbaxyz"))
    tokens, tokenizer = corpus_tokens(corpus, given)
    assert tokenizer is given and tokens[:3].tolist() == [2, 1, 0]
    with pytest.raises(VocabularyError, match="characters not in the vocabulary") as err:
        corpus_tokens(corpus, CharTokenizer(list("ab")))
    assert err.value.unknown == "c"
    assert len(calls) == 1  # refused before encoding anything


def test_a_vocabulary_beyond_256_characters_is_stored_as_uint16(tmp_path):
    path = tmp_path / "corpus.txt"
    text = "".join(chr(0x4E00 + i) for i in range(300)) * 3
    path.write_text(text, encoding="utf-8")
    tokens, tokenizer = corpus_tokens(load_corpus("text", files=str(path)))
    assert tokens.dtype == np.uint16 and tokenizer.vocab_size == 300
    assert tokenizer.decode(tokens[:5].tolist()) == text[:5]


def test_the_default_corpus_trains_from_the_cache(tmp_path):
    dm = CharDataModule(DataConfig(block_size=16, batch_size=2))
    tokenizer = dm.prepare()
    assert isinstance(dm.train_tokens, TokenSpan) and dm.train_tokens.dtype == np.uint8
    assert tokenizer.vocab_size < 256 and len(dm.train_tokens) + len(dm.val_tokens) > 4_000_000


# --- a corpus far larger than memory ---------------------------------------------------------------------

GB = 1 << 30
LINES = b"abcdefghijklmnopqrstuvwxyz      ,.;:!?ABCDEFGHIJ\n"
ONE_LINE = LINES[:-1]  # the same text with no line break at all: one 2 GB line


def write_big_corpus(path: Path, size: int, alphabet: bytes = LINES, seed: int = 0) -> None:
    """`size` bytes of text-like characters drawn from `alphabet`, written 64 MB at a time."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(alphabet, dtype=np.uint8)
    with open(path, "wb") as out:
        written = 0
        while written < size:
            block = letters[rng.integers(0, len(letters), min(64 << 20, size - written))]
            out.write(block.tobytes())
            written += len(block)


# Runs a command and prints its peak RSS in KiB: getrusage of the one child of a fresh interpreter.
MEASURED = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


def train_script(tmp_path: Path, corpus: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """`train.py data=text` on `corpus` in a fresh interpreter, with a token cache of its own (cold, and
    removed with `tmp_path`); stdout ends with the script's peak RSS in KiB."""
    return subprocess.run(
        [sys.executable, "-c", MEASURED, sys.executable, str(REPO / "scripts" / "train.py"), "data=text",
         f"data.files={corpus}", *args],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
        env={**os.environ, "HYDRA_FULL_ERROR": "0", "HF_HOME": str(tmp_path / "hf")},
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("alphabet", [LINES, ONE_LINE], ids=["lines", "no-line-break"])
def test_a_2gb_corpus_trains_under_1_5gb_of_memory(tmp_path, alphabet):
    """`data=text` on a 2 GB file, with line breaks or none, through the real script: read in chunks,
    tokenised once to disk, windows drawn from the memory-mapped array. Peak RSS of the training process
    (tokenising included) stays under 1.5 GB."""
    corpus = tmp_path / "big.txt"
    write_big_corpus(corpus, 2 * GB, alphabet)
    started = time.monotonic()
    try:
        result = train_script(
            tmp_path, corpus, "trainer.max_steps=20", "trainer.val_check_interval=10", "sample.chars=0",
            "trainer.enable_progress_bar=false", f"hydra.run.dir={tmp_path / 'run'}", timeout=1800,
        )  # fmt: skip
    finally:
        corpus.unlink()  # 2 GB, and as much again in the token cache: not left for pytest's last three runs
        shutil.rmtree(tmp_path / "hf", ignore_errors=True)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "metrics.json").read_text(encoding="utf-8"))
    peak_mb = record["peak_rss_mb"]  # the training process's own peak (getrusage), tokenising included
    outside_mb = int(result.stdout.split()[-1]) / 1024  # the same, seen by its parent
    print(f"2 GB corpus: {elapsed:.0f} s to train 20 steps (tokenising included), peak RSS {peak_mb:.0f} MB "
          f"({outside_mb:.0f} MB seen from outside)")  # fmt: skip
    assert record["status"] == "completed" and peak_mb < 1536


@pytest.mark.slow
def test_a_2gb_file_of_nul_bytes_is_refused_in_one_line_at_once(tmp_path):
    """What `truncate -s 2G big.txt` makes is no text: refused in its first chunk, as one line, exit 2, with
    the memory of a start (the time it took is printed)."""
    corpus = tmp_path / "big.txt"
    with open(corpus, "wb") as file:
        file.truncate(2 * GB)  # sparse: 2 GB of NUL bytes that take no disk
    started = time.monotonic()
    result = train_script(tmp_path, corpus, f"hydra.run.dir={tmp_path / 'run'}", timeout=300)
    elapsed = time.monotonic() - started
    peak_mb = int(result.stdout.split()[-1]) / 1024
    print(f"2 GB of NUL bytes: refused in {elapsed:.1f} s, peak RSS {peak_mb:.0f} MB")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: text file ")
    assert "is binary, not text (a NUL byte at byte 0)" in result.stderr and str(corpus) in result.stderr
    assert peak_mb < 1536
    assert not (tmp_path / "run" / "config.yaml").exists()
