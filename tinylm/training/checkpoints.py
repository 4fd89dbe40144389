"""Checkpoint files: where they live, how they are written (atomically) and read (never running pickled
code), and how a trained model is rebuilt from one alone."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import ModelCheckpoint

from tinylm.data import CharTokenizer
from tinylm.errors import UserError
from tinylm.files import write_atomically
from tinylm.model import ModelConfig
from tinylm.training.module import VAL_LOSS

if TYPE_CHECKING:
    from tinylm.training.module import CharLM

LAST = "last"
# Settings that change neither the weights' shapes nor their meaning: a resume may change them.
_FREE_ON_RESUME = {"fused_norms"}


class CheckpointError(UserError, ValueError):
    """A checkpoint path is missing, unreadable, or not a tinylm checkpoint."""


class CheckpointWriteError(UserError, OSError):
    """A checkpoint could not be written (a full disk, a read-only directory); the previous one is intact."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def last_checkpoint(run_dir: str | Path) -> Path:
    """The run's latest state, written at every validation and on Ctrl-C/SIGTERM: what a resume reads."""
    return checkpoint_dir(run_dir) / "last.ckpt"


def checkpoint_callbacks(run_dir: str | Path) -> list[ModelCheckpoint]:
    """`best.ckpt` (lowest validation loss so far) and `last.ckpt` (the latest state), both rewritten in place.
    Not `save_last`, which writes last.ckpt only when best.ckpt improves; no version counter, so a resumed run
    never starts a best-v1.ckpt."""
    directory = str(checkpoint_dir(run_dir))
    best = ModelCheckpoint(
        dirpath=directory, filename="best", monitor=VAL_LOSS, mode="min", save_top_k=1,
        auto_insert_metric_name=False, enable_version_counter=False,
    )  # fmt: skip
    last = ModelCheckpoint(dirpath=directory, filename=LAST, monitor=None, enable_version_counter=False)
    return [best, last]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint to a temporary file beside it, fsynced and renamed over it, so a kill leaves the
    old checkpoint or the new one, never a partial file; Lightning's own temporary file may be on another
    filesystem, where its final move is a copy (docs/errors.md). Loads with `weights_only=True`."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            # Remote stores (s3://, gs://...) publish an object only once it is complete.
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        try:
            # Only this run writes its checkpoints (it holds the run directory): stale temporaries are its own.
            write_atomically(Path(path), lambda file: torch.save(checkpoint, file), remove_stale=True)
        except OSError as err:
            previous = "the previous one is intact" if Path(path).is_file() else "there was none before"
            raise CheckpointWriteError(
                f"could not write checkpoint {str(path)!r} ({err.strerror or err}); {previous}; free space (or "
                f"choose a writable hydra.run.dir) and resume with ckpt_path={Path(path).parent.parent}"
            ) from None

    def load_checkpoint(
        self,
        path: Any,
        map_location: Any | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        return super().load_checkpoint(path, map_location=map_location, weights_only=True)


def resolve_checkpoint(path: str | Path) -> Path:
    """A `.ckpt` file as given, or a run directory's `checkpoints/last.ckpt`."""
    path = Path(path).expanduser()
    if path.is_dir():
        for candidate in (last_checkpoint(path), path / "last.ckpt"):
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
        last = last_checkpoint(run_dir)
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


def load_module(path: str | Path, map_location: str = "cpu") -> CharLM:
    """Rebuild the trained model and its tokenizer from a checkpoint (or run directory) alone, loading with
    `weights_only=True`: tensors and plain data, never code."""
    from tinylm.training.module import CharLM

    ckpt = resolve_checkpoint(path)
    # Turns a truncated, foreign or malicious file, or one without a usable model config, into a clear
    # CheckpointError before Lightning touches it.
    checkpoint_model_config(read_checkpoint(ckpt), ckpt)
    module = CharLM.load_from_checkpoint(ckpt, map_location=map_location, weights_only=True)
    if module.tokenizer is None:
        raise CheckpointError(f"checkpoint {str(ckpt)!r} carries no tokenizer; use one written by tinylm")
    module.eval()
    return module
