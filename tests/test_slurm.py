"""SLURM for real: a single-node cluster started on this machine (tests/slurm/local_cluster.sh), sweeps
submitted through `launcher=slurm` (Hydra's submitit launcher, real sbatch and srun), a job signalled before
its time limit and requeued, a job killed outright and resubmitted, and DDP ranks started by srun.

Marked `slurm` and deselected by default: `python -m pytest -m slurm tests/test_slurm.py`. The cluster needs
root (and apt-get where SLURM is not installed); without them every test here is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import tbparse
import torch
from conftest import REPO, SHRINK, run_script, small_corpus
from hydra import compose, initialize_config_module

from tinylm.errors import Interrupted
from tinylm.layout import read_checkpoint, read_run_record
from tinylm.training import slurm as tinylm_slurm
from tinylm.training.callbacks import StopOnSignal

CLUSTER_SCRIPT = REPO / "tests" / "slurm" / "local_cluster.sh"
# conf/launcher/slurm.yaml asks for 4 CPUs a task, which this 2-core node cannot give: one, and one thread.
LOCAL_CLUSTER = ["launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=10"]
# Deterministic CPU runs: the same numbers whichever launcher ran them.
EXACT = ["trainer.precision=32"]
STEPS = 12
# A job that runs long enough to be signalled: validations (and so last.ckpt) at steps 4, 8 and 12.
LONGER = [f"trainer.max_steps={STEPS}", "trainer.val_check_interval=4", "seed=1"]
PAUSE_STEP = 6
# SLURM holds a requeued job for 120 s before it may start again (its EligibleTime); tests move that to now.
JOB_WAIT_S = 300


def cannot_start_reason() -> str | None:
    """Why this machine cannot start the local cluster, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the local SLURM cluster needs root (to install SLURM and run slurmd)"
    installed = all(shutil.which(tool) for tool in ("munged", "slurmctld", "slurmd", "sinfo"))
    if not installed and shutil.which("apt-get") is None:
        return "SLURM is not installed and there is no apt-get to install it"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """A real single-node SLURM cluster for the session; stopped (exactly its own daemons) at the end."""
    reason = cannot_start_reason()
    if reason is not None:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "TINYLM_SLURM_DIR": str(state)}
    started = subprocess.run(
        [str(CLUSTER_SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=900
    )
    previous = os.environ.get("SLURM_CONF")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        os.environ["SLURM_CONF"] = str(state / "slurm.conf")
        yield SimpleNamespace(state=state, conf=state / "slurm.conf")
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "stop"], env=env, timeout=120, check=False)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


