"""Compilation outside the clock, modded-nanogpt's rule for compiled records: before training, a compiled run
trains a few real steps, validates a batch and takes a health reading, so that inductor compiles every graph
the steps will use, then puts back exactly what those steps changed (the weights, the optimizer's state and
groups, any scheduler, the random streams), so that its first real step is the one a run without the warm-up
takes, bit for bit. The data needs nothing put back: batch i of the training stream depends only on (seed,
rank, i) (tinylm/data/windows.py), and the trainer's own stream starts from the step it resumes at.

The warm-up runs at `on_fit_start`, before the training clocks start at `on_train_start` (LossTargets'
`target/<level>/time_s`, StepThroughput's); its own time is `compile/warmup_s` in TensorBoard and
metrics.json, and in the run's log."""

from __future__ import annotations

import copy
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as L
import numpy as np
import torch

from tinylm.layout import COMPILE_WARMUP
from tinylm.training.callbacks.health import TrainingHealth
from tinylm.training.distributed import shards_parameters
from tinylm.training.logging_steps import write_at

log = logging.getLogger(__name__)


@dataclass
class TrainingState:
    """What a training step changes, copied: the module's weights and buffers, each optimizer's and
    scheduler's state, the random streams (torch's on every device, numpy's, Python's), and which modules are
    in training mode. `restore` puts them back in place, so the optimizers keep their parameters."""

    weights: dict[str, torch.Tensor]
    optimizers: list[dict[str, Any]]
    schedulers: list[dict[str, Any]]
    random: dict[str, Any]
    modes: dict[torch.nn.Module, bool]

    @classmethod
    def of(cls, trainer: L.Trainer, pl_module: L.LightningModule) -> TrainingState:
        """The state of `pl_module` and of the trainer's optimizers and schedulers now."""
        return cls(
            weights={name: value.detach().clone() for name, value in pl_module.state_dict().items()},
            optimizers=[copy.deepcopy(optimizer.state_dict()) for optimizer in trainer.optimizers],
            schedulers=[copy.deepcopy(c.scheduler.state_dict()) for c in trainer.lr_scheduler_configs],
            random={
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
            modes={module: module.training for module in pl_module.modules()},
        )

    def restore(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Put this state back: weights copied into the same tensors, gradients cleared as at the start."""
        pl_module.load_state_dict(self.weights)
        pl_module.zero_grad(set_to_none=True)
        for optimizer, state in zip(trainer.optimizers, self.optimizers, strict=True):
            optimizer.load_state_dict(state)
        for config, state in zip(trainer.lr_scheduler_configs, self.schedulers, strict=True):
            config.scheduler.load_state_dict(state)
        torch.set_rng_state(self.random["torch"])
        if self.random["cuda"] is not None:
            torch.cuda.set_rng_state_all(self.random["cuda"])
        np.random.set_state(self.random["numpy"])
        random.setstate(self.random["python"])
        for module, training in self.modes.items():
            module.training = training


class CompileWarmUp(L.Callback):
    """Before training, `steps` real training steps (forward, backward, the optimizer's step: Muon's and
    AdamW's alike), a validation batch and, with a TrainingHealth callback, one health reading, then the
    state as it was before them (`TrainingState`). For a compiled model (`compile=true`), whose graphs
    inductor compiles on their first call; `steps=0` does nothing. The module's `forward(inputs, targets)`
    must return `(logits, loss)`, as `CharLM`'s does. A sharded model (FSDP) is not warmed up: one rank
    cannot run it outside the strategy."""

    def __init__(self, steps: int = 2) -> None:
        self.steps = steps  # checked with the run's settings (RunSettings.compile_warmup_steps)
        self.seconds: float | None = None  # how long the warm-up took, restoring included

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        if not self.steps or datamodule is None:
            return
        if shards_parameters(trainer.strategy):
            log.info("compile warm-up skipped: the model is sharded; compiling counts as training time")
            return
        started = time.perf_counter()
        before = TrainingState.of(trainer, pl_module)
        try:
            self.warm_up(trainer, pl_module, datamodule)
        finally:
            before.restore(trainer, pl_module)
        self.seconds = time.perf_counter() - started
        health = " and a health reading" if self.health_callbacks(trainer) else ""
        log.info(
            "compile warm-up: %d training steps, a validation batch%s compiled and run in %.1f s, before the "
            "training clock starts (%s); weights, optimizer state and random streams put back as they were",
            self.steps, health, self.seconds, COMPILE_WARMUP,
        )  # fmt: skip

    @staticmethod
    def health_callbacks(trainer: L.Trainer) -> list[TrainingHealth]:
        """The health callbacks that read during training: on rank 0 only, as they do."""
        if not trainer.is_global_zero:
            return []
        return [c for c in trainer.callbacks if isinstance(c, TrainingHealth) and c.every_n_steps]

    def warm_up(self, trainer: L.Trainer, pl_module: L.LightningModule, datamodule: Any) -> None:
        """The steps themselves, each as the training loop runs it, in the precision it runs in."""
        precision, strategy = trainer.precision_plugin, trainer.strategy
        batches = iter(datamodule.train_dataloader())
        pl_module.train()
        for step in range(self.steps):
            inputs, targets = strategy.batch_to_device(next(batches))
            with precision.train_step_context():
                _, loss = pl_module(inputs, targets)
            loss.backward()
            if step == 0:  # the reading comes between the backward and the optimizer's step, as in training
                for health in self.health_callbacks(trainer):
                    health.measure(pl_module, inputs, precision.forward_context, inputs.clone())
            for optimizer in trainer.optimizers:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        inputs, targets = strategy.batch_to_device(next(iter(datamodule.val_dataloader())))
        pl_module.eval()
        # Lightning validates in the fit loop under no_grad (not inference_mode): the same graph.
        with torch.no_grad(), precision.val_step_context():
            pl_module(inputs, targets)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Written here, at the step training starts from: at on_fit_start a resumed run's step is not yet read.
        if self.seconds is not None:
            write_at(trainer.loggers, {COMPILE_WARMUP: self.seconds}, trainer.global_step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.seconds is not None:
            trainer.callback_metrics[COMPILE_WARMUP] = self.seconds  # among the run's final metrics
