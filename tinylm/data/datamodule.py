"""The LightningDataModule: a corpus tokenised once into the token cache, split contiguously into training
and validation, and served as windows."""

from __future__ import annotations

import logging
import math

import lightning.pytorch as L
from torch.utils.data import DataLoader

from tinylm.data.config import DataConfig
from tinylm.data.corpora import CorpusError, load_corpus
from tinylm.data.overlap import (
    OVERLAP_MIN_LENGTH,
    OVERLAP_MIN_LINE,
    OVERLAP_SAMPLE,
    cached_validation_in_training,
)
from tinylm.data.reference import ReferenceLevels, cached_reference_levels
from tinylm.data.token_cache import TokenSpan, corpus_tokens
from tinylm.data.tokenizer import CharTokenizer
from tinylm.data.windows import FixedWindows, RandomWindows, UnpaddedDistributedSampler

log = logging.getLogger(__name__)

# The final evaluation's windows per window trained on: at this rate it costs less than the training did
# (docs/performance.md, "The final evaluation"), and every preset's budget evaluates the whole split.
FINAL_WINDOWS_PER_TRAINED_WINDOW = 4


class CharDataModule(L.LightningDataModule):
    """Serves a corpus as training and validation windows, split contiguously: the first `1 - val_fraction`
    of the characters train, the rest validate."""

    def __init__(self, config: DataConfig, tokenizer: CharTokenizer | None = None) -> None:
        super().__init__()
        self.config = config
        self.block_size = config.block_size
        self.batch_size = config.batch_size
        self.tokenizer = tokenizer
        self.train_tokens: TokenSpan | None = None
        self.val_tokens: TokenSpan | None = None
        self.tokens_file: str | None = None

    def prepare(self) -> CharTokenizer:
        """Tokenise the corpus (once: later runs read the token cache) and split it; returns the tokenizer."""
        if self.train_tokens is not None:
            assert self.tokenizer is not None
            return self.tokenizer
        config = self.config
        corpus = load_corpus(
            config.source, config.path, config.files, config.name, config.column, config.split
        )
        # The vocabulary covers the whole corpus so that validation never meets an unknown character.
        tokens, tokenizer = corpus_tokens(corpus, self.tokenizer)
        n_train = math.floor(len(tokens) * (1.0 - self.config.val_fraction))
        splits = {"training": tokens.part(0, n_train), "validation": tokens.part(n_train, len(tokens))}
        for split, part in splits.items():
            # Checked here, before training starts and anything is written, not when the loaders are built.
            if len(part) <= self.block_size:
                raise CorpusError(
                    f"the {split} split has {len(part)} characters, fewer than one window of "
                    f"block_size+1={self.block_size + 1}; use a longer corpus"
                    + (", a larger data.val_fraction" if split == "validation" else "")
                    + " or a smaller model.block_size"
                )
        self.tokenizer = tokenizer
        self.tokens_file = tokens.path
        self.train_tokens, self.val_tokens = splits["training"], splits["validation"]
        return tokenizer

    def overlap_note(self) -> str:
        """The share of the validation split found in training, as the run's log states it (tinylm.training.run
        warns above its threshold, once the run may write its log)."""
        return (
            f"{100 * self.validation_in_training():.1f}% of the validation characters (up to {OVERLAP_SAMPLE} "
            f"sampled) lie in lines of {OVERLAP_MIN_LINE}+ characters or {self.overlap_length}-character passages "
            "found verbatim in the training split"
        )

    @property
    def overlap_length(self) -> int:
        """The window compared with the training split: the validation window, at least OVERLAP_MIN_LENGTH."""
        return max(self.block_size + 1, OVERLAP_MIN_LENGTH)

    def validation_in_training(self) -> float:
        """The share of the validation split's characters that lie in a line or passage found verbatim in the
        training split (tinylm.data.overlap; computed once per token file and split)."""
        assert self.train_tokens is not None and self.val_tokens is not None and self.tokenizer is not None
        chars = self.tokenizer.chars
        return cached_validation_in_training(
            str(self.tokens_file), self.train_tokens, self.val_tokens, self.overlap_length,
            chars.index("\n") if "\n" in chars else None,
        )  # fmt: skip

    def check_validation_shards(self, world_size: int) -> None:
        """Refuse, before a run writes anything, a validation set too small to give every rank a window."""
        if world_size > 1:
            assert self.val_tokens is not None
            UnpaddedDistributedSampler(
                FixedWindows(self.val_tokens, self.block_size, self.config.val_windows), world_size, 0
            )

    def setup(self, stage: str) -> None:
        self.prepare()

    def train_dataloader(self) -> RandomWindows:
        assert self.train_tokens is not None
        trainer = self.trainer
        rank = trainer.global_rank if trainer else 0
        windows = RandomWindows(self.train_tokens, self.block_size, self.batch_size, self.config.seed, rank)
        if trainer is not None:
            # On resume the trainer has already restored global_step: continue the batch stream from there.
            windows.start_batch = trainer.global_step * trainer.accumulate_grad_batches
        return windows  # batches are already whole: Lightning iterates the stream itself

    def reference_levels(self) -> ReferenceLevels:
        """The uniform, unigram and bigram levels of the validation split (tinylm.data.reference)."""
        assert self.train_tokens is not None and self.val_tokens is not None and self.tokenizer is not None
        return cached_reference_levels(
            str(self.tokens_file), self.train_tokens, self.val_tokens, self.tokenizer.vocab_size
        )

    def final_windows(self, trained_windows: int | None = None) -> FixedWindows:
        """The run's final evaluation set: evenly spaced windows of the validation split, every one up to
        `data.final_val_windows` and, after training on `trained_windows` windows, up to
        FINAL_WINDOWS_PER_TRAINED_WINDOW per window trained on (never fewer than `data.val_windows`)."""
        assert self.val_tokens is not None
        limit = self.config.final_val_windows
        if trained_windows is not None and self.config.val_windows is not None:
            proportionate = max(self.config.val_windows, FINAL_WINDOWS_PER_TRAINED_WINDOW * trained_windows)
            limit = proportionate if limit is None else min(limit, proportionate)
        return FixedWindows(self.val_tokens, self.block_size, limit)

    def val_dataloader(self) -> DataLoader:
        assert self.val_tokens is not None
        windows = FixedWindows(self.val_tokens, self.block_size, self.config.val_windows)
        trainer = self.trainer
        # Each rank validates its own share of the windows, none repeated, so the validation loss (averaged over
        # ranks) is the mean over exactly the windows a single process would see.
        sampler = (
            UnpaddedDistributedSampler(windows, trainer.world_size, trainer.global_rank)
            if trainer is not None and trainer.world_size > 1
            else None
        )
        return DataLoader(windows, batch_size=self.batch_size, shuffle=False, sampler=sampler)