def job_env() -> dict[str, str]:
    """The environment sbatch passes on to the jobs: tests/ importable (fault_injection), one thread."""
    return {
        **os.environ,
        "HYDRA_FULL_ERROR": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def train_command(corpus: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "-m",
        *SHRINK,
        "data=text",
        f"data.files={corpus}",
        *EXACT,
        *overrides,
    ]


def run_sweep(cwd: Path, corpus: Path, *overrides: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        train_command(corpus, *overrides),
        cwd=cwd,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=JOB_WAIT_S,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def start_sweep(cwd: Path, corpus: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        train_command(corpus, *overrides),
        cwd=cwd,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def slurm(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


def the_running_job() -> str:
    (job,) = slurm("squeue", "--noheader", "--states=RUNNING", "--format=%i").split()
    return job


def wait_for(condition, what: str, timeout: float = JOB_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.2)


def wait_for_requeue_and_start_it(job: str) -> None:
    """SLURM puts a requeued job back in the queue, held until 120 s from now (Reason=BeginTime); start it now."""
    wait_for(lambda: slurm("squeue", "--noheader", f"--jobs={job}", "--format=%T") == "PENDING", "requeue")
    slurm("scontrol", "update", f"JobId={job}", "StartTime=now")


def pause_once(marker: Path, *extra: str) -> list[str]:
    """Overrides that hold training after step PAUSE_STEP until a signal comes (tests/fault_injection.py)."""
    return [
        "+callbacks.pause._target_=fault_injection.PauseAtStep",
        f"+callbacks.pause.at_step={PAUSE_STEP}",
        f"+callbacks.pause.marker={marker}",
        *extra,
    ]


def requeued_sweep(cwd: Path, corpus: Path, *overrides: str, send: signal.Signals | None) -> str:
    """Submit a one-job sweep that pauses at PAUSE_STEP, `send` it a signal there (None: wait for SLURM's own),
    start it again as soon as it is requeued, and wait for the sweep to end; returns the job id."""
    marker = cwd / "paused"
    sweep = start_sweep(cwd, corpus, *LOCAL_CLUSTER, *LONGER, *overrides, *pause_once(marker))
    try:
        wait_for(marker.exists, f"training paused at step {PAUSE_STEP}")
        job = the_running_job()
        if send is not None:
            slurm("scancel", f"--signal={send.name.removeprefix('SIG')}", job)
        wait_for_requeue_and_start_it(job)
        output, _ = sweep.communicate(timeout=JOB_WAIT_S)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 0, output[-3000:]
    return job


def only_job_dir(sweep_dir: Path) -> Path:
    (job_dir,) = [p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return job_dir


def train_losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, loss/train) from every TensorBoard event file of the run, in step order, repeats kept."""
    scalars = tbparse.SummaryReader(str(run_dir / "tb")).scalars
    rows = scalars[scalars.tag == "loss/train"]
    return sorted((int(s), float(v)) for s, v in zip(rows.step, rows.value, strict=True))


def tensorboard_runs(run_dir: Path) -> list[Path]:
    """The directories TensorBoard shows as runs: those holding event files."""
    return sorted({p.parent for p in (run_dir / "tb").rglob("events.out.tfevents.*")})


def final_numbers(run_dir: Path) -> dict[str, float]:
    record = read_run_record(run_dir)
    return {key: record[key] for key in ("step", "loss/train", "loss/val", "loss/val_full")}


def assert_same_weights(a: Path, b: Path) -> None:
    first, second = read_checkpoint(a).contents, read_checkpoint(b).contents
    assert first["global_step"] == second["global_step"]
    for name, tensor in first["state_dict"].items():
        assert torch.equal(tensor, second["state_dict"][name]), name


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """The run the interrupted ones must end as: the same settings, Hydra's basic launcher, no signal."""
    root = tmp_path_factory.mktemp("uninterrupted")
    run_sweep(root, corpus, *LONGER, "threads=1", f"hydra.sweep.dir={root / 'sweep'}")
    return only_job_dir(root / "sweep")


# --- what launcher=slurm asks SLURM for (no cluster needed) -------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "nodes", "tasks", "gpus"),
    [
        ([], 1, 1, None),
        (["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"], 1, 2, None),
        (["trainer=ddp", "trainer.accelerator=gpu", "trainer.num_nodes=2", "trainer.devices=4"], 2, 4, 4),
    ],
)
def test_launcher_slurm_asks_for_one_task_per_rank_and_gpus_only_on_gpu(overrides, nodes, tasks, gpus):
    # Multi-node and GPU jobs cannot run on the one-node CPU cluster below: their request is checked here.
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        cfg = compose("train", overrides=["launcher=slurm", *overrides], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (nodes, tasks, gpus)
    assert launcher.cpus_per_task == 4 and launcher.partition is None


# --- the requeue, on constructed inputs (no cluster needed) ------------------------------------------------

IN_A_SLURM_ARRAY_TASK = {
    "SLURM_NTASKS": "1",
    "SLURM_JOB_NAME": "train",
    "SLURM_JOB_ID": "9",
    "SLURM_ARRAY_JOB_ID": "7",
    "SLURM_ARRAY_TASK_ID": "2",
}


@pytest.fixture
def in_a_slurm_array_task(monkeypatch):
    for key, value in IN_A_SLURM_ARRAY_TASK.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)


def test_the_job_to_requeue_is_the_array_task_not_the_whole_array(in_a_slurm_array_task, monkeypatch):
    assert tinylm_slurm.slurm_job_id() == "7_2"
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID")
    assert tinylm_slurm.slurm_job_id() == "9"


def test_only_a_requeued_job_with_a_checkpoint_continues_its_run_directory(
    in_a_slurm_array_task, tmp_path, monkeypatch
):
    last = tmp_path / "checkpoints" / "last.ckpt"
    last.parent.mkdir()
    last.write_bytes(b"")
    assert tinylm_slurm.checkpoint_to_continue(tmp_path) is None  # its first run: a fresh start
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # as SLURM sets it in a requeued job
    assert tinylm_slurm.checkpoint_to_continue(tmp_path) == "last"
    last.unlink()  # requeued before its first checkpoint
    assert tinylm_slurm.checkpoint_to_continue(tmp_path) is None


def fake_scontrol(directory: Path, exit_code: int, checkpoint: Path) -> Path:
    """An `scontrol` that records its arguments and whether the checkpoint was already saved."""
    calls = directory / "scontrol.calls"
    script = directory / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ -f "{checkpoint}" ]; then saved=saved; else saved=unsaved; fi\n'
        f'echo "$* $saved" >> "{calls}"\n'
        f'[ {exit_code} -eq 0 ] || {{ echo "Invalid job id specified" >&2; exit {exit_code}; }}\n'
    )
    script.chmod(0o755)
    return calls


@pytest.mark.parametrize("scontrol_exit", [0, 1])
def test_a_requeue_signal_saves_between_steps_then_requeues(
    in_a_slurm_array_task, tmp_path, monkeypatch, scontrol_exit
):
    last = tmp_path / "checkpoints" / "last.ckpt"
    calls = fake_scontrol(tmp_path, scontrol_exit, last)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    trainer = SimpleNamespace(
        world_size=1, log_every_n_steps=1, global_step=6, is_global_zero=True, default_root_dir=str(tmp_path)
    )
    trainer.strategy = SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision)
    trainer.save_checkpoint = lambda path, weights_only: (
        Path(path).parent.mkdir() or Path(path).write_bytes(b"saved")
    )
    stop = StopOnSignal()
    stop.received = signal.SIGUSR1  # as the handler notes it, during step 6
    with pytest.raises(Interrupted) as stopped:
        stop.on_train_batch_start(trainer)
    assert (stopped.value.step, stopped.value.exit_code) == (6, 128 + signal.SIGUSR1)
    assert calls.read_text() == "requeue 7_2 saved\n"  # after the checkpoint, the array task alone
    message = str(stopped.value)
    assert message.startswith(f"stopped by SIGUSR1 after step 6; saved {last}; ")
    if scontrol_exit == 0:
        assert message.endswith("requeued SLURM job 7_2: it continues from this checkpoint")
    else:
        assert message.endswith(
            "requeuing SLURM job 7_2 failed (Invalid job id specified); resubmit it with ckpt_path=last"
        )


