"""The model as plain PyTorch: importable with neither Lightning nor Hydra."""

from tinylm.model.attention import CausalSelfAttention
from tinylm.model.block import Block, Residual
from tinylm.model.config import ModelConfig
from tinylm.model.ffn import FFNS, MLP, GatedMLP, build_ffn, default_ffn_width
from tinylm.model.gpt import GPT
from tinylm.model.norms import NORMS, LayerNorm, RMSNorm
from tinylm.model.placements import PLACEMENTS, NormPlacement

__all__ = [
    "FFNS",
    "GPT",
    "MLP",
    "NORMS",
    "PLACEMENTS",
    "Block",
    "CausalSelfAttention",
    "GatedMLP",
    "LayerNorm",
    "ModelConfig",
    "NormPlacement",
    "RMSNorm",
    "Residual",
    "build_ffn",
    "default_ffn_width",
]
