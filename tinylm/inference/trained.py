"""A trained model rebuilt from its checkpoint alone: one `torch.load(weights_only=True)`, no Lightning."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tinylm.data import CharTokenizer
from tinylm.layout import LAST, CheckpointError, last_checkpoint, read_checkpoint
from tinylm.model import GPT, ModelConfig

# What marks a checkpoint saved by Lightning's FSDPStrategy with state_dict_type="sharded": a directory of
# torch.distributed.checkpoint shards and this file, the rest of the checkpoint (Lightning 2.6 checks the same).
SHARDED_METADATA_FILE = "meta.pt"
CONSOLIDATE_COMMAND = "python -m lightning.pytorch.utilities.consolidate_checkpoint"


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
    refuse_sharded(path)
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


def refuse_sharded(path: str | Path) -> None:
    """A sharded FSDP checkpoint, given as itself or as its run directory, is refused with the one command
    that turns it into a file: reading the shards needs torch.distributed and Lightning's loader."""
    path = Path(path).expanduser()
    for candidate in (path, last_checkpoint(path), path / f"{LAST}.ckpt"):
        if candidate.is_dir() and (candidate / SHARDED_METADATA_FILE).is_file():
            raise CheckpointError(
                f"checkpoint {str(candidate)!r} is a sharded FSDP checkpoint (a directory of shards, saved with "
                f"state_dict_type='sharded'); consolidate it into one file first: {CONSOLIDATE_COMMAND} "
                f"{str(candidate)!r} (it writes {str(candidate) + '.consolidated'!r}), then pass that file as ckpt="
            )


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