# --- the cluster itself ---------------------------------------------------------------------------------


@pytest.mark.slurm
def test_the_local_cluster_runs_a_job_with_srun(slurm_cluster, tmp_path):
    assert slurm("sinfo", "--noheader", "--format=%t") == "idle"
    output = tmp_path / "job.out"
    job = slurm(
        "sbatch", "--parsable", f"--output={output}", "--wrap=srun --ntasks=1 echo task $SLURM_PROCID"
    )
    wait_for(lambda: output.exists() and "task 0" in output.read_text(), f"output of job {job}", timeout=60)


# --- a sweep through launcher=slurm ------------------------------------------------------------------------


def report_tables(report_md: str) -> list[str]:
    """The report's settings table and its verdict table: every line of both, as markdown."""
    return [line for line in report_md.splitlines() if line.startswith("|")]


@pytest.mark.slurm
def test_a_sweep_through_slurm_reports_what_the_basic_launcher_reports(slurm_cluster, tmp_path, corpus):
    grid = ["act=gelu,swiglu", "seed=1,2"]
    through_slurm = tmp_path / "slurm"
    run_sweep(tmp_path, corpus, *LOCAL_CLUSTER, *grid, f"hydra.sweep.dir={through_slurm}")
    basic = tmp_path / "basic"
    run_sweep(tmp_path, corpus, *grid, "threads=1", f"hydra.sweep.dir={basic}")

    # A job array of 4, each task its own run directory with a completed run.
    job_dirs = sorted(p for p in through_slurm.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name.split("_")[0] for p in job_dirs] == ["0", "1", "2", "3"]
    assert all(read_run_record(p)["status"] == "completed" for p in job_dirs)
    # submitit's files where docs/scaling.md says: <sweep dir>/.submitit/<array job id>/ holds the sbatch
    # script, <sweep dir>/.submitit/<array job id>_<index>/ each task's logs.
    submitit = through_slurm / ".submitit"
    (script,) = submitit.glob("*/*_submission.sh")
    array_id = script.parent.name
    assert "#SBATCH --array=0-3%" in script.read_text()
    assert "#SBATCH --requeue\n" in script.read_text()
    for index in range(4):
        task = submitit / f"{array_id}_{index}"
        out = (task / f"{array_id}_{index}_0_log.out").read_text()
        assert f"JobEnvironment(job_id={array_id}_{index}" in out  # run as that SLURM array task
        assert (task / f"{array_id}_{index}_0_log.err").is_file()

    # The same report: the same final losses, run by run, and the same tables.
    reports = {}
    for sweep in (through_slurm, basic):
        result = run_script("report.py", "--baseline", "act=gelu", str(sweep), cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        reports[sweep] = json.loads((sweep / "report.json").read_text())
    slurm_report, basic_report = reports[through_slurm], reports[basic]
    assert slurm_report["settings"] == basic_report["settings"]
    by_run = lambda report: {  # noqa: E731
        (run["choices"]["act"], run["seed"]): (run["final_val_loss"], run["best_val_loss"], run["steps"])
        for run in report["runs"]
    }
    assert by_run(slurm_report) == by_run(basic_report)
    assert len(by_run(slurm_report)) == 4
    slurm_tables = report_tables((through_slurm / "report.md").read_text())
    basic_tables = report_tables((basic / "report.md").read_text())
    # Every table line but the runs' own (their tokens/s and wall times depend on the machine's load).
    runs_header = next(i for i, line in enumerate(slurm_tables) if line.startswith("| rank | run |"))
    assert slurm_tables[:runs_header] == basic_tables[:runs_header]
    print("\n--- report through SLURM ---\n" + "\n".join(slurm_tables))
    print("--- report through the basic launcher ---\n" + "\n".join(basic_tables))


# --- preemption and time limits ----------------------------------------------------------------------------


@pytest.mark.slurm
def test_a_job_signalled_before_its_time_limit_is_requeued_and_ends_as_if_uninterrupted(
    slurm_cluster, tmp_path, corpus, uninterrupted
):
    # A time-stamped sweep directory, as by default: the requeued job must not get a new one
    # (lightning-hydra-template #146).
    time_stamped = f"{tmp_path / 'multirun'}/${{now:%H-%M-%S-%f}}"
    job = requeued_sweep(tmp_path, corpus, f"hydra.sweep.dir={time_stamped}", send=signal.SIGUSR1)

    (sweep_dir,) = (tmp_path / "multirun").iterdir()  # one sweep directory, kept by the requeued job
    run_dir = only_job_dir(sweep_dir)
    log_dir = sweep_dir / ".submitit" / job
    err, out = (log_dir / f"{job}_0_log.err").read_text(), (log_dir / f"{job}_0_log.out").read_text()
    assert (
        f"error: stopped by SIGUSR1 after step {PAUSE_STEP}; saved {run_dir}/checkpoints/last.ckpt; " in err
    )
    assert f"requeued SLURM job {job}: it continues from this checkpoint" in err
    assert f"requeued SLURM job (restart 1): continuing from {run_dir}/checkpoints/last.ckpt" in out

    # The same run as without the signal: every step's training loss, the final losses and the weights.
    resumed, straight = train_losses(run_dir), train_losses(uninterrupted)
    assert [step for step, _ in resumed] == list(range(STEPS))  # one continuous curve: no step twice
    assert resumed == straight
    assert final_numbers(run_dir) == final_numbers(uninterrupted)
    assert_same_weights(run_dir / "checkpoints" / "last.ckpt", uninterrupted / "checkpoints" / "last.ckpt")
    # TensorBoard shows one run: both attempts' event files are in the run's one tb directory.
    runs = tensorboard_runs(run_dir)
    assert runs == [run_dir / "tb"]
    assert len(list(runs[0].glob("events.out.tfevents.*"))) == 2
    print(
        f"\nrequeue: signal after step {PAUSE_STEP}; final (interrupted+resumed) {final_numbers(run_dir)}; "
        f"final (uninterrupted) {final_numbers(uninterrupted)}; TensorBoard runs {len(runs)}"
    )


@pytest.mark.slurm
def test_the_time_limit_signal_of_the_sbatch_script_requeues_the_job(
    slurm_cluster, tmp_path, corpus, uninterrupted
):
    # A 3-minute job: submitit's script asks SLURM for SIGUSR2 60 s before the limit (--signal=USR2@60), which
    # SLURM sends up to 60 s early (its event resolution), i.e. 60 to 120 s in; training holds at step 6
    # until it comes. The requeued job has 3 minutes again and needs a few seconds.
    sweep_dir = tmp_path / "sweep"
    limits = [
        "hydra.launcher.timeout_min=3",
        "hydra.launcher.signal_delay_s=60",
        "+callbacks.pause.timeout_s=170",
    ]
    job = requeued_sweep(tmp_path, corpus, *limits, f"hydra.sweep.dir={sweep_dir}", send=None)
    assert "#SBATCH --signal=USR2@60" in (sweep_dir / ".submitit" / job / f"{job}_submission.sh").read_text()
    run_dir = only_job_dir(sweep_dir)
    err = (sweep_dir / ".submitit" / job / f"{job}_0_log.err").read_text()
    assert f"error: stopped by SIGUSR2 after step {PAUSE_STEP}; " in err
    assert [step for step, _ in train_losses(run_dir)] == list(range(STEPS))
    assert final_numbers(run_dir) == final_numbers(uninterrupted)


@pytest.mark.slurm
def test_a_killed_job_leaves_a_loadable_checkpoint_and_a_resubmission_resumes_it(
    slurm_cluster, tmp_path, corpus, uninterrupted
):
    marker = tmp_path / "paused"
    sweep_dir = tmp_path / "sweep"
    command = [*LOCAL_CLUSTER, *LONGER, *pause_once(marker), f"hydra.sweep.dir={sweep_dir}"]
    sweep = start_sweep(tmp_path, corpus, *command)
    try:
        wait_for(marker.exists, f"training paused at step {PAUSE_STEP}")
        job = the_running_job()
        # SIGKILL to the training process (srun's step 0 of the job), as a node failure or the OOM killer
        # would: nothing can save anything. The job fails with it.
        slurm("scancel", "--signal=KILL", f"{job}.0")
        wait_for(lambda: not slurm("squeue", "--noheader", f"--jobs={job}", "--format=%T"), "end of the job")
    finally:
        # Without an accounting database (sacct) submitit cannot see that a job died without a result and
        # would wait for it: the submitting process is ended here, as a user would end it.
        sweep.send_signal(signal.SIGINT)
        try:
            sweep.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            sweep.kill()
            sweep.communicate()

    run_dir = only_job_dir(sweep_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    killed_at = read_checkpoint(last).contents["global_step"]  # loadable, weights_only, whole
    assert killed_at == 4  # the last validation before the kill saved it
    assert read_run_record(run_dir) is None  # killed: no record of how it ended

    # The same command again, with ckpt_path=last (not part of the run's name): the same run directory,
    # continued from step 4 (the marker is there: no pause this time).
    result = run_sweep(tmp_path, corpus, *command, "ckpt_path=last")
    (resubmitted,) = [p for p in (sweep_dir / ".submitit").iterdir() if p.name != job and p.is_dir()]
    out = next(resubmitted.glob("*_0_log.out")).read_text()
    assert f"Restoring states from the checkpoint path at {last}" in out, result.stdout[-3000:]
    assert only_job_dir(sweep_dir) == run_dir
    assert final_numbers(run_dir) == final_numbers(uninterrupted)
    assert_same_weights(last, uninterrupted / "checkpoints" / "last.ckpt")


# --- DDP with srun-started ranks ---------------------------------------------------------------------------

DDP = [
    "trainer=ddp",
    "trainer.num_nodes=1",
    "trainer.devices=2",
    "trainer.accelerator=cpu",
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "data.val_windows=9",
    "trainer.precision=32-true",
]


@pytest.mark.slurm
def test_ddp_ranks_started_by_srun_train_as_lightnings_own_ddp(slurm_cluster, tmp_path, corpus):
    # One job of 2 tasks, one per rank, started by srun: Lightning takes the ranks from SLURM.
    sweep_dir = tmp_path / "sweep"
    run_sweep(tmp_path, corpus, *LOCAL_CLUSTER, *DDP, f"hydra.sweep.dir={sweep_dir}")
    (script,) = (sweep_dir / ".submitit").glob("*/*_submission.sh")
    assert "#SBATCH --ntasks-per-node=2\n" in script.read_text()
    through_slurm = only_job_dir(sweep_dir)
    # The 2-process DDP the slow tests run (tests/test_ddp.py): Lightning starts rank 1 itself.
    plain = tmp_path / "plain"
    result = run_script(
        "train.py", *SHRINK, "data=text", f"data.files={corpus}", *DDP, f"hydra.run.dir={plain}", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]

    assert read_run_record(through_slurm)["world_size"] == read_run_record(plain)["world_size"] == 2
    assert final_numbers(through_slurm) == final_numbers(plain)
    assert_same_weights(through_slurm / "checkpoints" / "last.ckpt", plain / "checkpoints" / "last.ckpt")
    print(f"\nDDP: srun-started {final_numbers(through_slurm)}; Lightning-started {final_numbers(plain)}")
