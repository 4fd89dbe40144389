"""Training-time health: per-block curves in TensorBoard, `training_health/<quantity>/block_<k>` (listed in
docs/probe.md), that show *why* a run trains well or badly. Gradient norms are the step's own, before
clipping; activations come from one extra no-grad forward pass in eval mode, so the run draws no extra
randomness and trains bit for bit as without the callback. Other steps only compare the step number. Dead
FFN units are counted on a fixed batch (the first one logged), so that their curve moves with the model, not
with the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import lightning.pytorch as L
import torch
from torch import nn

from tinylm import checks
from tinylm.model import Block
from tinylm.model.diagnostics import (
    attention_entropy,
    block_weight_grad_norms,
    dead_fraction,
    stream_rms,
    token_spread,
)
from tinylm.training.logging_steps import write_at


class TrainingHealth(L.Callback):
    """Logs per-block health scalars to every logger of the run; `every_n_steps=0` turns it off. The module's
    `forward(inputs)` must run the model on the batch's first element, as `CharLM` does."""

    def __init__(self, every_n_steps: int = 100, prefix: str = "training_health") -> None:
        self.every_n_steps = checks.whole_number(
            "callbacks.health.every_n_steps", every_n_steps, minimum=0, hint="0 turns it off"
        )
        self.prefix = prefix
        self._blocks: list[Block] = []
        self._inputs: torch.Tensor | None = None
        self._fixed_inputs: torch.Tensor | None = None  # the batch dead units are counted on

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._blocks = [module for module in pl_module.modules() if isinstance(module, Block)]
        if self.every_n_steps and not self._blocks:
            raise ValueError(f"TrainingHealth found no tinylm Block in {type(pl_module).__name__}")

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Only keeps a reference to the batch on a logging step; nothing is computed here.
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0 and trainer.is_global_zero:
            self._inputs = batch[0]
            if self._fixed_inputs is None:
                self._fixed_inputs = batch[0].detach().clone()

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self._inputs is None:
            return
        inputs, self._inputs = self._inputs, None
        values = self.measure(pl_module, inputs, trainer.precision_plugin.forward_context, self._fixed_inputs)
        # One device-to-host copy for all of them.
        numbers = torch.stack([value.float() for value in values.values()]).tolist()
        metrics = dict(zip(values, numbers, strict=True))
        write_at(trainer.loggers, metrics, trainer.global_step)

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        # A step whose optimizer step was skipped never reached on_before_optimizer_step: forget its batch.
        self._inputs = None

    def measure(
        self,
        pl_module: nn.Module,
        inputs: torch.Tensor,
        forward_context: Callable[[], Any] | None = None,
        fixed_inputs: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """All health values as 0-dim tensors keyed by their tag: gradient norms as they are now, the
        activations of a forward pass over `inputs` without gradients (in eval mode, modes restored), and the
        fraction of dead FFN units on `fixed_inputs` (default `inputs`), in a second pass when they differ."""
        width = len(str(len(self._blocks)))

        def tag(quantity: str, index: int) -> str:
            return f"{self.prefix}/{quantity}/block_{index + 1:0{width}d}"

        values: dict[str, torch.Tensor] = {}
        for index, block in enumerate(self._blocks):
            for name, norm in block_weight_grad_norms(block).items():
                values[tag(f"grad_{name}", index)] = norm

        def record_stream(index: int) -> Callable[..., None]:
            def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
                values[tag("stream_rms", index)] = stream_rms(output)
                values[tag("token_spread", index)] = token_spread(output)

            return hook

        def record_attention(index: int) -> Callable[..., None]:
            def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
                logits = module.attention_logits(args[0])  # args[0]: the attention's (normed) input
                values[tag("attn_entropy", index)] = attention_entropy(logits.softmax(dim=-1))
                values[tag("attn_max_logit", index)] = logits.amax()

            return hook

        def record_dead(index: int) -> Callable[..., None]:
            def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
                values[tag("dead_units", index)] = dead_fraction(output)

            return hook

        stream_hooks, dead_hooks = [], []
        for index, block in enumerate(self._blocks):
            stream_hooks.append((block, record_stream(index)))
            stream_hooks.append((block.attn.sublayer, record_attention(index)))
            layer = getattr(block.ffn.sublayer, "activation_input", None)  # an FFN without one has no curve
            if layer is not None:
                dead_hooks.append((layer, record_dead(index)))
        if fixed_inputs is None or fixed_inputs is inputs:
            self._forward(pl_module, inputs, [*stream_hooks, *dead_hooks], forward_context)
        else:
            self._forward(pl_module, inputs, stream_hooks, forward_context)
            self._forward(pl_module, fixed_inputs, dead_hooks, forward_context)
        return values

    @staticmethod
    def _forward(
        pl_module: nn.Module,
        inputs: torch.Tensor,
        hooks: list[tuple[nn.Module, Callable[..., None]]],
        forward_context: Callable[[], Any] | None,
    ) -> None:
        """One forward pass over `inputs` with `hooks` (module, forward hook) attached, without gradients, in
        eval mode; hooks removed and modes restored after."""
        handles = [module.register_forward_hook(hook) for module, hook in hooks]
        modes = {module: module.training for module in pl_module.modules()}
        try:
            pl_module.eval()
            with torch.no_grad(), (forward_context or nullcontext)():
                pl_module(inputs)
        finally:
            for handle in handles:
                handle.remove()
            for module, training in modes.items():
                module.training = training
