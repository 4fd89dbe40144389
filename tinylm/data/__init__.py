"""Text to batches: corpora (local files read in chunks, the rest through HF `datasets`), a character
tokenizer, the token cache, windows, and the datamodule (imported on first use: it pulls in Lightning, which
reading a corpus does not need)."""

from typing import Any

from tinylm.data.config import DataConfig
from tinylm.data.corpora import SOURCES, CorpusError, load_corpus
from tinylm.data.tokenizer import CharTokenizer, VocabularyError
from tinylm.data.windows import FixedWindows, RandomWindows, TooFewWindowsError, UnpaddedDistributedSampler


def __getattr__(name: str) -> Any:
    if name == "CharDataModule":
        from tinylm.data.datamodule import CharDataModule

        return CharDataModule
    raise AttributeError(f"module 'tinylm.data' has no attribute {name!r}")


__all__ = [
    "SOURCES",
    "CharDataModule",
    "CharTokenizer",
    "CorpusError",
    "DataConfig",
    "FixedWindows",
    "RandomWindows",
    "TooFewWindowsError",
    "UnpaddedDistributedSampler",
    "VocabularyError",
    "load_corpus",
]
