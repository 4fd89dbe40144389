"""Windows of block_size + 1 tokens cut from a 1-D token array: an endless random stream for training, a
fixed set for validation, and the validation set's split over several processes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, DistributedSampler, IterableDataset

from tinylm.data.token_cache import TokenSpan
from tinylm.errors import UserError


class TooFewWindowsError(UserError, ValueError):
    """The tokens cannot give the windows asked for."""


def cut_windows(
    tokens: np.ndarray | TokenSpan, starts: np.ndarray, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of shape (len(starts), block_size) as int64, the targets shifted by one token."""
    if isinstance(tokens, TokenSpan):
        rows = tokens.windows(starts, block_size + 1)
    else:
        rows = tokens[starts[:, None] + np.arange(block_size + 1)]
    windows = torch.from_numpy(rows.astype(np.int64))
    return windows[:, :-1], windows[:, 1:]


class RandomWindows(IterableDataset):
    """An endless stream of batches of random (input, target) windows. Batch i depends only on (seed, rank,
    i), so a resume continues it exactly and no two ranks share it. Starts are drawn per group of
    `group_batches` batches: keep that, so earlier runs reproduce and their checkpoints resume exactly."""

    def __init__(
        self, tokens: np.ndarray | TokenSpan, block_size: int, batch_size: int, seed: int, rank: int = 0
    ) -> None:
        if len(tokens) <= block_size:
            raise TooFewWindowsError(
                f"the training split has {len(tokens)} tokens, fewer than one window of block_size+1="
                f"{block_size + 1}; use a longer corpus or a smaller model.block_size"
            )
        self.tokens = tokens
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.start_batch = 0
        self.group_batches = max(1, min(64, 2**20 // (batch_size * (block_size + 1))))

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        group, position = divmod(index, self.group_batches)
        entropy = np.random.SeedSequence([self.seed, self.rank, group]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(entropy) >> 1)
        draws = self.group_batches * self.batch_size
        starts = torch.randint(len(self.tokens) - self.block_size, (draws,), generator=generator)
        starts = starts[position * self.batch_size : (position + 1) * self.batch_size].numpy()
        return cut_windows(self.tokens, starts, self.block_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        index = self.start_batch
        while True:
            yield self.batch(index)
            index += 1


class FixedWindows(Dataset):
    """Evenly spaced, non-overlapping windows over the validation split: the same set on every evaluation."""

    def __init__(self, tokens: np.ndarray | TokenSpan, block_size: int, max_windows: int | None) -> None:
        available = (len(tokens) - 1) // block_size
        if available < 1:
            raise TooFewWindowsError(
                f"the validation split has {len(tokens)} tokens, fewer than one window of block_size+1="
                f"{block_size + 1}; use a longer corpus, a larger data.val_fraction or a smaller block_size"
            )
        count = available if max_windows is None else min(available, max_windows)
        stride = available // count * block_size
        self.available = available  # windows the split holds; len(self) of them are evaluated
        self.tokens = tokens
        self.block_size = block_size
        self.starts = np.arange(count) * stride

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = cut_windows(self.tokens, self.starts[i : i + 1], self.block_size)
        return inputs[0], targets[0]

    def batches(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Every window once, in order, `batch_size` at a time."""
        for first in range(0, len(self.starts), batch_size):
            yield cut_windows(self.tokens, self.starts[first : first + batch_size], self.block_size)


class UnpaddedDistributedSampler(DistributedSampler):
    """Rank r of W takes items r, r+W, r+2W, …: every item exactly once, where torch's sampler repeats some
    (docs/scaling.md). Every rank needs an item, or it never joins the final all-reduce; uneven shards are
    safe as the model has no buffers for DDP to broadcast in `forward`."""

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)
        size = len(dataset)  # type: ignore[arg-type]
        if size < num_replicas:
            raise TooFewWindowsError(
                f"{size} validation windows cannot be shared by {num_replicas} processes: each needs at least "
                f"one; raise data.val_windows (or data.val_fraction) to at least {num_replicas}"
            )
        self.total_size = size
        self.num_samples = len(range(rank, size, num_replicas))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.total_size, self.num_replicas))
