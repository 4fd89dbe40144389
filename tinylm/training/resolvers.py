"""The resolvers tinylm's configs use (`${run_label:...}`, `${sweep_run_label:...}`, `${threads_per_job:...}`, `${times:...}`,
`${slurm_gpus_per_node:...}`), registered on import, which every entry point does before Hydra composes."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import OmegaConf

from tinylm.overrides import run_label
from tinylm.training.sweep_record import sweep_run_label


def threads_per_job(n_jobs: int | str | None) -> int:
    """Torch threads for each of `n_jobs` jobs side by side: the cores shared out, as more threads than cores
    collapse (waiting OpenMP threads spin). `n_jobs` <= 0 or None means one job per core, as in joblib."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = int(n_jobs) if n_jobs not in (None, "") else -1
    if jobs <= 0:
        return 1
    return max(1, cores // jobs)


def slurm_gpus_per_node(accelerator: str, devices: int | str) -> int | None:
    """GPUs to ask SLURM for on each node: one per rank (device) on a GPU accelerator, none otherwise."""
    return int(devices) if str(accelerator) in ("gpu", "cuda") else None


def times(value: Any, factor: float) -> Any:
    """`${times:${optim.lr},0.1}`: a setting that follows another, e.g. min_lr = lr / 10. A non-number passes
    through, so the error names the setting the user typed (`optim.lr='fast' must be a number`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return value * factor


def register_resolvers() -> None:
    # conf/train.yaml names runs and sweep directories with ${run_label:...}.
    OmegaConf.register_new_resolver("run_label", run_label, replace=True)
    # ... and a sweep's jobs by what the sweep varies: ${sweep_run_label:${hydra.sweep.dir},...}.
    OmegaConf.register_new_resolver("sweep_run_label", sweep_run_label, replace=True)
    # conf/launcher/joblib.yaml shares the cores out: threads: ${threads_per_job:${hydra:launcher.n_jobs}}.
    OmegaConf.register_new_resolver("threads_per_job", threads_per_job, replace=True)
    # conf/optim/adamw.yaml: min_lr follows lr.
    OmegaConf.register_new_resolver("times", times, replace=True)
    # conf/launcher/slurm.yaml asks for one GPU per rank on GPU runs only.
    OmegaConf.register_new_resolver("slurm_gpus_per_node", slurm_gpus_per_node, replace=True)


register_resolvers()
