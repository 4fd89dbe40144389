"""The model's one source of truth: a flat, serialisable config dataclass.

A checkpoint stores `ModelConfig.to_dict()` beside the weights, so the model can be rebuilt from the
checkpoint alone, with neither Hydra nor Lightning (`tinylm.inference.trained.load_model`). Messages name fields as the command line does,
`model.<field>`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tinylm import checks
from tinylm.errors import ConfigError
from tinylm.model.ffn import FFNS, default_ffn_width
from tinylm.model.norms import NORMS
from tinylm.model.placements import PLACEMENTS

Init = Literal["gpt2", "xavier"]


@dataclass
class ModelConfig:
    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    # The choices are the registries' keys, checked in __post_init__: PLACEMENTS (placements.py), NORMS
    # (norms.py), FFNS (ffn.py).
    norm: str = "pre"
    norm_type: str = "layer"
    act: str = "gelu"
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
            checks.whole_number(f"model.{name}", getattr(self, name))
        # Read at every check, not copied at import: an entry registered later is a valid choice at once.
        for name, choices in (
            ("norm", PLACEMENTS),
            ("norm_type", NORMS),
            ("act", FFNS),
            ("init", get_args(Init)),
        ):
            checks.choice(f"model.{name}", getattr(self, name), choices)
        checks.number("model.dropout", self.dropout, at_least=0, below=1)
        checks.number("model.norm_eps", self.norm_eps, above=0)
        for name in ("qk_norm", "bias", "tie_weights", "fused_norms"):
            checks.boolean(f"model.{name}", getattr(self, name))
        if self.d_model % self.n_head != 0:
            raise ConfigError(
                f"model.d_model={self.d_model} must be divisible by n_head={self.n_head} "
                f"(choose d_model a multiple of n_head)"
            )
        if self.d_ff is None:
            self.d_ff = default_ffn_width(self.d_model, self.act)
        checks.whole_number("model.d_ff", self.d_ff)

    @property
    def head_size(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        checks.known_keys("model.", values, (f.name for f in dataclasses.fields(cls)))
        return cls(**values)
