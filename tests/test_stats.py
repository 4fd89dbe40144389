"""The report's statistics on made-up numbers with known answers: intervals, paired differences, verdicts,
the best learning rate, diverged runs; and the report built from made-up run records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from tinylm.analysis.report import build_report, markdown, to_json
from tinylm.analysis.runs import ReportError
from tinylm.analysis.stats import BETTER, ONE_SEED, UNRESOLVED, WORSE, best_key, compare, estimate
from tinylm.layout import write_run_record

# --- estimate -----------------------------------------------------------------------------------------------


def test_interval_is_students_t_over_the_values():
    e = estimate([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.302653: half-width 4.302653 / sqrt(3) = 2.484138
    assert (e.mean, e.sd, e.n) == (2.0, 1.0, 3)
    assert e.low == pytest.approx(2.0 - 2.484138, abs=1e-6)
    assert e.high == pytest.approx(2.0 + 2.484138, abs=1e-6)
    wider = estimate([1.0, 2.0, 3.0], confidence=0.99)  # t(0.995, 2) = 9.924843
    assert wider.high == pytest.approx(2.0 + 9.924843 / math.sqrt(3), abs=1e-6)


def test_one_value_has_a_mean_and_no_interval():
    e = estimate([2.5])
    assert e.mean == 2.5 and e.n == 1 and not e.has_interval and e.sd is None


def test_a_diverged_value_makes_the_mean_infinite_and_gives_no_interval():
    e = estimate([2.0, math.inf, 2.2])
    assert e.mean == math.inf and not e.has_interval


# --- paired comparison --------------------------------------------------------------------------------------


def test_paired_difference_over_matching_seeds_resolves_a_consistent_gain():
    baseline = {"1": 2.0, "2": 2.5, "3": 1.8, "4": 2.2}
    setting = {"1": 1.9, "2": 2.3, "3": 1.5, "4": 2.0}  # differences -0.1, -0.2, -0.3, -0.2
    c = compare(setting, baseline)
    d = c.difference
    # mean -0.2, sd sqrt(0.02 / 3) = 0.0816497, t(0.975, 3) = 3.1824463: half-width 0.1299228
    assert d.mean == pytest.approx(-0.2) and d.sd == pytest.approx(0.0816497, abs=1e-6)
    assert (d.low, d.high) == (pytest.approx(-0.3299228, abs=1e-6), pytest.approx(-0.0700772, abs=1e-6))
    assert c.seeds == ("1", "2", "3", "4") and c.verdict == BETTER
    # The same gain, unpaired, would be lost in the spread between seeds (0.29 sd): pairing is what resolves it.
    assert estimate(list(baseline.values())).high > estimate(list(setting.values())).low


def test_verdicts_worse_unresolved_and_one_seed():
    baseline = {"1": 2.0, "2": 2.0, "3": 2.0}
    assert compare({"1": 2.2, "2": 2.25, "3": 2.3}, baseline).verdict == WORSE  # +0.25, CI [0.126, 0.374]
    # differences -0.1, +0.2, 0.0: the interval crosses 0
    assert compare({"1": 1.9, "2": 2.2, "3": 2.0}, baseline).verdict == UNRESOLVED
    one = compare({"1": 1.0}, baseline)
    assert one.verdict == ONE_SEED and one.difference.mean == pytest.approx(-1.0)


def test_only_seeds_both_sides_have_are_paired():
    c = compare({"1": 1.0, "2": 1.1, "3": 0.9}, {"2": 1.3, "3": 1.2, "4": 9.0})
    assert c.seeds == ("2", "3")
    assert c.difference.mean == pytest.approx(((1.1 - 1.3) + (0.9 - 1.2)) / 2)
    assert compare({"1": 1.0}, {"2": 1.0}).verdict == "no seeds in common with the baseline"


def test_divergence_decides_the_verdict_without_an_interval():
    baseline = {"1": 2.0, "2": 2.0, "3": 2.0}
    worse = compare({"1": 1.5, "2": math.inf, "3": 1.5}, baseline)
    assert worse.difference is None and worse.verdict == "worse: diverged on 1 of 3 seeds"
    better = compare(baseline, {"1": math.inf, "2": 2.5, "3": math.inf})
    assert better.verdict == "better: the baseline diverged on 2 of 3 seeds"


def test_the_best_learning_rate_is_the_lowest_mean_and_never_one_that_diverged():
    by_lr = {
        "0.001": [2.10, 2.12, 2.08],
        "0.003": [1.95, 1.97, 1.99],
        "0.01": [1.80, math.inf, 1.79],  # best seeds, but one diverged
        "0.03": [math.inf, math.inf, math.inf],
    }
    assert best_key(by_lr) == "0.003"
    assert best_key({"a": [math.inf], "b": [math.inf, 1.0]}) in ("a", "b")  # nothing finite: any


# --- the report from made-up run records ---------------------------------------------------------------------


def fake_run(sweep: Path, number: int, status: str, loss: float | None, **choices: str) -> Path:
    """A run directory as train.py -m leaves it (Hydra's record, metrics.json), without TensorBoard events."""
    seed = choices.pop("seed", "1337")
    overrides = [f"{k}={v}" for k, v in choices.items()] + [f"seed={seed}"]
    run = sweep / f"{number}_{','.join(overrides)}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides), encoding="utf-8")
    config = {
        "seed": int(seed),
        "model": {"norm": choices.get("norm", "pre"), "norm_type": "layer", "act": choices.get("act", "gelu"),
                  "block_size": 64},
        "data": {"batch_size": 12},
        "trainer": {"max_steps": 600},
    }  # fmt: skip
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    fields = {"loss/val": loss, "step": 600, "params": 801_664} if loss is not None else {"error": "boom"}
    write_run_record(run, status, **fields)
    return run


@pytest.fixture
def lr_sweep(tmp_path) -> Path:
    """pre/post × lr 1e-3 / 3e-3 × seeds 1-3, with known final losses; post at 3e-3 diverges on seed 2."""
    sweep = tmp_path / "sweep"
    losses = {
        ("pre", "1e-3"): [2.10, 2.20, 2.00],
        ("pre", "3e-3"): [1.90, 2.00, 1.80],  # pre's best lr
        ("post", "1e-3"): [2.20, 2.35, 2.05],  # post's best: 3e-3 diverged once
        ("post", "3e-3"): [1.70, math.inf, 1.70],
    }
    number = 0
    for (norm, lr), values in losses.items():
        for seed, loss in zip(("1", "2", "3"), values, strict=True):
            status = "diverged" if loss == math.inf else "completed"
            fake_run(sweep, number, status, None if loss == math.inf else loss, norm=norm,
                     **{"optim.lr": lr}, seed=seed)  # fmt: skip
            number += 1
    fake_run(sweep, number, "failed", None, norm="pre", **{"optim.lr": "1e-3"}, seed="4")  # no result
    return sweep


def test_report_on_made_up_records_has_the_known_means_intervals_and_tuned_verdicts(lr_sweep):
    report = build_report(lr_sweep)
    assert report.setting_columns == ["norm", "norm_type", "act", "optim.lr"]
    # Hydra's override parser reads 3e-3 as a float: the report shows it as 0.003.
    by_choice = {(s.choices["norm"], s.choices["optim.lr"]): s for s in report.settings}
    pre_best = by_choice[("pre", "0.003")]
    assert pre_best.estimate.mean == pytest.approx(1.9) and pre_best.estimate.n == 3
    assert pre_best.estimate.high - pre_best.estimate.mean == pytest.approx(
        4.302653 * 0.1 / math.sqrt(3), abs=1e-6
    )
    assert (
        by_choice[("post", "0.003")].diverged == 1 and by_choice[("post", "0.003")].estimate.mean == math.inf
    )
    assert by_choice[("pre", "0.001")].without_result == 1  # the failed seed-4 run
    assert report.settings[0] is pre_best  # ranked by mean; the diverged setting last

    # Tuned: each norm at its best lr; post's is 1e-3 because 3e-3 diverged once.
    tuned = {s.choices["norm"]: s for s in report.tuned}
    assert tuned["pre"].choices["optim.lr"] == "0.003" and tuned["post"].choices["optim.lr"] == "0.001"
    assert report.tuned_baseline is tuned["pre"]
    c = tuned["post"].comparison  # differences +0.30, +0.35, +0.25
    assert c.difference.mean == pytest.approx(0.30) and c.verdict == WORSE

    text = markdown(report)
    assert "## Each setting at its own best learning rate" in text
    assert "| 1 | pre | layer | gelu | 0.003 | 3 | 1.9000 |" in text
    record = json.loads(json.dumps(to_json(report)))  # plain JSON, no NaN or infinity
    assert record["tuned_baseline"]["optim.lr"] == "0.003"
    diverged = next(
        s
        for s in record["settings"]
        if s["choices"]["optim.lr"] == "0.003" and s["choices"]["norm"] == "post"
    )
    assert diverged["final_val_loss"]["mean"] == "inf" and diverged["results"]["2"] == "inf"


def test_a_named_baseline_is_compared_against_and_a_bad_one_is_refused(lr_sweep):
    report = build_report(lr_sweep, baseline="norm=post,optim.lr=1e-3")
    assert report.baseline.choices["norm"] == "post" and report.baseline.choices["optim.lr"] == "0.001"
    assert report.tuned_baseline.choices["norm"] == "post"
    pre_tuned = next(s for s in report.tuned if s.choices["norm"] == "pre")
    assert (
        pre_tuned.comparison.difference.mean == pytest.approx(-0.30)
        and pre_tuned.comparison.verdict == BETTER
    )
    with pytest.raises(ReportError, match="do not vary in this sweep"):
        build_report(lr_sweep, baseline="dropout=0.1")
    with pytest.raises(ReportError, match="matches no setting"):
        build_report(lr_sweep, baseline="norm=sandwich")
    with pytest.raises(ReportError, match="key=value"):
        build_report(lr_sweep, baseline="pre")


def test_one_seed_per_setting_says_so_instead_of_an_interval(tmp_path):
    sweep = tmp_path / "sweep"
    fake_run(sweep, 0, "completed", 2.0, act="gelu")
    fake_run(sweep, 1, "completed", 1.9, act="swiglu")
    report = build_report(sweep)
    assert not report.lr_varies and report.baseline.choices["act"] == "swiglu"
    gelu = next(s for s in report.settings if s.choices["act"] == "gelu")
    assert gelu.comparison.verdict == ONE_SEED and gelu.comparison.difference.mean == pytest.approx(0.1)
    assert "| gelu | 1 | +0.1000 | — | one seed: no interval |" in markdown(report)
