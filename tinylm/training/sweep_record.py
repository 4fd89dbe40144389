"""A sweep's own record, `sweep.yaml` in its directory: the overrides that vary across its jobs and those every
job shares. Its jobs are named by what varies (`3_norm=pre,act=gelu,seed=1`), so that TensorBoard and the
report tell them apart at a glance; what they share is said once, here. At the end the sweep says where it
is and how to report it.

Hydra hands each job only its own overrides (`hydra.overrides.task`); which of them the sweep varies is known
to the multirun as a whole: its command line (the multirun config's `hydra.overrides.task`, which the Optuna
sweeper does not save as multirun.yaml) and the sweeper's `params`. A Hydra callback, run before the first
job, writes it down for the jobs to read.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tinylm.layout import SWEEP_RECORD
from tinylm.overrides import parse, run_label


def sweep_overrides(arguments: Sequence[str], params: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """`{"varies": [keys], "shared": [overrides]}` of a multirun: a key varies if its last value (the
    sweeper's `params` first, then the command line, as Hydra's sweepers read them) is a sweep."""
    lines = [f"{key}={value}" for key, value in (params or {}).items()] + [str(a) for a in arguments]
    last = {choice.key: choice for choice in parse(lines)}
    return {
        "varies": [key for key, choice in last.items() if choice.sweep],
        "shared": [choice.text for choice in last.values() if not choice.sweep],
    }


def varying_keys(sweep_dir: str | Path) -> list[str] | None:
    """The keys the sweep in `sweep_dir` varies, from its record; None without one."""
    path = Path(str(sweep_dir)) / SWEEP_RECORD
    if not path.is_file():
        return None
    varies = OmegaConf.to_container(OmegaConf.load(path)).get("varies")  # type: ignore[union-attr]
    return [str(key) for key in varies] if isinstance(varies, list) else None


def sweep_run_label(sweep_dir: str, overrides: Sequence[str]) -> str:
    """A sweep job's name: its overrides of the keys the sweep varies (all of them, when it varies nothing or
    has no record)."""
    varies = varying_keys(sweep_dir)
    return run_label(overrides, only=varies) if varies else run_label(overrides)


class SweepRecord(Callback):
    """Hydra callback (conf/train.yaml): `sweep.yaml` before the first job, one line after the last."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        params = config.hydra.sweeper.get("params")
        # Resolved, as the sweeper reads them: a preset's `optim.lr: ${rates}` is its recipe's list of rates.
        params = OmegaConf.to_container(params, resolve=True) if isinstance(params, DictConfig) else {}
        record = sweep_overrides(list(config.hydra.overrides.task), params)  # type: ignore[arg-type]
        sweep_dir.mkdir(parents=True, exist_ok=True)
        header = (
            "# What this sweep varies (its jobs are named by it) and what every job shares; Hydra's record of\n"
            "# the whole command is multirun.yaml (a grid) or each job's .hydra/overrides.yaml.\n"
        )
        (sweep_dir / SWEEP_RECORD).write_text(header + OmegaConf.to_yaml(record), encoding="utf-8")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = str(config.hydra.sweep.dir)
        print(f"sweep done: {sweep_dir}; report it: python {report_script()} {sweep_dir}", flush=True)


def report_script() -> str:
    """scripts/report.py as the user reaches it: beside the train.py they ran."""
    beside = Path(sys.argv[0]).with_name("report.py")
    return str(beside) if beside.is_file() else "scripts/report.py"
