"""The benchmarks in benchmarks/ (outside the package): benchmarks/bench.py runs end to end and reports every
field (its numbers are reported, never asserted); benchmarks/health_overhead.py runs both variants."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import tbparse
import torch
from conftest import REPO, compose_train
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from tinylm.errors import ConfigError

BENCHMARKS = REPO / "benchmarks"
# The benchmarks import each other as `python benchmarks/<name>.py` runs them: from their own directory.
sys.path.insert(0, str(BENCHMARKS))

from bench import BareLoop, PairedStepTimer  # noqa: E402
from bench import run as run_bench  # noqa: E402
from health_overhead import run as measure_overhead  # noqa: E402
from health_overhead import summarise  # noqa: E402


def run_benchmark(script: str, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `benchmarks/<script>` in a fresh interpreter, as a developer would."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )


EXPECTED_FIELDS = {
    "config",
    "machine",
    "steps",
    "warmup",
    "repeats",
    "bare_tokens_per_s",
    "tinylm_tokens_per_s",
    "ratio",
    "tinylm_minus_bare_ms",
    "control",
    "flops_per_step",
    "tinylm_flops_per_s",
    "matmul_peak_flops_per_s",
    "fraction_of_matmul_peak",
    "matmul_peak_in_use_flops_per_s",
    "fraction_of_matmul_peak_in_use",
    "step_profile",
    "peak_rss_mb",
}


TINY = (
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "model.block_size=16",
    "data.batch_size=2",
    "data.val_windows=2",
    "trainer.val_check_interval=4",
    "bench.steps=6",
    "bench.warmup=2",
    "bench.repeats=2",
    "bench.allow_few_steps=true",
    "bench.peak_seconds=0.2",  # a tiny model's FLOP/s stays far below any 1024x1024 matmul's
)


def test_bench_json_reports_every_field_on_a_tiny_config(tmp_path):
    result = run_benchmark("bench.py", "--json", *TINY, "bench.control=true", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)  # stdout holds the JSON alone
    assert set(report) == EXPECTED_FIELDS
    assert report["repeats"] == 2
    for key in ("bare_tokens_per_s", "tinylm_tokens_per_s", "ratio"):
        assert len(report[key]) == 2 and all(v > 0 for v in report[key])
    # A difference of two step times: its sign is the machine's business, not the test's.
    assert len(report["tinylm_minus_bare_ms"]) == 2
    assert all(math.isfinite(v) for v in report["tinylm_minus_bare_ms"])
    control = report["control"]
    assert len(control["ratio"]) == 2 and all(v > 0 for v in control["ratio"])
    assert len(control["control_minus_bare_ms"]) == 2
    assert all(math.isfinite(v) for v in control["control_minus_bare_ms"])
    assert report["config"]["d_model"] == 16 and report["config"]["n_layer"] == 1
    # One fwd+bwd of a 1-layer, d=16 model on 2×16 tokens: a few MFLOP, counted, not guessed.
    assert 1e5 < report["flops_per_step"] < 1e8
    assert 0 < report["fraction_of_matmul_peak"] < 1
    assert 0 < report["fraction_of_matmul_peak_in_use"] < 1
    # `auto` is reported as what this machine ran.
    assert report["config"]["precision"] in ("bf16-mixed", "32-true")
    profile = report["step_profile"]
    assert profile["steps"] == 6
    shares = [profile[k] for k in ("data_loading_share", "logging_share", "health_share")]
    assert all(0 < share < 1 for share in shares) and sum(shares) < 1
    parts = profile["parts_share"]
    # Every part does work on a 6-step run: each step fetches a batch and logs, the bar redraws, the
    # throughput monitor counts, health runs at step 0. (Loggers are written to only from inside those.)
    assert set(parts) == {
        "data fetcher",
        "batch_to_device",
        "LightningModule.log",
        "logger connector",
        "StepProgressBar",
        "StepThroughput",
        "TrainingHealth",
    }
    assert all(share > 0 for share in parts.values()), parts
    assert sum(parts.values()) == pytest.approx(sum(shares))
    assert report["peak_rss_mb"] > 50
    assert list(tmp_path.iterdir()) == [], "a benchmark must leave nothing behind in its working directory"


@pytest.mark.slow  # the JSON report above runs the same benchmark in the default run
def test_bench_text_report_without_the_control(tmp_path):
    result = run_benchmark("bench.py", *TINY, "bench.profile=false", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith(("1 ", "2 "))]
    # rep, bare tok/s, tinylm tok/s, ratio, tinylm - bare
    assert [row[0] for row in rows] == ["1", "2"] and all(len(row) == 5 for row in rows), result.stdout
    assert "control" not in result.stdout
    assert "step profile" not in result.stdout
    assert "peak RSS of this process" in result.stdout


def test_bench_refuses_fewer_than_50_timed_steps():
    with initialize_config_dir(str(BENCHMARKS / "conf"), version_base="1.3"):
        cfg = compose("bench", overrides=["bench.steps=30", "bench.warmup=10"])
    with pytest.raises(ConfigError, match="at least 50 timed steps"):
        run_bench(cfg)


def test_bench_refuses_an_unknown_reference_loop():
    with initialize_config_dir(str(BENCHMARKS / "conf"), version_base="1.3"):
        cfg = compose("bench", overrides=["bench.reference=nanogpt"])
    with pytest.raises(ConfigError, match=r"bench\.reference=nanogpt: expected plain or fast"):
        run_bench(cfg)


def test_the_fast_reference_loop_runs_the_fused_kernels_and_the_plain_one_the_formulas():
    from tinylm.model import ModelConfig
    from tinylm.training.optimizers import OptimConfig

    config = ModelConfig(vocab_size=11, n_layer=1, n_head=2, d_model=16, block_size=8)
    plain, fast = BareLoop(config, OptimConfig()), BareLoop(config, OptimConfig(), fast=True)
    assert not plain.model.config.fused_norms and plain.optimizer.defaults["fused"] is None
    assert fast.model.config.fused_norms and fast.optimizer.defaults["fused"] is True
    # The same model and start: one step of each on the same batch moves the loss alike.
    inputs = targets = torch.randint(11, (2, 8))
    plain.step(inputs, targets), fast.step(inputs, targets)
    assert torch.allclose(plain.model(inputs, targets)[1], fast.model(inputs, targets)[1], atol=1e-5)


def test_the_added_step_time_pairs_each_tinylm_step_with_the_bare_step_run_right_after_it():
    timer = PairedStepTimer(bare=None, batches=[])  # type: ignore[arg-type]
    # tinylm's steps 1-4 (step 0 has no start), and bare steps 0-4, each run right after tinylm's step.
    timer.step_times = [50.0, 11.0, 12.0, 20.0]
    timer.bare_step_times = [99.0, 40.0, 10.0, 11.0, 19.0]
    # After one warm-up step: (11 - 10), (12 - 11), (20 - 19). Pairing step i with bare step i would give
    # (11 - 40), (12 - 10), (20 - 11): median 2.
    assert timer.added_step_time(warmup=1) == 1.0
    with pytest.raises(ValueError, match="no steps left to pair"):
        timer.added_step_time(warmup=4)


def test_the_control_is_paired_with_the_bare_step_run_right_before_it():
    timer = PairedStepTimer(bare=None, batches=[])  # type: ignore[arg-type]
    # Each step: bare step i, then control step i.
    timer.bare_step_times = [99.0, 10.0, 30.0, 12.0]
    timer.control_step_times = [1.0, 11.0, 31.0, 20.0]
    # After one warm-up step: (11 - 10), (31 - 30), (20 - 12). Pairing control i with bare i + 1, as tinylm's
    # steps are, would give (11 - 30), (31 - 12): median 0.
    assert timer.control_minus_bare(warmup=1) == 1.0


# --- the health callback's overhead ----------------------------------------------------------------------


def test_overhead_summary_from_known_step_times():
    # Ordinary steps take 10 ms, logging steps (every 10th) 30 ms: 20 ms extra every 10 steps = 20%.
    off = [(step, 0.010) for step in range(100)]
    on = [(step, 0.030 if step % 10 == 0 else 0.010) for step in range(100)]
    summary = summarise(off, on, every_n_steps=10)
    assert summary["logging_steps"] == 9  # steps 10..90: step 0 is warm-up
    assert summary["logging_step_extra_ms"] == pytest.approx(20.0)
    assert summary["amortised_overhead"] == pytest.approx(0.2)
    assert summary["direct_overhead"] == pytest.approx(0.2)  # mean 12 ms (9 x 30 + 81 x 10) / 90 vs 10 ms
    with pytest.raises(ValueError, match="no logging step"):
        summarise(off, on, every_n_steps=1000)


def test_overhead_measurement_runs_both_variants(tmp_path):
    cfg = compose_train(tmp_path, ["trainer.max_steps=14", "trainer.val_check_interval=14"])
    with open_dict(cfg):
        cfg.callbacks.health.every_n_steps = 4
        cfg.repeats = 1
    result = measure_overhead(cfg)
    assert result["logging_steps"] == 1  # step 12 (0..9 are warm-up)
    assert all(math.isfinite(result[key]) for key in ("amortised_overhead", "direct_overhead"))
    assert json.loads((tmp_path / "health_overhead.json").read_text())["every_n_steps"] == 4
    on, off = (tbparse.SummaryReader(str(tmp_path / run / "tb")).scalars for run in ("0_on", "0_off"))
    assert (
        on.tag.str.startswith("training_health/").any()
        and not off.tag.str.startswith("training_health/").any()
    )


def test_health_overhead_composes_the_training_config_through_the_search_path():
    with initialize_config_dir(str(BENCHMARKS / "conf"), version_base="1.3"):
        cfg = compose("health_overhead", overrides=["repeats=3", "model=small"])
    assert cfg.repeats == 3
    assert "health" in cfg.callbacks and "max_steps" in cfg.trainer  # conf/train.yaml's groups


def run_benchmark_in_process(script: str, *args: str) -> subprocess.CompletedProcess:
    """`python benchmarks/<script> <args>`, its `__main__` run in this process: what run_benchmark does less a
    fresh interpreter's start-up (seconds here, almost all of a paired benchmark's run at 3 steps)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    argv, threads = sys.argv, torch.get_num_threads()  # the scripts set torch's threads (--threads)
    sys.argv = [str(BENCHMARKS / script), *args]
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = argv
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(sys.argv, code, stdout.getvalue(), stderr.getvalue())


