"""A trained model rebuilt from its checkpoint alone: one `torch.load(weights_only=True)`, no Lightning."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tinylm.data import CharTokenizer
from tinylm.layout import CheckpointError, read_checkpoint
from tinylm.model import GPT, ModelConfig


@dataclass
class TrainedModel:
    """The `GPT` in eval mode, the tokenizer it was trained with, its config and the file it came from."""

    gpt: GPT
    tokenizer: CharTokenizer
    config: ModelConfig
    path: Path
    step: int


def load_model(path: str | Path, device: str | torch.device = "cpu") -> TrainedModel:
    """Rebuild the model and its tokenizer from a checkpoint file or a run directory (its last.ckpt), reading
    tensors and plain data only, never pickled code."""
    checkpoint = read_checkpoint(path)
    config = checkpoint.model_config()
    tokenizer = checkpoint.tokenizer()
    gpt = GPT(config)
    weights = checkpoint.model_weights()
    mismatch = weights_mismatch(gpt.state_dict(), weights)
    if mismatch:
        raise CheckpointError(
            f"the weights of checkpoint {str(checkpoint.path)!r} do not fit its own model config ({mismatch}); "
            "use a last.ckpt or best.ckpt written by tinylm"
        )
    gpt.load_state_dict(weights)
    return TrainedModel(gpt.to(device).eval(), tokenizer, config, checkpoint.path, checkpoint.step)


def weights_mismatch(expected: dict[str, torch.Tensor], weights: dict[str, object]) -> str:
    """What keeps `weights` from loading strictly into a model whose state dict is `expected` ("" if nothing):
    named here, as torch's own message runs over many lines."""
    problems = {
        "missing": sorted(expected.keys() - weights.keys()),
        "unexpected": sorted(weights.keys() - expected.keys()),
        "misshapen": sorted(
            name
            for name in expected.keys() & weights.keys()
            if not isinstance(weights[name], torch.Tensor) or weights[name].shape != expected[name].shape
        ),
    }
    return "; ".join(
        f"{kind} {', '.join(names[:3])}{' …' if len(names) > 3 else ''}"
        for kind, names in problems.items()
        if names
    )
