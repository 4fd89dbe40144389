"""The LightningModule: builds `GPT` from a plain `ModelConfig` dict, so a checkpoint alone rebuilds it."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import lightning.pytorch as L
import torch
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities import GradClipAlgorithmType
from torchmetrics.aggregation import MeanMetric

from tinylm.data import CharTokenizer
from tinylm.data.datamodule import FINAL_WINDOWS_PER_TRAINED_WINDOW
from tinylm.layout import FINAL_VAL_LOSS, LEARNING_RATE, TRAIN_LOSS, VAL_BPC, VAL_LOSS, evaluated_windows
from tinylm.model import GPT, ModelConfig
from tinylm.model.evaluation import window_losses
from tinylm.model.sampling import sample_text
from tinylm.training.distributed import EffectiveBatch, shards_parameters
from tinylm.training.logging_steps import logs_after, write_at
from tinylm.training.optimizers import (
    OptimConfig,
    build_optimizer,
    decays,
    muon_matrices,
    scheduled_rate,
    set_scheduled_rates,
)

log = logging.getLogger(__name__)
# Characters per batch of the final evaluation: far more windows at once than training's batch (no gradients
# are kept), so tens of thousands of windows take a few hundred forward passes.
FINAL_EVAL_CHARS = 16384


class CharLM(L.LightningModule):
    """Trains a `GPT` on characters: optimizer and schedule, logging, validation and sampling."""

    def __init__(
        self,
        model: ModelConfig | dict[str, Any],
        optim: OptimConfig | dict[str, Any] | None = None,
        sample_chars: int = 200,
        compile: bool = False,
    ) -> None:
        super().__init__()
        # Configs come checked from a run's settings, or as plain dicts from a checkpoint's hyper_parameters.
        self.model_config = model if isinstance(model, ModelConfig) else ModelConfig.from_dict(dict(model))
        self.optim_config = optim if isinstance(optim, OptimConfig) else OptimConfig(**(optim or {}))
        # Plain dicts only: the checkpoint must rebuild the model without Hydra or pickled classes.
        self.save_hyperparameters({
            "model": self.model_config.to_dict(), "optim": dataclasses.asdict(self.optim_config),
            "sample_chars": sample_chars, "compile": compile,
        })  # fmt: skip
        self.model = GPT(self.model_config)
        # Which parameters AdamW decays and Muon trains, decided now, on the whole model: under FSDP every
        # parameter is a flat 1-D shard when the optimizer is built.
        self.decayed = decays(self.model)
        self.muon_matrices = muon_matrices(self.model)
        self.sample_chars = sample_chars
        self.compile = compile
        # Validation means as torchmetrics, which sum values and window counts over the ranks. Lightning's own
        # `self.log(..., sync_dist=True)` averages an integer count and floors it when the ranks hold unequal
        # numbers of windows, inflating the validation loss (Lightning issue #21859).
        self.val_loss = MeanMetric()
        self.val_bpc = MeanMetric()
        self.tokenizer: CharTokenizer | None = None
        self.flops_per_batch: int | None = None  # read by StepThroughput
        self.final_window_losses: torch.Tensor | None = None  # set when training completes
        self.final_windows_available: int | None = None  # of the validation split, for the record

    def configure_model(self) -> None:
        if self.compile and not getattr(self, "_compiled", False):
            # In-place compile keeps the module's parameter names: checkpoints carry no `_orig_mod.` keys.
            self.model.compile()
            self._compiled = True

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        return self.model(idx, targets)

    def on_fit_start(self) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if self.tokenizer is None and datamodule is not None:
            self.tokenizer = datamodule.tokenizer
        if datamodule is not None:
            # Counted once on the meta device: no memory, no time, exact for this shape.
            with torch.device("meta"):
                model = GPT(self.model_config)
                idx = torch.zeros(datamodule.batch_size, self.model_config.block_size, dtype=torch.long)
            self.flops_per_batch = measure_flops(model, lambda: model(idx, idx)[1], lambda loss: loss)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        _, loss = self.model(inputs, targets)
        if self.logs_this_step():
            # AdamW's rate (the first group's; under optim=muon, Muon's is muon_lr / lr times it), once:
            # LearningRateMonitor would log every group's.
            rate = self.optimizers().param_groups[0]["lr"]
            # For the progress bar and the run's final metrics...
            self.log(TRAIN_LOSS, loss, prog_bar=True, logger=False)
            self.log(LEARNING_RATE, rate, logger=False)
            # ...and for the loggers, at the step the weights have taken (docs/cli.md).
            self.log_at_step({TRAIN_LOSS: float(loss.detach()), LEARNING_RATE: rate})
        return loss

    def logs_this_step(self) -> bool:
        """Only on the loggers' steps: `self.log` costs time even on the steps whose values are dropped
        (docs/performance.md)."""
        return logs_after(self.trainer, self.global_step + 1)

    def log_at_step(self, values: dict[str, float]) -> None:
        """Write `values` at `global_step`, the optimizer steps the measured weights have taken."""
        write_at(self.loggers, values, self.global_step)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        inputs, targets = batch
        _, loss = self.model(inputs, targets)
        # Mean over windows across batches and ranks: every window has the same number of characters.
        windows = inputs.shape[0]
        self.val_loss.update(loss, weight=windows)
        self.val_bpc.update(loss / math.log(2), weight=windows)
        # For checkpointing and the progress bar; the loggers get them at the right step below.
        self.log(VAL_LOSS, self.val_loss, prog_bar=True, logger=False)
        self.log(VAL_BPC, self.val_bpc, logger=False)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        # Every metric is logged at the optimizer steps the measured weights have taken: a validation after
        # step N at N (Lightning would log it at N - 1, with the training loss of the last batch).
        values = {VAL_LOSS: self.val_loss.compute(), VAL_BPC: self.val_bpc.compute()}  # all ranks: a sync
        self.log_at_step({name: float(value) for name, value in values.items()})
        # One rank alone cannot run a sharded (FSDP) model; those runs get their sample from the checkpoint.
        if (
            self.sample_chars > 0
            and self.tokenizer is not None
            and self.trainer.is_global_zero
            and self.logger is not None
            and not shards_parameters(self.trainer.strategy)
        ):
            text = sample_text(self.model, self.tokenizer, self.sample_chars, seed=0)
            text = text[: text.rfind("\n") + 1] or text  # end on a line break when there is one
            experiment = getattr(self.logger, "experiment", None)
            if hasattr(experiment, "add_text"):
                # Markdown would reflow the verse: indent it as a code block to keep the line breaks.
                experiment.add_text("sample", "    " + text.replace("\n", "\n    "), self.global_step)

    def on_train_end(self) -> None:
        # Only a run that completed gets here: a divergence or an interruption raises before. One rank, the
        # whole model: a sharded (FSDP) run is evaluated from its checkpoint with scripts/eval.py instead.
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None or not self.trainer.is_global_zero or shards_parameters(self.trainer.strategy):
            return
        trained = EffectiveBatch.of(self.trainer, datamodule.batch_size, datamodule.block_size).windows
        final = datamodule.final_windows(trained_windows=self.trainer.global_step * trained)
        log.info(
            "final evaluation: %s (the rule: up to %d validation windows per window trained on, of which this run "
            "saw %s in %d steps, and at most data.final_val_windows=%s)", evaluated_windows(len(final), final.available),
            FINAL_WINDOWS_PER_TRAINED_WINDOW, f"{self.trainer.global_step * trained:,}",
            self.trainer.global_step, datamodule.config.final_val_windows,
        )  # fmt: skip
        windows = final.batches(max(datamodule.batch_size, FINAL_EVAL_CHARS // datamodule.block_size))
        with self.trainer.precision_plugin.forward_context():  # the precision validation ran in
            self.final_window_losses = window_losses(self.model, windows)
        self.final_windows_available = final.available
        self.log_at_step({FINAL_VAL_LOSS: float(self.final_window_losses.mean())})

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        precision = self.trainer.precision_plugin
        algorithm = GradClipAlgorithmType(gradient_clip_algorithm or GradClipAlgorithmType.NORM)
        if isinstance(precision, MixedPrecision) and precision.scaler is None and algorithm == "norm":
            # bf16 autocast keeps no loss scale, yet Lightning refuses to clip for an optimizer that unscales
            # gradients itself (a fused AdamW), a check meant for fp16's scaler: clip as in fp32.
            if gradient_clip_val:
                torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return build_optimizer(
            self.model.named_parameters(), self.decayed, self.muon_matrices, self.optim_config
        )

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # nanoGPT's way: the rate is a function of the optimizer step alone, set before each batch, so a
        # resumed run continues the schedule from the checkpoint's step with no scheduler state to restore.
        for optimizer in self.trainer.optimizers:
            set_scheduled_rates(optimizer, self.optim_config, self.global_step)

    def learning_rate(self, step: int, muon: bool = False) -> float:
        """The rate optimizer step `step` (counted from 0) uses under this module's config: AdamW's, or
        with `muon` Muon's (the same schedule from `optim.muon_lr`)."""
        return scheduled_rate(self.optim_config, step, muon)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:
            checkpoint["tokenizer"] = self.tokenizer.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "tokenizer" in checkpoint:
            self.tokenizer = CharTokenizer.from_dict(checkpoint["tokenizer"])
