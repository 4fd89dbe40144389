"""LayerNorm and RMSNorm written from their formulas.

`fused=True` swaps in torch's kernels for speed; tests hold both paths equal to `torch.nn`'s modules.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    """y = (x - mean(x)) / sqrt(var(x) + eps) · γ + β over the last axis, with the population variance."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True, fused: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        centred = x - x.mean(dim=-1, keepdim=True)
        variance = centred.pow(2).mean(dim=-1, keepdim=True)  # population variance: divide by n, not n-1
        y = centred * torch.rsqrt(variance + self.eps) * self.weight
        return y + self.bias if self.bias is not None else y


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) · γ over the last axis: no centring and no β."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True, fused: bool = False) -> None:
        super().__init__()
        del bias  # RMSNorm has no shift by definition; the argument keeps the norms interchangeable.
        self.eps = eps
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


# The one list of norm types (ModelConfig checks `norm_type` against it); a new one is a class and an entry.
NORMS: dict[str, type[nn.Module]] = {"layer": LayerNorm, "rms": RMSNorm}
