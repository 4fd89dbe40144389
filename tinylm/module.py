"""The LightningModule: builds `GPT` from a plain `ModelConfig` dict, so a checkpoint alone rebuilds it."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as L
import torch
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from torchmetrics.aggregation import MeanMetric

from tinylm.callbacks import writes_metrics
from tinylm.data import CharTokenizer
from tinylm.distributed import shards_parameters
from tinylm.errors import ConfigError
from tinylm.gradients import ContiguousGradients, clip_grad_norm_, one_device_and_dtype, optimizer_parameters
from tinylm.model import GPT, ModelConfig

ADAMW_IMPLEMENTATIONS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


@dataclass
class OptimConfig:
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    decay_steps: int = 2000
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    # AdamW's kernel: "loop" (one tensor at a time), "foreach" (batched ops), "fused" (one fused kernel).
    implementation: str = "fused"

    def __post_init__(self) -> None:
        for name in ("lr", "min_lr", "warmup_steps", "decay_steps", "weight_decay", "beta1", "beta2"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"optim.{name}={value!r} must be a number")
        if self.implementation not in ADAMW_IMPLEMENTATIONS:
            raise ConfigError(
                f"optim.implementation={self.implementation!r} is not one of {', '.join(ADAMW_IMPLEMENTATIONS)}"
            )
        if not self.lr > 0:
            raise ConfigError(f"optim.lr={self.lr} must be > 0")
        if not 0 <= self.min_lr <= self.lr:
            raise ConfigError(f"optim.min_lr={self.min_lr} must be between 0 and optim.lr={self.lr}")
        if self.warmup_steps < 0 or self.decay_steps <= 0:
            raise ConfigError(
                f"optim.warmup_steps={self.warmup_steps} must be >= 0 and optim.decay_steps={self.decay_steps} > 0"
            )
        if self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay={self.weight_decay} must be >= 0")


def learning_rate(step: int, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to `lr` over `warmup_steps`, then cosine decay to `min_lr` at `decay_steps`, then flat.

    `step` counts optimizer steps from 0; step 0 already gets a non-zero rate.
    """
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def _unwrapped_name(name: str) -> str:
    """A parameter's name without the wrapper segments FSDP and activation checkpointing insert."""
    return name.replace("_fsdp_wrapped_module.", "").replace("_checkpoint_wrapped_module.", "")


def matrix_names(model: torch.nn.Module) -> frozenset[str]:
    """Names of the parameters AdamW decays: the matrices (biases and norm gains are 1-D)."""
    return frozenset(name for name, p in model.named_parameters() if p.dim() >= 2)


def weight_decay_groups(
    named_params: Iterable[tuple[str, torch.nn.Parameter]], decayed: frozenset[str], weight_decay: float
) -> list[dict[str, Any]]:
    """AdamW parameter groups: `weight_decay` on the `decayed` names, none on the rest."""
    named = list(named_params)
    return [
        {"params": [p for n, p in named if n in decayed], "weight_decay": weight_decay},
        {"params": [p for n, p in named if n not in decayed], "weight_decay": 0.0},
    ]


