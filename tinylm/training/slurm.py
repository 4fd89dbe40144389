"""A run as a SLURM job: the signal that comes before the job's time limit (or a preemption), the requeue
that follows it, and the requeued job continuing its own run directory (docs/scaling.md).

SLURM sends `--signal=SIG@seconds` before the time limit; submitit's sbatch asks for SIGUSR2, Lightning's
SLURM support and `scancel --signal=USR1` use SIGUSR1. tinylm takes both while training (`StopOnSignal`):
it saves `last.ckpt` between two whole steps, requeues the job with `scontrol requeue`, and exits. SLURM
runs the requeued job under the same job id, with `SLURM_RESTART_COUNT` set; submitit runs the same pickled
Hydra job in it, so it has the same run directory, and `run()` continues from that directory's `last.ckpt`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

from lightning.fabric.plugins.environments import SLURMEnvironment

from tinylm.layout import LAST, last_checkpoint

log = logging.getLogger(__name__)

# SIGUSR1: Lightning's SLURM requeue signal; SIGUSR2: the one submitit's sbatch script asks SLURM for.
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def in_slurm_job() -> bool:
    """True in a task that SLURM started (sbatch, srun): Lightning's own test, which also takes the ranks
    from SLURM."""
    return SLURMEnvironment.detect()


def slurm_job_id() -> str | None:
    """The id `scontrol requeue` takes: `<array job>_<task>` in a job array (a plain job id would requeue every
    task of the array), else the job id."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None and "SLURM_ARRAY_TASK_ID" in os.environ:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def restart_count() -> int:
    """How many times SLURM has requeued this job (0 for its first run)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def requeue_this_job() -> str:
    """Ask SLURM to requeue this job: it ends the job (SIGTERM, then SIGKILL after KillWait) and runs it
    again when it is eligible. Returns what happened, for the run's last message."""
    job = slurm_job_id()
    if job is None:
        return "not a SLURM job: nothing requeued"
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("scontrol requeue %s failed: %s", job, err)
        return f"requeuing SLURM job {job} failed ({err}); resubmit it with ckpt_path=last"
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip()
        log.warning("scontrol requeue %s failed: %s", job, reason)
        return f"requeuing SLURM job {job} failed ({reason}); resubmit it with ckpt_path=last"
    return f"requeued SLURM job {job}: it continues from this checkpoint"


def checkpoint_to_continue(run_dir: str | Path) -> str | None:
    """`last` for a requeued SLURM job whose run directory holds a `last.ckpt` (it continues where the signal
    stopped it), else None: a first run, or a requeue before the first checkpoint, starts from scratch."""
    if restart_count() > 0 and in_slurm_job() and last_checkpoint(run_dir).is_file():
        log.info(
            "requeued SLURM job (restart %d): continuing from %s", restart_count(), last_checkpoint(run_dir)
        )
        return LAST
    return None
