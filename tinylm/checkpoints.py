"""Finding and safely reading tinylm checkpoints (no pickled code is ever executed)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import torch

from tinylm.data import CharTokenizer
from tinylm.errors import UserError
from tinylm.model import ModelConfig

LAST = "last"
# Settings that change neither the weights' shapes nor their meaning: a resume may change them.
_FREE_ON_RESUME = {"fused_norms"}


class CheckpointError(UserError, ValueError):
    """A checkpoint path is missing, unreadable, or not a tinylm checkpoint."""


def resolve_checkpoint(path: str | Path) -> Path:
    """A `.ckpt` file as given, or a run directory's `checkpoints/last.ckpt`."""
    path = Path(path).expanduser()
    if path.is_dir():
        for candidate in (path / "checkpoints" / "last.ckpt", path / "last.ckpt"):
            if candidate.is_file():
                return candidate
        raise CheckpointError(
            f"no checkpoints/last.ckpt in run directory {str(path)!r}; "
            "give a run directory that has trained for at least one checkpoint, or a .ckpt file"
        )
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not exist; give a .ckpt file or a run directory (runs/<date>/<time>)"
        )
    return path


def resume_checkpoint(ckpt_path: str | Path | None, run_dir: str | Path) -> Path | None:
    """The checkpoint a training run resumes from: none, `last` (this run directory's own
    `checkpoints/last.ckpt`, i.e. continue the run in place), or a file or run directory."""
    if ckpt_path is None or str(ckpt_path) == "":
        return None
    if str(ckpt_path) == LAST:
        last = Path(run_dir) / "checkpoints" / "last.ckpt"
        if not last.is_file():
            raise CheckpointError(
                f"ckpt_path=last continues the run in this run directory, and {str(run_dir)!r} has no "
                "checkpoints/last.ckpt; point hydra.run.dir at the run to continue, "
                "or pass ckpt_path=<its run directory or .ckpt file>"
            )
        return last
    return resolve_checkpoint(ckpt_path)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint's contents with `weights_only=True`: tensors and plain containers only."""
    path = resolve_checkpoint(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for truncated, foreign or malicious files
        reason = first_sentence(str(err)) or type(err).__name__
        raise CheckpointError(
            f"cannot read checkpoint {str(path)!r} ({type(err).__name__}: {reason}); it is truncated, "
            "not a PyTorch checkpoint, or holds pickled objects other than tensors and plain data, which "
            "are never loaded; use a last.ckpt or best.ckpt written by tinylm"
        ) from None
    if (
        not isinstance(checkpoint, dict)
        or "state_dict" not in checkpoint
        or "hyper_parameters" not in checkpoint
    ):
        raise CheckpointError(
            f"{str(path)!r} is not a tinylm training checkpoint (no state_dict/hyper_parameters); "
            "use a last.ckpt or best.ckpt written by tinylm"
        )
    return checkpoint


def first_sentence(message: str, max_chars: int = 120) -> str:
    """The gist of a library's error: its first sentence, without terminal colour codes."""
    message = re.sub(r"\x1b\[[0-9;]*m", "", message).strip()
    sentence = re.split(r"(?<=[.!?])\s", message.splitlines()[0] if message else "", maxsplit=1)[0]
    return sentence if len(sentence) <= max_chars else sentence[: max_chars - 1] + "…"


def checkpoint_tokenizer(checkpoint: dict[str, Any]) -> CharTokenizer:
    if "tokenizer" not in checkpoint:
        raise CheckpointError("the checkpoint carries no tokenizer; use a checkpoint written by tinylm")
    try:
        return CharTokenizer.from_dict(checkpoint["tokenizer"])
    except ValueError as err:
        raise CheckpointError(f"the checkpoint's tokenizer is unreadable: {err}") from None


def checkpoint_model_config(checkpoint: dict[str, Any], path: str | Path) -> ModelConfig:
    try:
        return ModelConfig.from_dict(dict(checkpoint["hyper_parameters"]["model"]))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{str(path)!r} holds no usable model config ({err})") from None


def check_resumable(checkpoint: dict[str, Any], path: str | Path, model: ModelConfig, max_steps: int) -> None:
    """Refuse, with the reason, a resume that could not load the checkpoint or would not train at all."""
    trained = checkpoint_model_config(checkpoint, path)
    changed = [
        f"model.{field.name}={getattr(trained, field.name)!r} there, {getattr(model, field.name)!r} here"
        for field in dataclasses.fields(ModelConfig)
        if field.name not in _FREE_ON_RESUME and getattr(trained, field.name) != getattr(model, field.name)
    ]
    if changed:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was trained with another model ({'; '.join(changed)}); resume with "
            "the settings it was trained with, or drop ckpt_path to train from scratch"
        )
    step = int(checkpoint.get("global_step", 0))
    if step >= max_steps:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is already at step {step} and trainer.max_steps={max_steps}; "
            "raise trainer.max_steps to train further"
        )