# Both scripts share paired.py and norm_speed.py's setup: the first runs in a fresh interpreter, from its own
# directory as a developer runs it; the second in this process.
@pytest.mark.parametrize(
    "script, setups, fresh",
    [("norm_speed.py", ("layer", "rms"), True), ("optim_speed.py", ("adamw", "muon"), False)],
)
def test_paired_step_benchmarks_report_both_setups_per_repetition(tmp_path, script, setups, fresh):
    """norm_speed.py and optim_speed.py: two setups of the baby model timed turn by turn; a JSON with each
    setup's medians and the ratios per repetition (their figures are in docs/performance.md, not asserted)."""
    out = tmp_path / "result.json"
    args = ("--steps", "3", "--warmup", "1", "--repeats", "2", "--batch-size", "2", "--clock", "thread")
    if fresh:
        result = run_benchmark(script, *args, "--json", str(out), cwd=tmp_path)
    else:
        result = run_benchmark_in_process(script, *args, "--json", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["repeats"] == len(report["repetitions"]) == 2 and report["clock"] == "thread"
    assert report["cpu"] and report["threads"] >= 1
    for rep in report["repetitions"]:
        for key in ("step", "forward_backward", "optimizer_step"):
            assert all(rep[name][key] > 0 for name in setups)
            assert rep["ratio"][key] == pytest.approx(rep[setups[1]][key] / rep[setups[0]][key])
    assert f"{setups[1]}/{setups[0]} median" in result.stdout
