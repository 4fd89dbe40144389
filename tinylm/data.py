"""Characters to token ids, and the LightningDataModule that serves training and validation windows."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets
import lightning.pytorch as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from tinylm.corpora import CorpusError, load_corpus
from tinylm.distributed import UnpaddedDistributedSampler
from tinylm.errors import ConfigError, UserError


class VocabularyError(UserError, ValueError):
    """Text holds characters the tokenizer's vocabulary lacks; `unknown` lists them."""

    def __init__(self, message: str, unknown: str) -> None:
        super().__init__(message)
        self.unknown = unknown


class CharTokenizer:
    """A character vocabulary, saved as JSON (never pickled) so loading it runs no code."""

    def __init__(self, chars: Sequence[str]) -> None:
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("a CharTokenizer vocabulary is a list of distinct single characters")
        self.chars = list(chars)
        self._index = {c: i for i, c in enumerate(self.chars)}
        # Encoding goes through a code-point lookup table: fast enough for millions of characters.
        self._table = np.full(max(map(ord, self.chars), default=0) + 1, -1, dtype=np.int64)
        self._table[[ord(c) for c in self.chars]] = np.arange(len(self.chars))

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode_array(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        ids = np.where(codes < len(self._table), self._table[np.minimum(codes, len(self._table) - 1)], -1)
        if (ids < 0).any():
            unknown = sorted({text[i] for i in np.flatnonzero(ids < 0)[:1000]})
            raise VocabularyError(
                f"characters not in the vocabulary: {''.join(unknown)!r} "
                f"(the vocabulary has {self.vocab_size} characters from the training corpus)",
                "".join(unknown),
            )
        return ids

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> CharTokenizer:
        is_char_tokenizer = (
            isinstance(state, dict)
            and state.get("type") == "char"
            and isinstance(state.get("chars"), list)
            and all(isinstance(c, str) for c in state["chars"])
        )
        if not is_char_tokenizer:
            raise ValueError("not a tinylm character tokenizer (expected {'type': 'char', 'chars': [...]})")
        return cls(state["chars"])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def window_starts(
    generator: torch.Generator, n_tokens: int, block_size: int, batch_size: int
) -> torch.Tensor:
    return torch.randint(n_tokens - block_size, (batch_size,), generator=generator)


class RandomWindows(IterableDataset):
    """An endless stream of batches of random (input, target) windows.

    Batch i depends only on (seed, rank, i), never on what came before, so a resumed run that starts at batch
    i sees exactly the batches the uninterrupted run would have, and no two ranks draw the same stream.
    Batches are drawn `chunk_batches` at a time (chunk c = batches c*k .. c*k+k-1, from its own seed): one
    seeding, one draw and one gather per chunk instead of per batch: 25 -> 5.5 us a batch, and Lightning's data
    fetching went from 0.74-0.87% to 0.19-0.27% of a default baby-model step (scripts/bench.py's profile).
    """

    # A chunk holds at most this many tokens (8 MB of int64): a 64-batch chunk for the baby model.
    MAX_CHUNK_TOKENS = 2**20

    def __init__(
        self, tokens: torch.Tensor, block_size: int, batch_size: int, seed: int, rank: int = 0
    ) -> None:
        if len(tokens) <= block_size:
            raise CorpusError(
                f"the training split has {len(tokens)} tokens, fewer than one window of block_size+1="
                f"{block_size + 1}; use a longer corpus or a smaller model.block_size"
            )
        self.tokens = tokens
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.start_batch = 0
        self.chunk_batches = max(1, min(64, self.MAX_CHUNK_TOKENS // (batch_size * (block_size + 1))))
        # Every window of block_size+1 tokens, as a view (no copy): a chunk is one index_select, 2.5x faster
        # than gathering with an index tensor on a cache-cold step.
        self._windows = tokens.unfold(0, block_size + 1, 1)
        self._chunk_index = -1
        self._chunk: torch.Tensor | None = None

    def _draw_chunk(self, chunk_index: int) -> torch.Tensor:
        entropy = np.random.SeedSequence([self.seed, self.rank, chunk_index]).generate_state(
            1, dtype=np.uint64
        )[0]
        generator = torch.Generator().manual_seed(int(entropy) >> 1)
        starts = window_starts(
            generator, len(self.tokens), self.block_size, self.chunk_batches * self.batch_size
        )
        windows = self._windows.index_select(0, starts)
        return windows.view(self.chunk_batches, self.batch_size, self.block_size + 1)

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk_index, position = divmod(index, self.chunk_batches)
        if chunk_index != self._chunk_index:
            self._chunk, self._chunk_index = self._draw_chunk(chunk_index), chunk_index
        assert self._chunk is not None
        windows = self._chunk[position]
        return windows[:, :-1], windows[:, 1:]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        index = self.start_batch
        while True:
            yield self.batch(index)
            index += 1


class FixedWindows(Dataset):
    """Evenly spaced, non-overlapping windows over the validation split: the same set on every evaluation."""

    def __init__(self, tokens: torch.Tensor, block_size: int, max_windows: int | None) -> None:
        available = (len(tokens) - 1) // block_size
        if available < 1:
            raise CorpusError(
                f"the validation split has {len(tokens)} tokens, fewer than one window of block_size+1="
                f"{block_size + 1}; use a longer corpus, a larger data.val_fraction or a smaller block_size"
            )
        count = available if max_windows is None else min(available, max_windows)
        stride = available // count * block_size
        self.tokens = tokens
        self.block_size = block_size
        self.starts = [i * stride for i in range(count)]

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = self.tokens[self.starts[i] : self.starts[i] + self.block_size + 1]
        return window[:-1], window[1:]


class CharDataModule(L.LightningDataModule):
    """Loads a corpus through `datasets`, tokenises it (cached by `datasets`), and splits it contiguously:
    the first `1 - val_fraction` of the characters train, the rest validate."""

    def __init__(
        self,
        source: str = "shakespeare",
        block_size: int = 64,
        batch_size: int = 12,
        val_fraction: float = 0.1,
        val_windows: int | None = 200,
        seed: int = 1337,
        path: str | None = None,
        files: str | list[str] | None = None,
        name: str | None = None,
        column: str = "text",
        split: str = "train",
        tokenizer: CharTokenizer | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction={val_fraction} must be between 0 and 1 (exclusive)")
        for name, value in (("data.batch_size", batch_size), ("model.block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}={value!r} must be a positive whole number")
        self.source, self.path, self.files, self.name, self.column, self.split = (
            source, path, files, name, column, split
        )  # fmt: skip
        self.block_size = block_size
        self.batch_size = batch_size
        self.val_fraction = val_fraction
        self.val_windows = val_windows
        self.seed = seed
        self.tokenizer = tokenizer
        self.train_tokens: torch.Tensor | None = None
        self.val_tokens: torch.Tensor | None = None

    def prepare(self) -> CharTokenizer:
        """Load, tokenise and split the corpus; returns the tokenizer. Idempotent, and cheap when cached."""
        if self.train_tokens is not None:
            assert self.tokenizer is not None
            return self.tokenizer
        corpus = load_corpus(self.source, self.path, self.files, self.name, self.column, self.split)
        text = "".join(corpus["text"])
        if not text:
            raise CorpusError(f"the {self.source!r} corpus is empty; choose a corpus with text in it")
        # The vocabulary covers the whole corpus so that validation never meets an unknown character.
        self.tokenizer = self.tokenizer or CharTokenizer.from_text(text)
        tokens = _tokenise(corpus, self.tokenizer)
        n_train = math.floor(len(tokens) * (1.0 - self.val_fraction))
        splits = {"training": tokens[:n_train], "validation": tokens[n_train:]}
        for split, part in splits.items():
            # Checked here, before training starts and anything is written, not when the loaders are built.
            if len(part) <= self.block_size:
                raise CorpusError(
                    f"the {split} split has {len(part)} characters, fewer than one window of "
                    f"block_size+1={self.block_size + 1}; use a longer corpus"
                    + (", a larger data.val_fraction" if split == "validation" else "")
                    + " or a smaller model.block_size"
                )
        dtype = torch.int16 if self.tokenizer.vocab_size < 2**15 else torch.int32
        # Narrow ids keep big corpora small in memory; batches are widened to int64 when they are cut.
        self.train_tokens = torch.from_numpy(splits["training"]).to(dtype)
        self.val_tokens = torch.from_numpy(splits["validation"]).to(dtype)
        return self.tokenizer

    def setup(self, stage: str) -> None:
        self.prepare()

    def train_dataloader(self) -> RandomWindows:
        assert self.train_tokens is not None
        trainer = self.trainer
        rank = trainer.global_rank if trainer else 0
        windows = RandomWindows(self.train_tokens.long(), self.block_size, self.batch_size, self.seed, rank)
        if trainer is not None:
            # On resume the trainer has already restored global_step: continue the batch stream from there.
            windows.start_batch = trainer.global_step * trainer.accumulate_grad_batches
        # The stream itself, not wrapped in a DataLoader: its batches are already whole, and the wrapper (no
        # workers, no collation to do) cost 0.1 ms of every 27 ms step. Lightning iterates any iterable.
        return windows

    def val_dataloader(self) -> DataLoader:
        assert self.val_tokens is not None
        windows = FixedWindows(self.val_tokens.long(), self.block_size, self.val_windows)
        trainer = self.trainer
        # Each rank validates its own share of the windows, none repeated, so `val/loss` (averaged over
        # ranks) is the mean over exactly the windows a single process would see.
        sampler = (
            UnpaddedDistributedSampler(windows, trainer.world_size, trainer.global_rank)
            if trainer is not None and trainer.world_size > 1
            else None
        )
        return DataLoader(windows, batch_size=self.batch_size, shuffle=False, sampler=sampler)


def _tokenise(corpus: datasets.Dataset, tokenizer: CharTokenizer) -> np.ndarray:
    encoded = corpus.map(
        lambda row: {"ids": tokenizer.encode_array(row["text"])},
        remove_columns=corpus.column_names,
        desc="tokenising",
    )
    return np.concatenate([np.asarray(ids, dtype=np.int64) for ids in encoded.with_format("numpy")["ids"]])
