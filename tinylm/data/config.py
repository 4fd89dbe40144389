"""The data section of a run: which corpus, and how it is cut into windows. Checked once, when built."""

from __future__ import annotations

from dataclasses import dataclass

from tinylm import checks
from tinylm.data.corpora import SOURCES


@dataclass
class DataConfig:
    source: str = "shakespeare"  # one of corpora.SOURCES
    # The model's context: a run sets it to model.block_size (training/settings.py), which ModelConfig checks.
    block_size: int = 64
    batch_size: int = 12
    val_fraction: float = 0.1  # the last fraction of the corpus validates
    val_windows: int | None = 200  # fixed, evenly spaced validation windows; None: every window of the split
    final_val_windows: int | None = 20000  # the run's final evaluation, at the end of training; None: all
    seed: int = 1337  # of the training windows' order
    path: str | None = None  # tinyshakespeare: a local copy
    files: str | list[str] | None = None  # text: file(s) or glob(s)
    name: str | None = None  # hub: the dataset id
    column: str = "text"
    split: str = "train"

    def __post_init__(self) -> None:
        checks.choice("data.source", self.source, SOURCES)
        checks.whole_number("data.batch_size", self.batch_size)
        checks.number("data.val_fraction", self.val_fraction, above=0, below=1)
        if self.val_windows is not None:
            checks.whole_number("data.val_windows", self.val_windows)
        if self.final_val_windows is not None:
            checks.whole_number("data.final_val_windows", self.final_val_windows)
        checks.whole_number("data.seed", self.seed, minimum=0)