class LitGPT(L.LightningModule):
    def __init__(
        self,
        model: dict[str, Any],
        optim: dict[str, Any] | None = None,
        sample_chars: int = 200,
        compile: bool = False,
    ) -> None:
        super().__init__()
        # Plain dicts only: the checkpoint must rebuild the model without Hydra or pickled classes.
        self.save_hyperparameters()
        self.model_config = ModelConfig.from_dict(dict(model))
        self.optim_config = OptimConfig(**(optim or {}))
        self.model = GPT(self.model_config)
        # Decided now, on the whole model: under FSDP the optimizer is built after sharding, when every
        # parameter is a flat 1-D shard and `dim()` no longer tells a matrix from a bias.
        self._decayed = matrix_names(self.model)
        self.sample_chars = sample_chars
        self.compile = compile
        # Validation means as torchmetrics, which sum values and window counts over the ranks. Lightning's own
        # `self.log(..., sync_dist=True)` averages an integer count and floors it when the ranks hold unequal
        # numbers of windows, inflating val/loss (Lightning issue #21859, open for 2.6).
        self.val_loss = MeanMetric()
        self.val_bpc = MeanMetric()
        self.tokenizer: CharTokenizer | None = None
        self.flops_per_batch: int | None = None
        self.logged_lr: float | None = None  # the learning rate last written to the loggers
        self._contiguous_grads: ContiguousGradients | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning sets `_current_fx_name` before and after every hook it dispatches, ~40 times a step.
        # nn.Module's __setattr__ would check each time whether the value is a parameter, buffer or submodule
        # (isinstance through Parameter's metaclass); a hook's name is none of those.
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

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
            self.flops_per_batch = self._count_flops(datamodule.batch_size)

    def _count_flops(self, batch_size: int) -> int:
        # Counted once on the meta device: no memory, no time, exact for this shape.
        with torch.device("meta"):
            model = GPT(self.model_config)
            idx = torch.zeros(batch_size, self.model_config.block_size, dtype=torch.long)
        return measure_flops(model, lambda: model(idx, idx)[1], lambda loss: loss)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        _, loss = self.model(inputs, targets)
        if self._step_is_written():
            self.log("train/loss", loss, prog_bar=True)
            # The rate this step uses (both parameter groups share it; LearningRateMonitor would log two). A
            # Python float with nothing to aggregate across steps or ranks, so it goes to the loggers directly:
            # through `self.log` it cost ~0.5 ms of result bookkeeping per written step.
            self.logged_lr = self.optimizers().param_groups[0]["lr"]
            for logger in self.loggers:
                logger.log_metrics({"lr": self.logged_lr}, step=self.global_step)
        return loss

    def _step_is_written(self) -> bool:
        """Whether the logger writes this step's metrics (`writes_metrics`, once this step is done).

        Lightning writes only those, but `self.log` costs ~0.5 ms a call on every step (3.7% of a baby-model
        step on CPU), so the other steps do not call it. The logged values are the same.
        """
        return writes_metrics(self.trainer, self.global_step + 1)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        inputs, targets = batch
        _, loss = self.model(inputs, targets)
        # Mean over windows across batches and ranks: every window has the same number of characters.
        windows = inputs.shape[0]
        self.val_loss.update(loss, weight=windows)
        self.val_bpc.update(loss / math.log(2), weight=windows)
        self.log("val/loss", self.val_loss, prog_bar=True)
        self.log("val/bpc", self.val_bpc)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or self.tokenizer is None or self.sample_chars <= 0:
            return
        # One rank alone cannot run a sharded (FSDP) model; those runs get their sample from the checkpoint.
        if (
            self.trainer.is_global_zero
            and self.logger is not None
            and not shards_parameters(self.trainer.strategy)
        ):
            text = self.sample(self.sample_chars, prompt="\n", seed=0)
            experiment = getattr(self.logger, "experiment", None)
            if hasattr(experiment, "add_text"):
                # Markdown would reflow the verse: indent it as a code block to keep the line breaks.
                experiment.add_text("sample", "    " + text.replace("\n", "\n    "), self.global_step)

    def sample(
        self,
        max_new_chars: int,
        prompt: str = "\n",
        temperature: float = 0.8,
        top_k: int | None = None,
        seed: int = 0,
    ) -> str:
        if self.tokenizer is None:
            raise RuntimeError("no tokenizer attached to this model")
        if not prompt:
            raise ConfigError("the prompt must hold at least one character (e.g. a newline)")
        generator = torch.Generator(device=self.device).manual_seed(seed)
        context = torch.tensor([self.tokenizer.encode(prompt)], dtype=torch.long, device=self.device)
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(context, max_new_chars, temperature, top_k, generator=generator)
        self.model.train(was_training)
        return self.tokenizer.decode(out[0, context.shape[1] :])

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        algorithm = GradClipAlgorithmType(gradient_clip_algorithm or GradClipAlgorithmType.NORM)
        norm_clipping = (
            gradient_clip_val and gradient_clip_val > 0 and algorithm == GradClipAlgorithmType.NORM
        )
        if norm_clipping and self._clips_whole_gradients():
            contiguous = self._gradients_in_one_buffer(optimizer)
            if contiguous is not None:
                contiguous.clip_norm_(gradient_clip_val)
                return
            grads = [p.grad for p in optimizer_parameters(optimizer) if p.grad is not None]
            if one_device_and_dtype(grads):
                clip_grad_norm_(grads, gradient_clip_val)
                return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def _gradients_in_one_buffer(self, optimizer: torch.optim.Optimizer) -> ContiguousGradients | None:
        """The optimizer's gradients held in one buffer (`ContiguousGradients`), taken back into it whenever
        something replaced them; None when they cannot be (a parameter without gradient, mixed devices)."""
        contiguous = self._contiguous_grads
        if contiguous is None or contiguous.optimizer is not optimizer:
            if not ContiguousGradients.possible(optimizer):
                return None
            contiguous = self._contiguous_grads = ContiguousGradients(optimizer)
        return contiguous if contiguous.holds_all() or contiguous.adopt() else None

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        # One fill of the buffer instead of freeing every gradient for the backward to allocate again. When
        # something replaced a gradient since, torch's zero_grad frees them all, and the clip re-adopts them.
        contiguous = self._contiguous_grads
        if contiguous is not None and contiguous.optimizer is optimizer and contiguous.holds_all():
            contiguous.zero_()
        else:
            optimizer.zero_grad()

    def on_validation_model_zero_grad(self) -> None:
        # Lightning frees the gradients before validating, to make room. The buffer would keep its memory all
        # the same, and the next backward would allocate a second set; the next step zeroes them anyway.
        contiguous = self._contiguous_grads
        if contiguous is None or not contiguous.holds_all():
            super().on_validation_model_zero_grad()

    def _clips_whole_gradients(self) -> bool:
        """Whether the gradients are whole and clipped as they are: not sharded (FSDP, tensor parallel), not
        under fp16's loss scaler (whose plugin checks the optimizer first), and not clipped by a precision
        plugin of its own (DeepSpeed's). The rest goes through Lightning's `clip_gradients`."""
        precision = self.trainer.precision_plugin
        plain = type(precision).clip_gradients is Precision.clip_gradients
        # bf16 autocast keeps no loss scale. Lightning's mixed-precision plugin would refuse to clip for a
        # fused AdamW at all, a check meant for fp16's scaler, which the fused kernel unscales internally.
        unscaled_autocast = isinstance(precision, MixedPrecision) and precision.scaler is None
        return (plain or unscaled_autocast) and not shards_parameters(self.trainer.strategy)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        config = self.optim_config
        # Decay matrices only: biases and norm gains are 1-D, and decaying them just fights the norm.
        named = [(_unwrapped_name(n), p) for n, p in self.model.named_parameters() if p.requires_grad]
        groups = weight_decay_groups(named, self._decayed, config.weight_decay)
        return torch.optim.AdamW(
            groups,
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            **ADAMW_IMPLEMENTATIONS[config.implementation],
        )

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # nanoGPT's way: the rate is a function of the optimizer step alone, set before each batch. A resumed
        # run continues the schedule from the checkpoint's step with no scheduler state to restore, and no
        # LambdaLR for Lightning to step and wrap around every optimizer step (~0.1 ms a step on CPU).
        rate = self.learning_rate(self.global_step)
        for optimizer in self.trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = rate

    def learning_rate(self, step: int) -> float:
        """The rate optimizer step `step` (counted from 0) uses: `learning_rate` under this module's
        config."""
        config = self.optim_config
        return learning_rate(step, config.lr, config.min_lr, config.warmup_steps, config.decay_steps)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:
            checkpoint["tokenizer"] = self.tokenizer.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "tokenizer" in checkpoint:
            self.tokenizer = CharTokenizer.from_dict(checkpoint["tokenizer"])


# Lightning looks at `training_step`'s parameters on every step (`inspect.getfullargspec`, to decide
# whether to pass `batch_idx`): 10 us warm, up to 70 us right after a step's compute. `inspect` returns
# a function's `__signature__` when it has one, computed here once.
LitGPT.training_step.__signature__ = inspect.signature(LitGPT.training_step)  # type: ignore[attr-defined]
