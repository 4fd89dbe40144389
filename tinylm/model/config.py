"""The model's one source of truth: a flat, serialisable config dataclass.

A checkpoint stores `ModelConfig.to_dict()` beside the weights, so the model can be rebuilt from the
checkpoint alone, with neither Hydra nor the training code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tinylm.errors import ConfigError

Placement = Literal["pre", "post", "sandwich", "on_branch"]
NormType = Literal["layer", "rms"]
Activation = Literal["relu", "gelu", "swiglu", "geglu"]
Init = Literal["gpt2", "xavier"]

GATED_ACTIVATIONS = ("swiglu", "geglu")


def _check_choice(name: str, value: object, literal: Any) -> None:
    choices = get_args(literal)
    if value not in choices:
        raise ConfigError(f"ModelConfig.{name}={value!r} is not one of {', '.join(map(repr, choices))}")


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"ModelConfig.{name}={value!r} must be a positive integer")


def _check_number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"ModelConfig.{name}={value!r} must be a number")


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"ModelConfig.{name}={value!r} must be true or false")


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
    # torch's fused norm kernels (faster: 12% more steps/s for the baby model on CPU) instead of the
    # written-out formulas in norms.py, which stay as the reference; both are tested equal.
    fused_norms: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            _check_positive(name, getattr(self, name))
        _check_choice("norm", self.norm, Placement)
        _check_choice("norm_type", self.norm_type, NormType)
        _check_choice("act", self.act, Activation)
        _check_choice("init", self.init, Init)
        for name in ("dropout", "norm_eps"):
            _check_number(name, getattr(self, name))
        for name in ("qk_norm", "bias", "tie_weights", "fused_norms"):
            _check_bool(name, getattr(self, name))
        if self.d_model % self.n_head != 0:
            raise ConfigError(
                f"ModelConfig.d_model={self.d_model} must be divisible by n_head={self.n_head} "
                f"(choose d_model a multiple of n_head)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"ModelConfig.dropout={self.dropout!r} must be in [0, 1)")
        if not self.norm_eps > 0:
            raise ConfigError(f"ModelConfig.norm_eps={self.norm_eps!r} must be > 0")
        if self.d_ff is None:
            self.d_ff = default_ffn_width(self.d_model, self.act)
        _check_positive("d_ff", self.d_ff)

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
