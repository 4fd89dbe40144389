"""What a Hydra sweeper needs from `run(cfg)` (`scripts/train.py` hands every run to `objective`): the metric it
minimises, and a failing job that does not end the sweep. A diverged job scores `+inf` (a real, very bad
result), any other failure `None` (an Optuna FAIL trial, as `nan` would end the sweep); Ctrl-C, SIGTERM and
`SWEEP_ERRORS` still stop it. See docs/sweeps.md.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tinylm.errors import Interrupted, ReportedError
from tinylm.layout import SEGMENTS, write_run_record
from tinylm.training import run as training
from tinylm.training.distributed import ScaleOutError

log = logging.getLogger(__name__)

# Exceptions that condemn the whole sweep, not one job: every job would fail the same way, so the sweep
# stops at the first (e.g. `-m` with a DDP trainer that would re-run the sweep for every rank).
SWEEP_ERRORS: tuple[type[BaseException], ...] = (ScaleOutError, Interrupted)


def objective(cfg: DictConfig, keep_going: bool | None = None) -> float | None:
    """Train as `cfg` says; return `cfg.optimized_metric` (to be minimised) for the sweeper.

    `keep_going` (default: inside a multirun) turns a failed run, already recorded in its metrics.json, into
    a return value; otherwise the error is raised.
    """
    if keep_going is None:
        keep_going = training.in_multirun()
    try:
        metrics = training.run(cfg)
    except Exception as error:
        if not keep_going or isinstance(error, SWEEP_ERRORS):
            raise
        status = training.run_status(error)
        # tinylm's own errors say what to fix in one line, as a single run prints them; a bug keeps its traceback.
        if isinstance(error, ReportedError):
            log.error("run %s %s: %s; the sweep goes on", cfg.get("run_name"), status, error)
        else:
            log.exception("run %s %s; the sweep goes on", cfg.get("run_name"), status)
        return math.inf if isinstance(error, training.DIVERGENCE_ERRORS) else None

    name = cfg.get("optimized_metric")
    if not name:
        return None
    if name not in metrics:
        raise KeyError(f"optimized_metric={name!r} is not among the run's metrics: {sorted(metrics)}")
    value = float(metrics[name])
    if not math.isfinite(value):
        log.error("run %s diverged: %s=%s", cfg.get("run_name"), name, value)
        numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float) or k == SEGMENTS}
        write_run_record(cfg.run_dir, "diverged", **numbers, error=f"{name} is {value}")
        return math.inf
    return value


class CreateStorageDir(Callback):
    """Hydra callback: create the directory of the Optuna sweeper's SQLite database, which SQLite does not,
    before the sweeper opens its study (and before the launcher creates any directory)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        storage = OmegaConf.select(config, "hydra.sweeper.storage", default=None)
        if isinstance(storage, str) and storage.startswith("sqlite:///"):
            database = Path(storage.removeprefix("sqlite:///"))
            database.parent.mkdir(parents=True, exist_ok=True)
            log.info("Optuna study %r in %s", OmegaConf.select(config, "hydra.sweeper.study_name"), database)
