"""Training as one job of a sweep: a failing job is recorded and the sweep goes on.

`scripts/train.py` hands every run, single or swept, to `run_job`. In a Hydra multirun one job's crash
would otherwise end the whole sweep (Hydra's basic sweeper re-raises it after the batch; the Optuna sweeper
stops at its first failure by default). Here a failing job is logged with its traceback, its run directory
gets a `metrics.json` saying how it ended, and the sweeper gets a value it understands:

- **diverged** (a divergence error, or a non-finite objective): `+inf`. Blowing up is a real, terrible result
  for those hyperparameters, so Optuna records a complete trial worth `inf` and learns to avoid the region.
- **failed** (any other exception): `None`. Optuna marks the trial FAIL and leaves it out of its model
  (`nan` would not do: optuna 2.x refuses a `nan` value in a way that ends the sweep).

A single run still raises, so it exits non-zero; so does an error that condemns the whole sweep
(`SWEEP_ERRORS`), which stops it at the first job, and Ctrl-C or SIGTERM (`TrainingInterrupted`, recorded
as `interrupted`: last.ckpt holds the job's state), which stops the sweep as the user or scheduler asked.
A bad input (a `UserError`) never replaces the record of a run already in the directory, e.g. when a
resume in place is mistyped.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from lightning.fabric.utilities.spike import TrainingSpikeException
from omegaconf import DictConfig, OmegaConf

from tinylm.errors import TrainingDiverged, TrainingInterrupted, UserError
from tinylm.training.distributed import ScaleOutError
from tinylm.training.run import in_multirun, run
from tinylm.training.run_record import read_run_record, write_run_record

log = logging.getLogger(__name__)

# Exceptions that mean "the loss blew up", not "the program broke". FloatingPointError is Python's own
# for numeric failure; a divergence error raised by training should derive from it (or be listed here).
DIVERGENCE_ERRORS: tuple[type[BaseException], ...] = (
    TrainingDiverged,
    FloatingPointError,
    TrainingSpikeException,
)
# Exceptions that condemn the whole sweep, not one job: every job would fail the same way, so the sweep
# stops at the first (e.g. `-m` with a DDP trainer that would re-run the sweep for every rank).
SWEEP_ERRORS: tuple[type[BaseException], ...] = (ScaleOutError, TrainingInterrupted)


def run_job(cfg: DictConfig, keep_going: bool | None = None) -> float | None:
    """Train as `cfg` says; return `cfg.optimized_metric` (to be minimised) for the sweeper.

    `keep_going` (default: inside a multirun) turns an exception into a recorded failure and a return value
    (see the module docstring); otherwise the exception is recorded and re-raised.
    """
    if keep_going is None:
        keep_going = in_multirun()
    started = time.perf_counter()
    try:
        metrics = run(cfg)
    except Exception as error:
        if isinstance(error, TrainingInterrupted):
            status = "interrupted"
        else:
            status = "diverged" if isinstance(error, DIVERGENCE_ERRORS) else "failed"
        bad_input = isinstance(error, UserError) and status == "failed"
        if not (bad_input and read_run_record(cfg.run_dir) is not None):
            _record_failure(cfg, status, error, time.perf_counter() - started)
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


def _record_failure(cfg: DictConfig, status: str, error: Exception, wall_time_s: float) -> None:
    run_dir = Path(str(cfg.run_dir))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_run_record(run_dir, status, error=f"{type(error).__name__}: {error}", wall_time_s=wall_time_s)
    except OSError as write_error:  # the original error matters more than its record
        log.warning("could not write the failure record in %s: %s", run_dir, write_error)


def threads_per_job(n_jobs: int | str | None) -> int:
    """Torch threads for each of `n_jobs` jobs running side by side: this machine's cores, shared out.

    Jobs that together ask for more threads than there are cores collapse (OpenMP threads spin while they
    wait for a core). `n_jobs` <= 0 or None means one job per core, as in joblib.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = int(n_jobs) if n_jobs not in (None, "") else -1
    if jobs <= 0:
        return 1
    return max(1, cores // jobs)


# conf/launcher/joblib.yaml: threads: ${threads_per_job:${hydra:launcher.n_jobs}}
OmegaConf.register_new_resolver("threads_per_job", threads_per_job, replace=True)


class CreateStorageDir(Callback):
    """Hydra callback: create the directory of the Optuna sweeper's SQLite database before the study opens.

    SQLite does not create directories, and the sweeper opens its study before the launcher creates any.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        storage = OmegaConf.select(config, "hydra.sweeper.storage", default=None)
        if isinstance(storage, str) and storage.startswith("sqlite:///"):
            database = Path(storage.removeprefix("sqlite:///"))
            database.parent.mkdir(parents=True, exist_ok=True)
            log.info("Optuna study %r in %s", OmegaConf.select(config, "hydra.sweeper.study_name"), database)
