"""Checkpoints as training writes them (atomically, through Lightning's CheckpointIO plugin) and reads them
for a resume (once, `weights_only=True`); where they live and what they hold is `tinylm.layout`'s."""

from __future__ import annotations

import dataclasses
import errno
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import ModelCheckpoint

from tinylm.errors import UserError
from tinylm.files import write_atomically
from tinylm.layout import (
    LAST,
    VAL_LOSS,
    Checkpoint,
    CheckpointError,
    checkpoint_dir,
    last_checkpoint,
    read_checkpoint,
)
from tinylm.model import ModelConfig
from tinylm.training.run_dir import resume_hint

if TYPE_CHECKING:
    from tinylm.training.module import CharLM

# What to do about a checkpoint that could not be written, by the reason the system gave.
WRITE_FIXES = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space",
    errno.EFBIG: "raise the file-size limit (ulimit -f) or free some space",
}

# Settings that change neither the weights' shapes nor their meaning: a resume may change them.
FREE_ON_RESUME = {"fused_norms"}


class CheckpointWriteError(UserError, OSError):
    """A checkpoint could not be written (a full disk, a read-only directory); the previous one is intact."""


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


class _KeepingWriteErrors:
    """The file torch.save writes, keeping the OSError each failed write raised, which torch.save replaces by a
    RuntimeError of its own."""

    def __init__(self, file: IO[bytes], errors: list[OSError]) -> None:
        self.file = file
        self.errors = errors

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.errors.append(err)
            raise

    def __getattr__(self, name: str) -> Any:  # the rest is the file's
        return getattr(self.file, name)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint to a temporary file beside it, fsynced and renamed over it, so a kill leaves the
    old checkpoint or the new one, never a partial file; Lightning's own temporary file may be on another
    filesystem, where its final move is a copy (docs/errors.md). Loads with `weights_only=True`, and hands
    Lightning the resumed checkpoint the run has already read instead of reading it again."""

    def __init__(self, resumed: Checkpoint | None = None) -> None:
        super().__init__()
        self.resumed = resumed

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            # Remote stores (s3://, gs://...) publish an object only once it is complete.
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        path = Path(path)
        file_errors: list[OSError] = []
        try:
            # Only this run writes its checkpoints (it holds the run directory): stale temporaries are its own.
            write_atomically(
                path,
                lambda file: torch.save(checkpoint, _KeepingWriteErrors(file, file_errors)),
                remove_stale=True,
            )
        except (OSError, RuntimeError) as err:
            # torch.save turns a failed write (a full disk, a file-size limit) into a RuntimeError of its own
            # ("unexpected pos"): the OSError the file raised says why.
            cause = err if isinstance(err, OSError) else next(iter(file_errors), None)
            if cause is None:
                raise
            previous = "the previous one is intact" if path.is_file() else "there was none before"
            fix = WRITE_FIXES.get(cause.errno, "make its directory writable")
            run_dir = path.parent.parent
            then = resume_hint(run_dir) if last_checkpoint(run_dir).is_file() else "run the command again"
            raise CheckpointWriteError(
                f"could not write checkpoint {str(path)!r} ({cause.strerror or cause}); {previous}; {fix}, then "
                f"{then}"
            ) from None

    def load_checkpoint(
        self,
        path: Any,
        map_location: Any | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        # Handed over once: Lightning restores from it and drops it.
        resumed, self.resumed = self.resumed, None
        if resumed is not None and Path(path) == resumed.path:
            return resumed.contents
        return super().load_checkpoint(path, map_location=map_location, weights_only=True)


def resume_checkpoint(ckpt_path: str | Path | None, run_dir: str | Path) -> Checkpoint | None:
    """The checkpoint a training run resumes from, read: none, `last` (this run directory's own
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
        return read_checkpoint(last)
    return read_checkpoint(ckpt_path)


def check_resumable(checkpoint: Checkpoint, model: ModelConfig, max_steps: int, optimizer: str) -> None:
    """Refuse, with the reason, a resume that could not load the checkpoint or would not train at all."""
    trained = checkpoint.model_config()
    changed = [
        f"model.{field.name}={getattr(trained, field.name)!r} there, {getattr(model, field.name)!r} here"
        for field in dataclasses.fields(ModelConfig)
        if field.name not in FREE_ON_RESUME and getattr(trained, field.name) != getattr(model, field.name)
    ]
    if changed:
        raise CheckpointError(
            f"checkpoint {str(checkpoint.path)!r} was trained with another model ({'; '.join(changed)}); "
            "resume with the settings it was trained with, or drop ckpt_path to train from scratch"
        )
    # Another optimizer's state cannot be loaded (AdamW's groups are not Muon's): refused before the run
    # directory's record is touched. Checkpoints from before `optim.name` were AdamW's.
    trained_with = (checkpoint.contents["hyper_parameters"].get("optim") or {}).get("name", "adamw")
    if trained_with != optimizer:
        raise CheckpointError(
            f"checkpoint {str(checkpoint.path)!r} was trained with optim={trained_with}, and optim={optimizer} "
            "cannot load its optimizer state; resume with the optimizer it was trained with, or drop ckpt_path "
            "to train from scratch"
        )
    if checkpoint.step >= max_steps:
        raise CheckpointError(
            f"checkpoint {str(checkpoint.path)!r} is already at step {checkpoint.step} and "
            f"trainer.max_steps={max_steps}; raise trainer.max_steps to train further"
        )


def load_module(path: str | Path) -> CharLM:
    """The LightningModule of a checkpoint (or run directory), rebuilt from one `weights_only=True` read: for
    code that needs the module (a sharded run's sample, tests); `tinylm.inference` needs only the `GPT`."""
    from tinylm.training.module import CharLM

    checkpoint = read_checkpoint(path)
    # The config built once, by the checkpoint: one without a usable config is refused with its reason.
    module = CharLM(**{**checkpoint.contents["hyper_parameters"], "model": checkpoint.model_config()})
    module.load_state_dict(checkpoint.contents["state_dict"])
    module.tokenizer = checkpoint.tokenizer()
    return module.eval()
