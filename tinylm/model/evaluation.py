"""Per-window losses: the mean next-character cross-entropy of each window, which a run's final evaluation
stores so that two runs can be compared window by window (docs/sweeps.md)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from tinylm.model.gpt import GPT


@torch.no_grad()
def window_losses(model: GPT, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """The mean cross-entropy (nats/char) of every window in `batches`, in order, as a float64 CPU tensor, on
    whatever device the model is; the model's train/eval mode is restored."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    losses = []
    try:
        for inputs, targets in batches:
            logits, _ = model(inputs.to(device))
            per_char = F.cross_entropy(logits.transpose(1, 2).float(), targets.to(device), reduction="none")
            losses.append(per_char.mean(dim=1).double().cpu())
    finally:
        model.train(was_training)
    return torch.cat(losses) if losses else torch.empty(0, dtype=torch.float64)
