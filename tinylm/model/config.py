"""The model's one source of truth: a flat, serialisable config dataclass.

A checkpoint stores `ModelConfig.to_dict()` beside the weights, so the model can be rebuilt from the
checkpoint alone, with neither Hydra nor the training code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tinylm import checks
from tinylm.errors import ConfigError

Placement = Literal["pre", "post", "sandwich", "on_branch"]
NormType = Literal["layer", "rms"]
Activation = Literal["relu", "gelu", "swiglu", "geglu"]
Init = Literal["gpt2", "xavier"]

GATED_ACTIVATIONS = ("swiglu", "geglu")


def default_ffn_width(d_model: int, act: str) -> int:
    """Hidden width that keeps every FFN at ≈ 8·d² weights.

    Two-matrix FFNs (relu, gelu) use 4·d. Gated FFNs have three matrices, so they get 2/3 of that width,
    round(8·d/3), which is what makes SwiGLU vs GELU a comparison at matched parameter count.
    """
    return round(8 * d_model / 3) if act in GATED_ACTIVATIONS else 4 * d_model


@dataclass
class ModelConfig:
    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    norm: Placement = "pre"
    norm_type: NormType = "layer"
    act: Activation = "gelu"
    d_ff: int | None = None
    qk_norm: bool = False
    bias: bool = True
    dropout: float = 0.0
    tie_weights: bool = True
    init: Init = "gpt2"
    norm_eps: float = 1e-5
    # torch's fused norm kernels (faster; docs/performance.md) instead of the written-out formulas in
    # norms.py, which stay as the reference; both are tested equal.
    fused_norms: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            checks.whole_number(f"ModelConfig.{name}", getattr(self, name))
        for name, literal in (
            ("norm", Placement),
            ("norm_type", NormType),
            ("act", Activation),
            ("init", Init),
        ):
            checks.choice(f"ModelConfig.{name}", getattr(self, name), get_args(literal))
        checks.number("ModelConfig.dropout", self.dropout, at_least=0, below=1)
        checks.number("ModelConfig.norm_eps", self.norm_eps, above=0)
        for name in ("qk_norm", "bias", "tie_weights", "fused_norms"):
            checks.boolean(f"ModelConfig.{name}", getattr(self, name))
        if self.d_model % self.n_head != 0:
            raise ConfigError(
                f"ModelConfig.d_model={self.d_model} must be divisible by n_head={self.n_head} "
                f"(choose d_model a multiple of n_head)"
            )
        if self.d_ff is None:
            self.d_ff = default_ffn_width(self.d_model, self.act)
        checks.whole_number("ModelConfig.d_ff", self.d_ff)

    @property
    def head_size(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown ModelConfig field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**values)
