"""Training as one job of a sweep (`scripts/train.py` hands every run to `run_job`): a failing job is recorded
in its `metrics.json` and the sweep goes on, where Hydra's sweepers would stop. A diverged job scores `+inf`
(a real, very bad result), any other failure `None` (an Optuna FAIL trial, as `nan` would end the sweep);
Ctrl-C, SIGTERM and `SWEEP_ERRORS` still stop it. See docs/sweeps.md.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from lightning.fabric.utilities.spike import TrainingSpikeException
from omegaconf import DictConfig, OmegaConf

from tinylm.errors import TrainingInterrupted
from tinylm.training.distributed import ScaleOutError
from tinylm.training.run import holding, in_multirun, prepare
from tinylm.training.run_dir import RunDirectoryError, holds_a_run, save_hydra_record
from tinylm.training.run_record import write_run_record

log = logging.getLogger(__name__)

# Exceptions that mean "the loss blew up", not "the program broke". FloatingPointError is Python's own
# for numeric failure, and tinylm's TrainingDiverged derives from it; anything else is listed here.
DIVERGENCE_ERRORS: tuple[type[BaseException], ...] = (FloatingPointError, TrainingSpikeException)
# Exceptions that condemn the whole sweep, not one job: every job would fail the same way, so the sweep
# stops at the first (e.g. `-m` with a DDP trainer that would re-run the sweep for every rank).
SWEEP_ERRORS: tuple[type[BaseException], ...] = (ScaleOutError, TrainingInterrupted)


def run_job(cfg: DictConfig, keep_going: bool | None = None) -> float | None:
    """Train as `cfg` says; return `cfg.optimized_metric` (to be minimised) for the sweeper.

    `keep_going` (default: inside a multirun) turns an exception into a recorded failure and a return value;
    otherwise it is recorded and re-raised. A refused command records nothing in a directory holding a run.
    """
    if keep_going is None:
        keep_going = in_multirun()
    started = time.perf_counter()
    fresh = not holds_a_run(cfg.run_dir)
    job = None
    try:
        with holding(cfg.run_dir):
            job = prepare(cfg)
            metrics = job.fit()
    except Exception as error:
        if isinstance(error, TrainingInterrupted):
            status = "interrupted"
        else:
            status = "diverged" if isinstance(error, DIVERGENCE_ERRORS) else "failed"
        refused = job is None  # by the checks, before anything was written
        if not isinstance(error, RunDirectoryError) and (fresh or not refused):
            saved_at = {"step": error.step} if isinstance(error, TrainingInterrupted) else {}
            _record_failure(cfg, status, error, time.perf_counter() - started, **saved_at)
        if not keep_going or isinstance(error, SWEEP_ERRORS):
            raise
        log.exception("run %s %s; the sweep goes on", cfg.get("run_name"), status)
        return math.inf if status == "diverged" else None

    name = cfg.get("optimized_metric")
    if not name:
        return None
    if name not in metrics:
        raise KeyError(f"optimized_metric={name!r} is not among the run's metrics: {sorted(metrics)}")
    value = float(metrics[name])
    if not math.isfinite(value):
        log.error("run %s diverged: %s=%s", cfg.get("run_name"), name, value)
        write_run_record(cfg.run_dir, "diverged", **_numbers(metrics), error=f"{name} is {value}")
        return math.inf
    return value


def _numbers(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, int | float)}


def _record_failure(
    cfg: DictConfig, status: str, error: Exception, wall_time_s: float, **fields: Any
) -> None:
    run_dir = Path(str(cfg.run_dir))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / ".hydra").exists():  # so that the sweep report finds the failed job
            save_hydra_record(run_dir, cfg)
        write_run_record(
            run_dir, status, error=f"{type(error).__name__}: {error}", wall_time_s=wall_time_s, **fields
        )
    except OSError as write_error:  # the original error matters more than its record
        log.warning("could not write the failure record in %s: %s", run_dir, write_error)


class CreateStorageDir(Callback):
    """Hydra callback: create the directory of the Optuna sweeper's SQLite database, which SQLite does not,
    before the sweeper opens its study (and before the launcher creates any directory)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        storage = OmegaConf.select(config, "hydra.sweeper.storage", default=None)
        if isinstance(storage, str) and storage.startswith("sqlite:///"):
            database = Path(storage.removeprefix("sqlite:///"))
            database.parent.mkdir(parents=True, exist_ok=True)
            log.info("Optuna study %r in %s", OmegaConf.select(config, "hydra.sweeper.study_name"), database)
