"""A run's directory: held by one run at a time, written only once every input is checked, pointed at by
`latest` so that the run just trained is easy to name, and continued in place by the command `resume_hint` prints
(a sweep's job: by the sweep's command run again into the sweep's directory, `job_to_continue`)."""

from __future__ import annotations

import logging
import math
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.types import Quote, QuotedString
from hydra.types import RunMode
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from tinylm.errors import UserError
from tinylm.files import temporary_sibling
from tinylm.layout import CONFIG_FILE, HYDRA_DIR, LAST, last_checkpoint, read_run_record, run_directory_lock
from tinylm.overrides import parse

log = logging.getLogger(__name__)

# How a sweep's job that ran to its end finished: run again into the sweep's directory, it keeps its result.
FINISHED = ("completed", "diverged")


class RunDirectoryError(UserError):
    """The run directory cannot be used: another run holds it, or it cannot be written. The command is
    refused before it writes or logs anything there."""


class FinishedJob(RunDirectoryError):
    """A sweep's job run again into its own directory, where it had finished (`FINISHED`): its run is kept as
    it is, and its result goes to the sweeper."""

    def __init__(self, run_dir: str | Path, record: dict[str, Any]) -> None:
        super().__init__(f"{str(run_dir)!r} holds this job's {record['status']} run: kept")
        self.record = record

    def score(self, metric: str | None) -> float | None:
        """What the job scored, as `objective` scores a run: `+inf` diverged, else its `metric` (None: none)."""
        if self.record["status"] == "diverged":
            return math.inf
        value = self.record.get(metric) if metric else None
        return float(value) if isinstance(value, int | float) else None


def job_to_continue(run_dir: str | Path) -> str | None:
    """For a sweep's job whose directory holds a `last.ckpt`, when the sweep's command runs again into the
    sweep's directory: `last` where the job stopped before its end (interrupted, failed, or killed with no
    record), so that it continues from that checkpoint as `resume_hint` says; a job that finished raises
    `FinishedJob`. None in a directory without a checkpoint: the job starts."""
    last = last_checkpoint(run_dir)
    if not last.is_file():
        return None
    record = read_run_record(run_dir) or {}
    if record.get("status") in FINISHED:
        raise FinishedJob(run_dir, record)
    log.info("continuing this job of the sweep from %s (%s)", last, record.get("status", "no record"))
    return LAST


@contextmanager
def hold(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory for this run, refusing a second run into it or a directory it cannot write
    (`run_directory_lock`). A directory that does not exist yet has nobody in it; the ranks Lightning starts
    share rank 0's directory, and only rank 0 writes the run's files."""
    run_dir = Path(run_dir)
    if rank_zero_only.rank != 0 or not run_dir.is_dir():
        yield
        return
    if not os.access(run_dir, os.W_OK):  # a read-only file system or no permission: refuse before logging
        raise RunDirectoryError(f"cannot write into {str(run_dir)!r}; choose a writable hydra.run.dir")
    with run_directory_lock(run_dir) as taken:
        if not taken:
            raise RunDirectoryError(
                f"another run is training in {str(run_dir)!r}; wait for it to end, or choose another "
                "hydra.run.dir"
            )
        yield


def save_hydra_record(run_dir: str | Path, cfg: DictConfig) -> None:
    """Hydra's record of the command in `.hydra/` (config, Hydra's own settings, the overrides), written by
    tinylm once the run has passed its checks (`hydra.output_subdir` is null, so Hydra writes nothing before
    the run may have been refused). No record outside a Hydra app."""
    if not HydraConfig.initialized():
        return
    hydra = HydraConfig.get()
    directory = Path(run_dir) / HYDRA_DIR
    directory.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, directory / CONFIG_FILE)
    OmegaConf.save(OmegaConf.create({"hydra": hydra}), directory / "hydra.yaml")
    OmegaConf.save(OmegaConf.create(list(hydra.overrides.task)), directory / "overrides.yaml")


def point_latest_at(link: str | Path, run_dir: str | Path) -> None:
    """Make `link` (e.g. latest) a symlink to `run_dir`, replaced atomically."""
    link, target = Path(link), Path(run_dir).resolve()
    link.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_sibling(link)
    os.symlink(os.path.relpath(target, link.parent.resolve()), temporary)
    try:
        os.replace(temporary, link)
    except OSError as err:
        temporary.unlink()
        raise UserError(
            f"cannot point latest_link={str(link)!r} at the run ({err.strerror or err}): something that is not a "
            "link is in the way; move it, or set latest_link to another path (or null)"
        ) from None


def resume_hint(run_dir: str | Path) -> str:
    """How to continue the run in `run_dir` in place (docs/cli.md#resuming): inside a Hydra app, the one command,
    quoted to paste into a shell: this script with the run's own overrides (another model is refused),
    `hydra.run.dir` at this directory and `ckpt_path=last`. A run's directory name holds `=` and `,`, which
    Hydra reads as a key and a sweep unless its value is quoted, inside the shell's quotes.

    A job of a grid sweep continues where it belongs, as a job of its sweep: the sweep's command again into
    the sweep's directory (`job_to_continue`), which also starts the jobs the stop left unrun. A search
    (Optuna) proposes new trials when its command runs again, so its trial stays as it is."""
    run_dir = Path(run_dir).resolve()
    in_place = [f"hydra.run.dir={hydra_quoted(str(run_dir))}", "ckpt_path=last"]
    if not HydraConfig.initialized():
        return f"resume in place with the run's own settings and {' '.join(shlex.quote(o) for o in in_place)}"
    hydra = HydraConfig.get()
    if hydra.mode == RunMode.MULTIRUN:
        if hydra.runtime.choices.get("hydra/sweeper") != "basic":
            return (
                "to carry on the search, run its command again: its study goes on with new trials, and this "
                "one stays as it stopped"
            )
        sweep_dir = f"hydra.sweep.dir={hydra_quoted(str(Path(hydra.sweep.dir).resolve()))}"
        return (
            f"to carry on the sweep, run its command again with {shlex.quote(sweep_dir)}: this job continues "
            "from its last checkpoint, the jobs that completed or diverged are kept, and those not yet run start"
        )
    own = [
        choice.text
        for choice in parse(list(hydra.overrides.task))
        if choice.key not in ("ckpt_path", "hydra.run.dir")  # both given below
    ]
    script = Path(sys.argv[0]).resolve()
    return "resume with: " + shlex.join(["python", str(script), *own, *in_place])


def hydra_quoted(value: str) -> str:
    """`value` as a quoted string of Hydra's override grammar: read back as itself, whatever its characters
    (`${` escaped, so that OmegaConf does not resolve it as an interpolation)."""
    return QuotedString(value.replace("${", "\\${"), Quote.double).with_quotes()
