"""Finding and safely reading tinylm checkpoints (no pickled code is ever executed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tinylm.data import CharTokenizer


class CheckpointError(ValueError):
    """A checkpoint path is missing, unreadable, or not a tinylm checkpoint."""


def resolve_checkpoint(path: str | Path) -> Path:
    """A `.ckpt` file as given, or a run directory's `checkpoints/last.ckpt`."""
    path = Path(path).expanduser()
    if path.is_dir():
        for candidate in (path / "checkpoints" / "last.ckpt", path / "last.ckpt"):
            if candidate.is_file():
                return candidate
        raise CheckpointError(f"no checkpoints/last.ckpt in run directory {str(path)!r}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    return path


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint's contents with `weights_only=True`: tensors and plain containers only."""
    path = resolve_checkpoint(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for truncated or foreign files
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {type(err).__name__}: {err}") from None
    if (
        not isinstance(checkpoint, dict)
        or "state_dict" not in checkpoint
        or "hyper_parameters" not in checkpoint
    ):
        raise CheckpointError(
            f"{str(path)!r} is not a tinylm training checkpoint (no state_dict/hyper_parameters)"
        )
    return checkpoint


def checkpoint_tokenizer(checkpoint: dict[str, Any]) -> CharTokenizer:
    if "tokenizer" not in checkpoint:
        raise CheckpointError("the checkpoint carries no tokenizer")
    return CharTokenizer.from_dict(checkpoint["tokenizer"])
