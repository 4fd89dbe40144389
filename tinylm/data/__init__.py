"""Text to batches: corpora (local files read in chunks, the rest through HF `datasets`), a character
tokenizer, the token cache, windows, and the datamodule. What pulls in `datasets` (the corpora) or Lightning
(the datamodule) is imported on first use: sampling from a checkpoint needs only the tokenizer."""

import importlib
from typing import Any

from tinylm.data.tokenizer import CharTokenizer, VocabularyError
from tinylm.data.windows import FixedWindows, RandomWindows, TooFewWindowsError, UnpaddedDistributedSampler

_ON_FIRST_USE = {
    "CharDataModule": "tinylm.data.datamodule",
    "CorpusError": "tinylm.data.corpora",
    "DataConfig": "tinylm.data.config",
    "SOURCES": "tinylm.data.corpora",
    "load_corpus": "tinylm.data.corpora",
}


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
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
