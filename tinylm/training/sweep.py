"""What a Hydra sweep needs beyond `objective` (tinylm/training/run.py, re-exported here): the directory of the
Optuna sweeper's study. See docs/sweeps.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tinylm.training.run import SWEEP_ERRORS, objective

__all__ = ["SWEEP_ERRORS", "CreateStorageDir", "objective"]

log = logging.getLogger(__name__)


class CreateStorageDir(Callback):
    """Hydra callback: create the directory of the Optuna sweeper's SQLite database, which SQLite does not,
    before the sweeper opens its study (and before the launcher creates any directory)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        storage = OmegaConf.select(config, "hydra.sweeper.storage", default=None)
        if isinstance(storage, str) and storage.startswith("sqlite:///"):
            database = Path(storage.removeprefix("sqlite:///"))
            database.parent.mkdir(parents=True, exist_ok=True)
            log.info("Optuna study %r in %s", OmegaConf.select(config, "hydra.sweeper.study_name"), database)
