"""Text to batches: corpora through HF `datasets`, a character tokenizer, windows, and the datamodule."""

from tinylm.data.corpora import SOURCES, CorpusError, load_corpus
from tinylm.data.datamodule import CharDataModule
from tinylm.data.tokenizer import CharTokenizer, VocabularyError
from tinylm.data.windows import FixedWindows, RandomWindows, UnpaddedDistributedSampler, WindowsError

__all__ = [
    "SOURCES",
    "CharDataModule",
    "CharTokenizer",
    "CorpusError",
    "FixedWindows",
    "RandomWindows",
    "UnpaddedDistributedSampler",
    "VocabularyError",
    "WindowsError",
    "load_corpus",
]
