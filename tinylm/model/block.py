"""The transformer block: one forward path for every norm placement.

Each sublayer S (attention, FFN) owns three optional norms, and the placement only decides which are real:

    x = after_add(x + after_branch(S(before_branch(x))))

| placement  | before_branch | after_branch | after_add | formula                  |
|------------|---------------|--------------|-----------|--------------------------|
| pre        | N             |              |           | x + S(N(x))              |
| post       |               |              | N         | N(x + S(x))              |
| sandwich   | N1            | N2           |           | x + N2(S(N1(x)))         |
| on_branch  |               | N            |           | x + N(S(x))   (OLMo 2)   |

Unused norms are `nn.Identity()`, so they cost nothing and hold no parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from tinylm.model.attention import CausalSelfAttention
from tinylm.model.ffn import build_ffn
from tinylm.model.norms import NORMS
from tinylm.model.placements import PLACEMENTS, NormPlacement

if TYPE_CHECKING:
    from tinylm.model.config import ModelConfig


def make_norm(config: ModelConfig) -> nn.Module:
    return NORMS[config.norm_type](
        config.d_model, eps=config.norm_eps, bias=config.bias, fused=config.fused_norms
    )


class Residual(nn.Module):
    """A sublayer wrapped in its residual connection and its three (possibly identity) norms."""

    def __init__(self, sublayer: nn.Module, placement: NormPlacement, norm: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.before_branch = norm() if placement.before_branch else nn.Identity()
        self.sublayer = sublayer
        self.after_branch = norm() if placement.after_branch else nn.Identity()
        self.after_add = norm() if placement.after_add else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after_add(x + self.after_branch(self.sublayer(self.before_branch(x))))


class Block(nn.Module):
    """One transformer block. `causal=False` drops the attention mask, for the depth probe only."""

    def __init__(self, config: ModelConfig, causal: bool = True) -> None:
        super().__init__()
        placement = PLACEMENTS[config.norm]
        attention = CausalSelfAttention(
            config.d_model,
            config.n_head,
            config.bias,
            config.dropout,
            config.qk_norm,
            config.norm_eps,
            causal,
        )
        ffn = build_ffn(config.act, config.d_model, config.d_ff, config.bias, config.dropout)
        self.attn = Residual(attention, placement, lambda: make_norm(config))
        self.ffn = Residual(ffn, placement, lambda: make_norm(config))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attn(x))
