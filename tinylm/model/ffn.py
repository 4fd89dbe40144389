"""Position-wise feed-forward sublayers: plain two-matrix MLPs and gated three-matrix GLUs."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """down(act(up(x))): the original transformer FFN."""

    matrices = 2  # d × d_ff weight matrices: sets the default width (`default_ffn_width`)

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: Callable[[torch.Tensor], torch.Tensor],
        bias: bool,
        dropout: float,
    ) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = activation
        self.dropout = nn.Dropout(dropout)

    @property
    def activation_input(self) -> nn.Module:
        """The layer whose output the nonlinearity reads: a unit whose output there is never > 0 is dead."""
        return self.up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(self.activation(self.up(x))))


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)) (Shazeer 2020): SwiGLU with SiLU, GeGLU with GELU."""

    matrices = 3

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: Callable[[torch.Tensor], torch.Tensor],
        bias: bool,
        dropout: float,
    ) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = activation
        self.dropout = nn.Dropout(dropout)

    @property
    def activation_input(self) -> nn.Module:
        """The gate: a unit whose gate never opens (> 0) passes nothing, whatever `up` says."""
        return self.gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(self.activation(self.gate(x)) * self.up(x)))


# act name -> (FFN class, nonlinearity): the one list of FFN choices (ModelConfig checks `act` against it).
# A new FFN type is one entry here, and a class if it has a new shape: its constructor takes
# (d_model, d_ff, activation, bias, dropout) and its `matrices` says how many d × d_ff matrices it holds.
FFNS: dict[str, tuple[type[nn.Module], Callable[[torch.Tensor], torch.Tensor]]] = {
    "relu": (MLP, F.relu),
    "gelu": (MLP, F.gelu),
    "swiglu": (GatedMLP, F.silu),
    "geglu": (GatedMLP, F.gelu),
}


def build_ffn(act: str, d_model: int, d_ff: int, bias: bool = True, dropout: float = 0.0) -> nn.Module:
    ffn_class, activation = FFNS[act]
    return ffn_class(d_model, d_ff, activation, bias, dropout)


def default_ffn_width(d_model: int, act: str) -> int:
    """Hidden width that keeps every FFN at ≈ 8·d² weights: 8·d over its number of d × d_ff matrices.

    Two-matrix FFNs (relu, gelu) get 4·d. Gated FFNs have three matrices, so round(8·d/3), which is what
    makes SwiGLU vs GELU a comparison at matched parameter count.
    """
    return round(8 * d_model / FFNS[act][0].matrices)
