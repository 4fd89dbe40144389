"""What tinylm needs to run on several processes: sharded validation, the effective batch, and the guard
against Lightning re-running a Hydra sweep in every extra rank."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy, Strategy

# Private in Lightning, but it is exactly the launcher that starts a node's other ranks by running
# `sys.argv` again; no public API tells it apart from the launchers that do not (spawn, SLURM, torchrun).
from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher
from torch.utils.data import Dataset, DistributedSampler

from tinylm.errors import UserError


class ScaleOutError(UserError, ValueError):
    """A multi-process setting that cannot work as asked."""


class UnpaddedDistributedSampler(DistributedSampler):
    """Rank r of W takes items r, r+W, r+2W, …: every item exactly once over all ranks, in a fixed order.

    torch's DistributedSampler pads the shards to equal length by repeating items, so with 5 validation
    windows on 2 ranks one window would count twice in `val/loss`. Unpadded, the shards differ in length
    by at most one; Lightning averages `val/loss` weighted by batch size over all ranks (`sync_dist=True`),
    which gives exactly the single-process mean. Every rank must get at least one item, or it would log
    nothing and never join the final all-reduce.

    Uneven shards mean the ranks run different numbers of validation forwards; that is safe because
    tinylm's model has no buffers for DDP to broadcast in `forward` (a model with buffers would need
    `broadcast_buffers=False`).
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)
        size = len(dataset)  # type: ignore[arg-type]
        if size < num_replicas:
            raise ScaleOutError(
                f"{size} validation windows cannot be shared by {num_replicas} processes: each needs at least "
                f"one; raise data.val_windows (or data.val_fraction) to at least {num_replicas}"
            )
        self.total_size = size
        self.num_samples = len(range(rank, size, num_replicas))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.total_size, self.num_replicas))


@dataclass(frozen=True)
class EffectiveBatch:
    """How many windows one optimizer step averages over: every rank's batch, times accumulation."""

    world_size: int
    per_device: int
    accumulate: int
    block_size: int

    @classmethod
    def of(cls, trainer: L.Trainer, batch_size: int, block_size: int) -> EffectiveBatch:
        return cls(trainer.world_size, batch_size, trainer.accumulate_grad_batches, block_size)

    @property
    def windows(self) -> int:
        return self.world_size * self.per_device * self.accumulate

    @property
    def chars(self) -> int:
        return self.windows * self.block_size

    def hparams(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "accumulate_grad_batches": self.accumulate,
            "effective_batch_size": self.windows,
        }

    def describe(self, lr: float) -> str:
        return (
            f"effective batch {self.windows} windows ({self.chars:,} chars) per optimizer step = "
            f"{self.world_size} process(es) x {self.per_device} windows x {self.accumulate} accumulated; "
            f"peak lr {lr:g} (as configured: not scaled with the batch)"
        )


def relaunches_script(trainer: L.Trainer) -> bool:
    """Whether `trainer.fit` will start this node's other ranks by running the command line again.

    That is Lightning's default for `strategy=ddp`/`fsdp` when nothing else (SLURM, torchrun, …) has
    started the processes: rank 0 runs `sys.argv` once more per extra device.
    """
    launcher = trainer.strategy.launcher
    return (
        isinstance(launcher, _SubprocessScriptLauncher)
        and not launcher.cluster_environment.creates_processes_externally
        and launcher.num_processes > 1
    )


def refuse_relaunch_in_sweep(trainer: L.Trainer) -> None:
    """Stop a Hydra sweep (`-m`) whose job would be re-run as a whole sweep by every extra rank.

    Lightning re-runs `sys.argv` for ranks > 0; under `-m` that is the entire sweep again: a second sweep
    directory, and ranks that pair up only if both processes happen to walk the same job list in the same
    order. SLURM (the submitit launcher) starts the ranks itself and is not affected.
    """
    if relaunches_script(trainer):
        raise ScaleOutError(
            f"-m (a sweep) with trainer.strategy={type(trainer.strategy).__name__} on "
            f"{trainer.num_devices} devices: Lightning would start the extra ranks by re-running this whole "
            "sweep. Sweep with one process per job (the default trainer), run each multi-device "
            "configuration as a single run, or submit the sweep with launcher=slurm (SLURM starts the ranks)"
        )


def slurm_gpus_per_node(accelerator: str, devices: int | str) -> int | None:
    """GPUs to ask SLURM for on each node: one per rank (device) on a GPU accelerator, none otherwise."""
    return int(devices) if str(accelerator) in ("gpu", "cuda") else None


def shards_parameters(strategy: Strategy) -> bool:
    """Whether no single rank holds the whole model between steps (FSDP, tensor parallel): one rank
    alone then cannot run the model, e.g. to generate a sample."""
    return isinstance(strategy, FSDPStrategy | ModelParallelStrategy)
