"""What a run leaves on disk and where: its directory's files, the metric tags it logs, `metrics.json` (how it
ended) and its checkpoints (read without Lightning); and a sweep's own files (its report, sequential design).
Training writes this layout; analysis and inference read it through this module alone, so none of them needs
the others' code.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinylm.errors import UserError
from tinylm.files import write_json

if TYPE_CHECKING:  # torch and the model are imported on first use: the report needs neither
    import torch

    from tinylm.data.tokenizer import CharTokenizer
    from tinylm.model.config import ModelConfig

# The tags a run logs. TensorBoard sorts its groups by name and opens the first two: the losses, then the rate.
TRAIN_LOSS = "loss/train"
VAL_LOSS = "loss/val"
VAL_BPC = "loss/val_bpc"  # bits per character: VAL_LOSS / ln 2
BEST_VAL_LOSS = "loss/val_best"  # in metrics.json: the lowest VAL_LOSS of the run
LEARNING_RATE = "lr"
# The run's final evaluation, after its last step, on the validation windows its budget warrants:
# the result a sweep's report compares. metrics.json keeps each window's loss beside it.
FINAL_VAL_LOSS = "loss/val_full"
FINAL_WINDOW_LOSSES = "val_full_window_losses"
# ... and how many windows the split holds: on a short run the evaluation covers some of them (docs/sweeps.md).
FINAL_SPLIT_WINDOWS = "val_split_windows"
# In metrics.json: the validation split's uniform, unigram and bigram levels (tinylm.data.reference).
REFERENCE_LEVELS = "reference_levels"
# In metrics.json: the share of (a sample of) the validation characters that lie in a passage found verbatim in
# the training split, a whole line or a window (tinylm.data.overlap).
VAL_IN_TRAINING = "val_chars_in_training"
# The share above which a run warns at its start and the report names it: above what the shipped corpora repeat
# of themselves by several standard errors of the sampled share (docs/diagnosis.md), where memorised characters
# already move the mean validation loss. Here, not beside the measure, so that the report reads it without
# the data pipeline (and `datasets`).
VAL_IN_TRAINING_SHARE = 0.2
# In metrics.json of a run that diverged: the step whose training loss (or the weights after it) was first
# non-finite, as TensorBoard indexes it (the stop comes at the next check, up to a logging interval later).
DIVERGED_AT = "diverged_at_step"
METRICS = (VAL_LOSS, TRAIN_LOSS, VAL_BPC, BEST_VAL_LOSS, LEARNING_RATE, FINAL_VAL_LOSS)


TARGET_PREFIX = "target/"


def target_tags(level: float) -> tuple[str, str]:
    """The tags (TensorBoard and metrics.json) of the optimizer step and the training wall time, in seconds,
    at which loss/val first reached `level` (tinylm/training/callbacks/targets.py), e.g. `target/1.88/step`."""
    return f"{TARGET_PREFIX}{level:g}/step", f"{TARGET_PREFIX}{level:g}/time_s"


# A compiled run's warm-up before the training clock starts (tinylm/training/callbacks/warmup.py): its seconds,
# in TensorBoard and metrics.json, left out of every `target/<level>/time_s`.
COMPILE_WARMUP = "compile/warmup_s"


CONFIG_FILE = "config.yaml"
TOKENIZER_FILE = "tokenizer.json"
RECORD_FILE = "metrics.json"
TENSORBOARD_DIR = "tb"
HYDRA_DIR = ".hydra"
# A multirun's own record in its sweep directory (what varies, what every job shares).
SWEEP_RECORD = "sweep.yaml"
# Written by scripts/add_seeds.py beside it: the sequential design its added seeds are judged under.
DESIGN_FILE = "sequential.json"
# What scripts/report.py writes there: the report, its figures, and where a report a new one rewords is kept.
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
SENSITIVITY_PNG = "lr_sensitivity.png"
SCALE_PNG = "scale.png"
LADDER_PNG = "ladder.png"  # each design's difference from its level's baseline, a panel per level
WHY_PNG = "why_{}.png"  # the figure of each health quantity a *Why* row names
PREVIOUS_REPORTS = "previous_reports"
# What a run writes into its directory; a directory holding any of them holds a run.
RUN_FILES = (CONFIG_FILE, "checkpoints", RECORD_FILE, HYDRA_DIR, TENSORBOARD_DIR)
STATUSES = ("completed", "failed", "diverged", "interrupted")
# In metrics.json of a run resumed in place: what each earlier segment ended with, oldest first, so that a
# resume that is interrupted or fails never erases what the run had already finished with.
SEGMENTS = "segments"
SEGMENT_FIELDS = ("status", "step", VAL_LOSS, BEST_VAL_LOSS, FINAL_VAL_LOSS, "wall_time_s", "error")
LAST = "last"  # ckpt_path=last: this run directory's own last.ckpt


def evaluated_windows(count: int, available: int | None) -> str:
    """What a final evaluation covered: `all 7,477 validation windows`, or `960 of 7,477 validation windows`
    after a short run (`available` unknown in a record older than FINAL_SPLIT_WINDOWS: `… windows`)."""
    if available is None:
        return f"{count:,} validation windows"
    return (
        f"all {count:,} validation windows"
        if count >= available
        else f"{count:,} of {available:,} validation windows"
    )


def holds_a_run(run_dir: str | Path) -> bool:
    """Whether a run has written into `run_dir` (not just Hydra's log file of the command now starting)."""
    return any((Path(run_dir) / name).exists() for name in RUN_FILES)


@contextmanager
def run_directory_lock(run_dir: str | Path) -> Iterator[bool]:
    """Take the run directory's lock without waiting; yields whether it was taken (False: another process
    holds it). An flock on the directory itself: nothing is written to take it, and the kernel drops it
    however the process ends. The training run holds it throughout; a command that would remove the
    directory takes it first, so that it never removes one a run is in."""
    descriptor = os.open(run_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)  # releases the lock


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def last_checkpoint(run_dir: str | Path) -> Path:
    """The run's latest state, written at every validation and on Ctrl-C/SIGTERM: what a resume reads."""
    return checkpoint_dir(run_dir) / f"{LAST}.ckpt"


def write_run_record(run_dir: str | Path, status: str, **fields: Any) -> Path:
    """`metrics.json`: the run's status and final numbers; a run directory without one is unfinished."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    path = Path(run_dir) / RECORD_FILE
    write_json(path, {"status": status, **fields})
    return path


def read_run_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's record, or None when it has none (unfinished) or it cannot be parsed."""
    try:
        record = json.loads((Path(run_dir) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    return {key: float(value) if value in ("nan", "inf", "-inf") else value for key, value in record.items()}


def earlier_segments(run_dir: str | Path) -> list[dict[str, Any]]:
    """The segments a new record of `run_dir` must keep: its record's own `segments`, then how that record
    itself ended, in brief; none in a directory without a record."""
    record = read_run_record(run_dir)
    if record is None:
        return []
    kept = record.get(SEGMENTS)
    return [*(kept if isinstance(kept, list) else []), {k: record[k] for k in SEGMENT_FIELDS if k in record}]


class CheckpointError(UserError, ValueError):
    """A checkpoint path is missing, unreadable, or not a tinylm checkpoint."""


# What marks a checkpoint saved by Lightning's FSDPStrategy with state_dict_type="sharded": a directory of
# torch.distributed.checkpoint shards and this file, the rest of the checkpoint (Lightning 2.6 checks the same).
SHARDED_METADATA_FILE = "meta.pt"
CONSOLIDATE_COMMAND = "python -m lightning.pytorch.utilities.consolidate_checkpoint"


def resolve_checkpoint(path: str | Path) -> Path:
    """A `.ckpt` file as given, or a run directory's `checkpoints/last.ckpt`. A sharded FSDP checkpoint, given
    as itself or as its run directory, is refused with the one command that turns it into a file."""
    path = Path(path).expanduser()
    for candidate in (path, last_checkpoint(path), path / f"{LAST}.ckpt"):
        if candidate.is_dir() and (candidate / SHARDED_METADATA_FILE).is_file():
            raise CheckpointError(
                f"checkpoint {str(candidate)!r} is a sharded FSDP checkpoint (a directory of shards, saved with "
                f"state_dict_type='sharded'); consolidate it into one file first: {CONSOLIDATE_COMMAND} "
                f"{str(candidate)!r} (it writes {str(candidate) + '.consolidated'!r}), then pass that file as "
                "ckpt= (ckpt_path= to resume training)"
            )
    if path.is_dir():
        for candidate in (last_checkpoint(path), path / f"{LAST}.ckpt"):
            if candidate.is_file():
                return candidate
        raise CheckpointError(
            f"no checkpoints/last.ckpt in run directory {str(path)!r}; "
            "give a run directory that has trained for at least one checkpoint, or a .ckpt file"
        )
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not exist; give a .ckpt file or a run directory (runs/<overrides>/<date>_<time>)"
        )
    return path


@dataclass
class Checkpoint:
    """A tinylm checkpoint's contents, read once with `weights_only=True`: the weights, the model's config and
    the tokenizer rebuild the model without Lightning; the rest (optimizer, loops) is Lightning's to restore."""

    path: Path
    contents: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.contents.get("global_step", 0))

    def model_config(self) -> ModelConfig:
        from tinylm.model.config import ModelConfig

        try:
            return ModelConfig.from_dict(dict(self.contents["hyper_parameters"]["model"]))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{str(self.path)!r} holds no usable model config ({err})") from None

    def tokenizer(self) -> CharTokenizer:
        from tinylm.data.tokenizer import CharTokenizer

        if "tokenizer" not in self.contents:
            raise CheckpointError(
                f"checkpoint {str(self.path)!r} carries no tokenizer; use a checkpoint written by tinylm"
            )
        try:
            return CharTokenizer.from_dict(self.contents["tokenizer"])
        except ValueError as err:
            raise CheckpointError(
                f"the tokenizer of checkpoint {str(self.path)!r} is unreadable: {err}"
            ) from None

    def model_weights(self) -> dict[str, torch.Tensor]:
        """The `GPT`'s state dict: the LightningModule keeps the model as its `model` attribute."""
        return {
            key.removeprefix("model."): value
            for key, value in self.contents["state_dict"].items()
            if key.startswith("model.")
        }


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint file (or a run directory's last.ckpt) with `weights_only=True`: tensors and plain
    containers only, never pickled code."""
    import torch

    path = resolve_checkpoint(path)
    try:
        contents = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for truncated, foreign or malicious files
        reason = first_sentence(str(err)) or type(err).__name__
        raise CheckpointError(
            f"cannot read checkpoint {str(path)!r} ({type(err).__name__}: {reason}); it is truncated, "
            "not a PyTorch checkpoint, or holds pickled objects other than tensors and plain data, which "
            "are never loaded; use a last.ckpt or best.ckpt written by tinylm"
        ) from None
    if not isinstance(contents, dict) or "state_dict" not in contents or "hyper_parameters" not in contents:
        raise CheckpointError(
            f"{str(path)!r} is not a tinylm training checkpoint (no state_dict/hyper_parameters); "
            "use a last.ckpt or best.ckpt written by tinylm"
        )
    return Checkpoint(path, contents)


def first_sentence(message: str, max_chars: int = 120) -> str:
    """The gist of a library's error: its first sentence, without terminal colour codes."""
    message = re.sub(r"\x1b\[[0-9;]*m", "", message).strip()
    sentence = re.split(r"(?<=[.!?])\s", message.splitlines()[0] if message else "", maxsplit=1)[0]
    return sentence if len(sentence) <= max_chars else sentence[: max_chars - 1] + "…"
