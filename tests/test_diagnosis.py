"""Diagnosis on real tiny runs: each condition `tinylm.analysis.diagnosis` names is provoked by a real shrunk
training run that should show it (a deep post-norm stack, QK-norm off at lr 1e-1, a rate that blows up, a
context of one character, ...), and none fires on a healthy pre-norm run that trained to convergence. Then the
report's `why` column, *Why* section and figures on such a sweep."""

from __future__ import annotations

import random
from pathlib import Path

import matplotlib.image
import pytest
from conftest import run_sweep

from tinylm.analysis import diagnosis
from tinylm.analysis.diagnosis import (
    BIGRAM_STALL,
    COLLAPSED,
    DESTABILISED,
    DIVERGED,
    IGNORES_CONTEXT,
    SATURATED,
    STARVED,
    STILL_IMPROVING,
    diagnose,
    since,
)
from tinylm.analysis.report import REPORT_MD, shared_reference
from tinylm.analysis.runs import read_runs
from tinylm.analysis.sweep_report import write_report

# Every case logs its health curves and validates every 20 steps; each overrides the shrunk config's budget.
EVERY_20 = ["trainer.val_check_interval=20", "callbacks.health.every_n_steps=20", "threads=1"]
CASES = {
    # A 24-character random cycle, learnt by heart: converged far below every reference level.
    "healthy": ["data.files={cycle}", "trainer.max_steps=300", "optim.lr=1e-2", "optim.warmup_steps=20"],
    "post_norm_12_blocks": [
        "norm=post", "model.n_layer=12", "optim.lr=3e-3", "trainer.max_steps=200", "optim.warmup_steps=20",
    ],
    "no_qk_norm_lr_0.1": [
        "model.qk_norm=false", "optim.lr=1e-1", "trainer.max_steps=200", "optim.warmup_steps=20",
    ],
    "lr_1e4_unclipped": [
        "optim.lr=1e4", "trainer.max_steps=60", "optim.warmup_steps=2", "trainer.gradient_clip_val=null",
    ],
    # Warm-up to lr 1.0 over the whole run: the loss falls while the rate is small, then climbs back.
    "warmup_to_lr_1": ["optim.lr=1.0", "optim.warmup_steps=200", "trainer.max_steps=200", "data.val_windows=64"],
    "one_character_context": [
        "model.block_size=1", "data.batch_size=512", "data.val_windows=512", "optim.lr=3e-2",
        "trainer.max_steps=400", "optim.warmup_steps=20",
    ],
    # A 48-character cycle stopped halfway to learning it by heart.
    "cycle_150_steps": ["data.files={cycle48}", "trainer.max_steps=150", "optim.lr=1e-2", "optim.warmup_steps=20"],
}  # fmt: skip


@pytest.fixture(scope="module")
def case_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case trained once, as a one-job sweep (the report reads sweeps)."""
    root = tmp_path_factory.mktemp("diagnosis")
    rng = random.Random(0)
    cycle = root / "cycle.txt"
    cycle.write_text("".join(rng.choice("abcdefghij") for _ in range(24)) * 1500, encoding="utf-8")
    cycle48 = root / "cycle48.txt"
    cycle48.write_text("".join(rng.choice("abcdefghij") for _ in range(48)) * 800, encoding="utf-8")
    sweeps = {}
    for name, overrides in CASES.items():
        overrides = [o.format(cycle=cycle, cycle48=cycle48) for o in overrides]
        sweep_dir, result = run_sweep(root, *EVERY_20, *overrides, name=name)
        assert result.returncode == 0, result.stderr[-3000:]
        sweeps[name] = sweep_dir
    return sweeps


def findings(sweep_dir: Path) -> dict[str, diagnosis.Finding]:
    runs = read_runs(sweep_dir)
    (run,) = runs
    return {f.kind: f for f in diagnose(run, shared_reference(runs))}


def test_a_healthy_pre_norm_run_that_converged_shows_nothing(case_runs):
    assert findings(case_runs["healthy"]) == {}


def test_deep_post_norm_ignores_context_with_collapsed_tokens_and_starved_queries(case_runs):
    found = findings(case_runs["post_norm_12_blocks"])
    assert {IGNORES_CONTEXT, COLLAPSED, STARVED} <= set(found)
    assert found[COLLAPSED].tag == "training_health/token_spread/block_12"
    assert found[STARVED].tag == "training_health/grad_w_q/block_12"
    # Collapse begins within the first logged steps of training, as the 400-step run showed.
    assert found[COLLAPSED].step is not None and 0 < found[COLLAPSED].step <= 60
    assert found[STARVED].step is not None and 0 < found[STARVED].step <= 60


def test_qk_norm_off_at_a_high_rate_saturates_attention(case_runs):
    found = findings(case_runs["no_qk_norm_lr_0.1"])
    assert SATURATED in found
    assert found[SATURATED].tag.startswith("training_health/attn_max_logit/block_")


def test_an_unclipped_rate_of_1e4_diverges_at_a_named_step(case_runs):
    found = findings(case_runs["lr_1e4_unclipped"])
    assert set(found) == {DIVERGED}
    assert 0 < found[DIVERGED].step <= 60


def test_warming_up_to_a_rate_of_1_destabilises(case_runs):
    found = findings(case_runs["warmup_to_lr_1"])
    assert DESTABILISED in found
    assert found[DESTABILISED].step is not None


def test_a_one_character_context_stalls_at_the_bigram_level(case_runs):
    # Its health curves say nothing (one token: no spread, no key to choose), so only the stall is named.
    assert set(findings(case_runs["one_character_context"])) == {BIGRAM_STALL}


def test_a_run_stopped_halfway_is_still_improving_and_nothing_else(case_runs):
    assert set(findings(case_runs["cycle_150_steps"])) == {STILL_IMPROVING}


def test_since_is_the_start_of_the_last_run_of_steps_that_holds():
    series = [(0, 1.0), (10, 0.001), (20, 0.5), (30, 0.001), (40, 0.002)]
    assert since(series, lambda v: v < 0.01) == 30
    assert since(series[:3], lambda v: v < 0.01) is None  # does not hold at the end
    assert since([], lambda v: True) is None


def test_the_report_of_a_deep_post_norm_run_says_why_and_draws_the_curves(case_runs):
    sweep_dir = case_runs["post_norm_12_blocks"]
    text, written = write_report(sweep_dir)
    assert text == (sweep_dir / REPORT_MD).read_text(encoding="utf-8")
    settings = text.split("## Settings")[1].split("\n\n")[1]
    assert "ignores context (1/1" in settings and "tokens collapsed (1/1, from step" in settings
    why = text.split("## Why")[1].split("\n## ")[0]
    assert "the unigram level" in why and "training_health/token_spread/block_12" in why
    assert "why_token_spread.png" in why and "why_grad_w_q.png" in why
    for name in ("why_token_spread.png", "why_grad_w_q.png"):
        assert sweep_dir / name in written
        assert matplotlib.image.imread(sweep_dir / name).shape[0] > 100


def test_the_report_of_a_healthy_run_has_no_why_section(case_runs):
    text, written = write_report(case_runs["healthy"])
    assert "## Why" not in text
    assert not [p for p in written if p.name.startswith("why_")]
