"""What tinylm needs to run on several processes: the effective batch, and the guard against Lightning
re-running a Hydra sweep in every extra rank. (Validation windows are split over the ranks by
`tinylm.data.UnpaddedDistributedSampler`.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.strategies import (
    DeepSpeedStrategy,
    FSDPStrategy,
    ModelParallelStrategy,
    Strategy,
    StrategyRegistry,
)

from tinylm.errors import UserError


class ScaleOutError(UserError, ValueError):
    """A multi-process setting that cannot work as asked."""


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
    """Whether `trainer.fit` will start this node's other ranks by running `sys.argv` again: Lightning's
    default for ddp/fsdp when nothing else (SLURM, torchrun, …) started them."""
    # Private, but exactly the launcher that re-runs `sys.argv`; nothing public tells it apart
    # (docs/internals.md). Imported here, so that a rename breaks multi-process runs loudly and nothing else.
    from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher

    launcher = trainer.strategy.launcher
    return (
        isinstance(launcher, _SubprocessScriptLauncher)
        and not launcher.cluster_environment.creates_processes_externally
        and launcher.num_processes > 1
    )


def refuse_relaunch_in_sweep(trainer: L.Trainer) -> None:
    """Stop a Hydra sweep (`-m`) whose job would be re-run as a whole sweep by every extra rank; SLURM (the
    submitit launcher) starts the ranks itself and is not affected (docs/scaling.md)."""
    if relaunches_script(trainer):
        raise ScaleOutError(
            f"-m (a sweep) with trainer.strategy={type(trainer.strategy).__name__} on "
            f"{trainer.num_devices} devices: Lightning would start the extra ranks by re-running this whole "
            "sweep. Sweep with one process per job (the default trainer), run each multi-device "
            "configuration as a single run, or submit the sweep with launcher=slurm (SLURM starts the ranks)"
        )


def shards_parameters(strategy: Strategy) -> bool:
    """Whether no single rank holds the whole model between steps (FSDP, tensor parallel): one rank
    alone then cannot run the model, e.g. to generate a sample."""
    return isinstance(strategy, FSDPStrategy | ModelParallelStrategy)


def strategy_splits_matrices(strategy: Any) -> bool:
    """Whether the trainer's `strategy` setting (a registered name such as `fsdp` or `deepspeed_stage_3`, or a
    Strategy) hands the optimizer pieces of weight matrices rather than whole ones; known before any Trainer
    exists, so a run that needs whole matrices (Muon) is refused before it writes anything."""
    if isinstance(strategy, str):
        strategy = StrategyRegistry[strategy]["strategy"] if strategy in StrategyRegistry else None
    kind = strategy if isinstance(strategy, type) else type(strategy)
    return issubclass(kind, FSDPStrategy | ModelParallelStrategy | DeepSpeedStrategy)
