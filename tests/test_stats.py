"""The report's statistics on made-up numbers with known answers: intervals, paired differences, verdicts,
the best learning rate, diverged runs; and the report built from made-up run records."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from scipy.stats import t as student_t
from script_runner import run_script_in_process
from statsmodels.stats.multitest import multipletests

from tinylm.analysis.estimates import Failures, estimate, paired_tests
from tinylm.analysis.grouping import LR, Setting, chosen_rate, group_settings, tuned_settings
from tinylm.analysis.ladder import TrendWord
from tinylm.analysis.present.formats import fmt_interval
from tinylm.analysis.present.plots import forest_rows
from tinylm.analysis.present.render import markdown
from tinylm.analysis.present.schema import from_json, to_json
from tinylm.analysis.present.write_report import keep_previous, write_report
from tinylm.analysis.report import build_report, portable
from tinylm.analysis.runs import ReportError, RunSummary
from tinylm.analysis.sequential_design import read_design, write_design
from tinylm.analysis.verdicts import (
    BETTER,
    IDENTICAL_VERDICT,
    ONE_SEED,
    UNRESOLVED,
    WORSE,
    Outcome,
    compare,
    judge,
)
from tinylm.layout import (
    PREVIOUS_REPORTS,
    REFERENCE_LEVELS,
    REPORT_MD,
    SWEEP_RECORD,
    target_tags,
    write_run_record,
)
from tinylm.seed_rounds.plan import ADDED_DIR, Budget, round_settings, start_design

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
    d = c.tests.difference
    # mean -0.2, sd sqrt(0.02 / 3) = 0.0816497, t(0.975, 3) = 3.1824463: half-width 0.1299228
    assert d.mean == pytest.approx(-0.2) and d.sd == pytest.approx(0.0816497, abs=1e-6)
    assert (d.low, d.high) == (pytest.approx(-0.3299228, abs=1e-6), pytest.approx(-0.0700772, abs=1e-6))
    # t = -0.2 / (0.0816497 / 2) = -4.898979 on 3 df: two-sided p = 0.016277
    assert c.tests.p_value == pytest.approx(2 * student_t.sf(0.2 / (math.sqrt(0.02 / 3) / 2), 3), rel=1e-9)
    assert (
        c.tests.p_value == pytest.approx(0.016277, abs=1e-6) and c.judgement.p_adjusted == c.tests.p_value
    )  # a family of one
    assert c.tests.seeds == ("1", "2", "3", "4") and c.judgement.verdict == BETTER
    # The same gain, unpaired, would be lost in the spread between seeds (0.29 sd): pairing is what resolves it.
    assert estimate(list(baseline.values())).high > estimate(list(setting.values())).low


def test_verdicts_worse_unresolved_and_one_seed():
    baseline = {"1": 2.0, "2": 2.0, "3": 2.0}
    assert (
        compare({"1": 2.2, "2": 2.25, "3": 2.3}, baseline).judgement.verdict == WORSE
    )  # +0.25, CI [0.126, 0.374]
    # differences -0.1, +0.2, 0.0: the interval crosses 0
    assert compare({"1": 1.9, "2": 2.2, "3": 2.0}, baseline).judgement.verdict == UNRESOLVED
    one = compare({"1": 1.0}, {"1": 2.0})
    assert (
        one.judgement.verdict == ONE_SEED
        and one.tests.difference.mean == pytest.approx(-1.0)
        and one.judgement.power is None
    )


def test_two_seeds_are_judged_on_one_degree_of_freedom():
    c = compare({"1": 1.90, "2": 1.91}, {"1": 2.00, "2": 2.02})  # -0.10, -0.11: t = -21 on 1 df
    assert c.tests.p_value == pytest.approx(0.0303, abs=1e-3) and c.judgement.verdict == BETTER


def test_a_difference_inside_the_minimum_effect_is_equivalent_and_a_small_resolved_one_says_so():
    baseline = {str(s): 2.0 + 0.01 * s for s in range(1, 9)}
    tiny = {
        s: v + d
        for (s, v), d in zip(baseline.items(), (1e-3, -1e-3, 2e-3, 0, -2e-3, 1e-3, 0, -1e-3), strict=True)
    }
    assert compare(tiny, baseline, min_effect=0.01).judgement.verdict == "equivalent within ±0.01"
    small = {
        s: v - 0.004 + d / 4
        for (s, v), d in zip(baseline.items(), (1e-3, -1e-3, 2e-3, 0, -2e-3, 1e-3, 0, -1e-3), strict=True)
    }
    assert compare(small, baseline, min_effect=0.01).judgement.verdict == "better, but by less than 0.01"
    assert compare(small, baseline, min_effect=0.001).judgement.verdict == BETTER


def test_identical_results_and_a_constant_offset_are_named_not_tested():
    baseline = {"1": 2.0, "2": 2.1, "3": 1.9}
    same = compare(dict(baseline), baseline)
    assert (
        same.judgement.verdict == IDENTICAL_VERDICT
        and same.tests.p_value is None
        and same.judgement.power is None
    )
    offset = compare({k: v + 1e-12 for k, v in baseline.items()}, baseline)
    assert offset.judgement.verdict == IDENTICAL_VERDICT  # rounding, not a design difference: never "worse"
    constant = compare({k: v + 0.05 for k, v in baseline.items()}, baseline, min_effect=0.01)
    assert constant.judgement.verdict == "worse (the same difference on every seed)"
    assert compare(
        {k: v - 0.005 for k, v in baseline.items()}, baseline, min_effect=0.01
    ).judgement.verdict == ("equivalent within ±0.01 (the same difference on every seed)")


def test_only_seeds_both_sides_have_are_paired_and_the_others_are_named():
    c = compare({"1": 1.0, "2": 1.1, "3": 0.9}, {"2": 1.3, "3": 1.2, "4": 9.0})
    assert c.tests.seeds == ("2", "3") and c.tests.unmatched == ("1", "4")
    assert c.tests.difference.mean == pytest.approx(((1.1 - 1.3) + (0.9 - 1.2)) / 2)
    assert compare({"1": 1.0}, {"2": 1.0}).judgement.verdict == "no seeds in common with the baseline"


def test_failures_are_counted_apart_with_an_exact_test_beside_the_trained_seeds_difference():
    baseline = {"1": 2.0, "2": 2.0, "3": 2.0}
    once = compare({"1": 1.5, "2": math.inf, "3": 1.52}, baseline)
    # One seed of three failed, none of the baseline's: McNemar's exact p = 1. The losses are judged over the
    # two seeds both sides trained, and the failures said beside them.
    assert once.tests.failures == Failures(mine=1, theirs=0, n=3, p_value=1.0)
    assert once.tests.difference.mean == pytest.approx(-0.49) and once.tests.difference.n == 2
    assert once.judgement.verdict == "better when trained; fails 1/3 vs 0/3 (exact p = 1)"
    assert once.judgement.verdict.outcome is Outcome.BETTER
    # Both sides failed, on different seeds: two discordant seeds, one each way.
    crossed = compare({"1": math.inf, "2": 2.1, "3": 2.2}, {"1": 2.0, "2": math.inf, "3": 2.1})
    assert crossed.tests.failures == Failures(1, 1, 3, 1.0) and crossed.tests.difference.n == 1
    assert str(crossed.judgement.verdict).startswith(ONE_SEED)
    both = compare({"1": math.inf, "2": math.inf}, {"1": math.inf, "2": math.inf})
    assert both.tests.failures.mine == both.tests.failures.theirs == 2 and both.tests.difference is None
    assert str(both.judgement.verdict).startswith("not resolved: every seed failed")


def test_a_baseline_that_failed_on_every_seed_is_beaten_only_when_the_rate_is_clear():
    finite = {str(s): 2.0 for s in range(1, 8)}
    dead = {str(s): math.inf for s in range(1, 8)}
    c = compare(finite, dead)
    # 7 of 7 against 0 of 7: exact p = 2 * 0.5^7 = 0.0156
    assert c.tests.failures.p_value == pytest.approx(2 * 0.5**7)
    assert c.judgement.verdict == "better: fails less often, 0/7 vs 7/7 (exact p = 0.016)"
    three = compare({"1": 2.0, "2": 2.0, "3": 2.0}, {"1": math.inf, "2": math.inf, "3": math.inf})
    assert three.tests.failures.p_value == pytest.approx(0.25) and str(three.judgement.verdict).startswith(
        "not resolved"
    )


def test_the_rate_is_the_one_where_fewest_tuning_seeds_failed_then_the_lowest_mean_of_those_that_trained():
    by_rate = {
        0.001: {"1": 2.10, "2": 2.12, "3": 2.08},
        0.003: {"1": 1.95, "2": 1.97, "3": 1.99},
        0.01: {"1": 1.80, "2": math.inf, "3": 1.79},  # best seeds, but one failed
        0.03: {"1": math.inf, "2": math.inf, "3": math.inf},
    }
    assert chosen_rate(by_rate, {"1", "2", "3"}) == 0.003
    assert chosen_rate(by_rate, {"1", "3"}) == 0.01  # the seed that failed there is not a tuning seed
    assert (
        chosen_rate({0.01: {"1": math.inf, "2": 1.9}, 0.03: {"1": math.inf, "2": math.inf}}, {"1", "2"})
        == 0.01
    )
    assert chosen_rate(by_rate, {"9"}) is None


def test_a_tuned_setting_is_judged_only_on_seeds_that_did_not_choose_its_rate():
    def setting(rate: float, results: dict[str, float]) -> Setting:
        return Setting({"act": "gelu", LR: rate}, [], results)

    settings = [
        setting(0.001, {"1": 2.10, "2": 2.20, "3": 2.00}),
        setting(0.003, {"1": 1.70, "2": 1.75, "3": 1.72, "5": 1.80, "6": 1.78}),  # 5, 6: judging seeds
    ]
    [before] = tuned_settings([settings[0], setting(0.003, {"1": 1.70, "2": 1.75, "3": 1.72})], ["act"], 0.95)
    assert before.rate == 0.003 and before.tuned_on == ("1", "2", "3") and before.results == {}
    [tuned] = tuned_settings(settings, ["act"], 0.95, tuned_on=("1", "2", "3"))
    assert tuned.rate == 0.003 and tuned.seeds == ("5", "6") and tuned.results == {"5": 1.80, "6": 1.78}
    assert tuned.estimate.mean == pytest.approx(1.79)
    assert tuned.mean_at_rate == pytest.approx((1.70 + 1.75 + 1.72 + 1.80 + 1.78) / 5)
    [first_look] = tuned_settings(settings, ["act"], 0.95, tuned_on=("1", "2", "3"), judged_on={"5"})
    assert first_look.results == {"5": 1.80}


# --- the report from made-up run records ---------------------------------------------------------------------


def rendered_row(text: str, *cells: object) -> str | None:
    """The line of a markdown table in `text` that begins with `cells` (None: there is none)."""
    start = "| " + " | ".join(str(cell) for cell in cells) + " |"
    return next((line for line in text.splitlines() if line.startswith(start)), None)


def fake_run(
    sweep: Path,
    number: int,
    status: str,
    loss: float | None,
    reference: dict | None = None,
    targets: dict[float, tuple[int, float]] | None = None,
    watched: tuple[float, ...] = (2.0, 1.88),
    **choices: str,
) -> Path:
    """A run directory as train.py -m leaves it (Hydra's record, metrics.json), without TensorBoard events;
    `reference`: its validation split's reference levels; `targets`: level -> (step, seconds) at which its
    validation loss first reached it (a level `watched` but not there was never reached)."""
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
    if targets is not None:
        config["callbacks"] = {"targets": {"levels": list(watched)}}
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    fields = {"loss/val": loss, "step": 600, "params": 801_664} if loss is not None else {"error": "boom"}
    if reference is not None:
        fields[REFERENCE_LEVELS] = reference
    for level, (step, seconds) in (targets or {}).items():
        step_tag, time_tag = target_tags(level)
        fields |= {step_tag: float(step), time_tag: seconds}
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


def test_report_on_made_up_records_has_the_known_means_intervals_and_tuned_rates(lr_sweep):
    report = build_report(lr_sweep, baseline="norm=pre")
    assert report.setting_columns == ["norm", "norm_type", "act", "optim.lr"]
    # Hydra's override parser reads 3e-3 as the float 0.003: the setting keeps it as that float.
    by_choice = {(s.choices["norm"], s.choices["optim.lr"]): s for s in report.settings}
    pre_best = by_choice[("pre", 0.003)]
    assert pre_best.estimate.mean == pytest.approx(1.9) and pre_best.estimate.n == 3
    assert pre_best.estimate.high - pre_best.estimate.mean == pytest.approx(
        4.302653 * 0.1 / math.sqrt(3), abs=1e-6
    )
    # The diverged run fails: counted apart, with the exact interval of the rate; the mean is the others'.
    post_high = by_choice[("post", 0.003)]
    assert post_high.fails == 1 and post_high.estimate.mean == pytest.approx(1.70)
    assert post_high.fail_interval == pytest.approx((0.0084, 0.9057), abs=1e-4)
    assert by_choice[("pre", 0.001)].without_result == 1  # the failed seed-4 run
    assert report.settings[0] is pre_best  # fewest failures first, then by mean: 1.70 with 1/3 failed after

    # Tuned on the sweep's seeds: pre takes 3e-3; post 1e-3, where none of its seeds failed (at 3e-3, seed 2
    # diverged). No seed is judged at a rate it chose: nothing is judged until add_seeds adds seeds.
    tuned = {s.choices["norm"]: s for s in report.tuned}
    assert (tuned["pre"].rate, tuned["post"].rate) == (0.003, 0.001)
    assert tuned["post"].tuned_on == ("1", "2", "3") and tuned["post"].results == {}
    assert report.family_baseline is tuned["pre"] and report.family_baseline not in report.settings
    c = tuned["post"].comparison
    assert c.tests.seeds == () and c.judgement.verdict.outcome is Outcome.NOT_RESOLVED
    assert c.judgement.verdict == "not yet judged (rates 0.001 against 0.003, chosen on seeds 1, 2, 3)"

    text = markdown(report)
    assert "## Each setting at the rate its tuning seeds chose" in text
    assert "| 1 | pre | 0.003 | 3 | 1.9000 |" in text  # only the columns that vary: norm and the rate
    assert "| pre | 0.003 | 1, 2, 3 | — | 0 | baseline |" in text
    assert "- `norm=post` against `norm=pre`: **not yet judged (rates 0.001 against 0.003" in text
    record = json.loads(json.dumps(to_json(report)))  # plain JSON, no NaN or infinity
    assert record["family_baseline"]["norm"] == "pre" and record["baseline_source"] == "--baseline"
    assert record["rule"] == "tuned then judged"
    post = next(s for s in record["tuned"] if s["choices"]["norm"] == "post")
    assert post["rate"] == 0.001 and post["tuned_on"] == ["1", "2", "3"] and post["judged_on"] == []
    failed = next(
        s for s in record["settings"] if s["choices"]["optim.lr"] == 0.003 and s["choices"]["norm"] == "post"
    )
    assert failed["fails"] == 1 and failed["results"]["2"] == "inf"
    # A settings row's seeds are every seed run at its rate, those that chose it included: named `seeds`, not
    # `judged_on` (issue 59), which a tuned row keeps for its judging seeds (none yet here).
    assert failed["seeds"] == ["1", "2", "3"] and "judged_on" not in failed
    assert all("judged_on" in s and "seeds" not in s for s in record["tuned"])


def test_without_a_named_baseline_there_are_estimates_and_no_verdicts(lr_sweep):
    report = build_report(lr_sweep)
    assert report.family_baseline is None and all(s.comparison is None for s in report.tuned)
    # The rate is tuned, not named: the example names the design alone.
    assert (
        "No verdicts: no baseline was named. For verdicts against one of these settings, run report.py again "
        "with `--baseline norm=pre` (the setting the sweep ran first)"
    ) in markdown(report)


def test_a_grid_without_a_baseline_says_which_baseline_gives_it_verdicts(tmp_path):
    """The no-verdicts line names one of the sweep's settings as `--baseline` takes it: the one run first
    (here not the best, which the line says is not used as one), and that flag gives the verdicts."""
    sweep = tmp_path / "sweep"
    losses = {("pre", "gelu"): [2.0, 2.1], ("pre", "swiglu"): [1.9, 2.0], ("post", "gelu"): [2.2, 2.3],
              ("post", "swiglu"): [1.8, 1.85]}  # fmt: skip
    number = 0
    for (norm, act), values in losses.items():
        for seed, loss in zip(("1", "2"), values, strict=True):
            fake_run(sweep, number, "completed", loss, norm=norm, act=act, seed=seed)
            number += 1
    report = build_report(sweep)
    assert report.family_baseline is None
    assert report.settings[0].choices["norm"] == "post"  # post+swiglu is best
    assert report.baseline_example == "norm=pre,act=gelu"
    text = markdown(report)
    assert (
        "No verdicts: no baseline was named. For verdicts against one of these settings, run report.py again "
        "with `--baseline norm=pre,act=gelu` (the setting the sweep ran first) or another setting's choices, "
        "or set `baseline:` in the experiment preset."
    ) in text
    assert markdown(from_json(json.loads(json.dumps(to_json(report))))) == text  # the same from its json
    judged = build_report(sweep, baseline=report.baseline_example)
    assert (judged.family_baseline.choices["norm"], judged.family_baseline.choices["act"]) == ("pre", "gelu")
    assert "No verdicts" not in markdown(judged) and judged.baseline_example is None


def test_a_named_baseline_is_compared_against_and_a_bad_one_is_refused(lr_sweep):
    report = build_report(lr_sweep, baseline="norm=post,optim.lr=1e-3")  # the rate is tuned anyway
    assert report.family_baseline.choices["norm"] == "post"
    pre_tuned = next(s for s in report.tuned if s.choices["norm"] == "pre")
    assert (
        pre_tuned.comparison.judgement.verdict
        == "not yet judged (rates 0.003 against 0.001, chosen on seeds 1, 2, 3)"
    )
    with pytest.raises(ReportError, match="do not vary in this sweep"):
        build_report(lr_sweep, baseline="dropout=0.1")
    with pytest.raises(ReportError, match="matches no setting"):
        build_report(lr_sweep, baseline="norm=sandwich")
    with pytest.raises(ReportError, match="key=value"):
        build_report(lr_sweep, baseline="pre")


def test_a_baseline_naming_several_settings_asks_for_the_column_that_tells_them_apart(tmp_path):
    sweep = tmp_path / "sweep"
    for number, (norm, act) in enumerate([("pre", "gelu"), ("pre", "swiglu"), ("post", "gelu")]):
        fake_run(sweep, number, "completed", 2.0, norm=norm, act=act)
    with pytest.raises(ReportError, match="matches 2 settings; name its act too"):
        build_report(sweep, baseline="norm=pre")


def test_one_seed_per_setting_says_so_instead_of_an_interval(tmp_path):
    sweep = tmp_path / "sweep"
    fake_run(sweep, 0, "completed", 2.0, act="gelu")
    fake_run(sweep, 1, "completed", 1.9, act="swiglu")
    report = build_report(sweep, baseline="act=swiglu")
    assert not report.lr_varies and report.family_baseline.choices["act"] == "swiglu"
    gelu = next(s for s in report.settings if s.choices["act"] == "gelu")
    assert (
        gelu.comparison.judgement.verdict == ONE_SEED
        and gelu.comparison.tests.difference.mean == pytest.approx(0.1)
    )
    assert "| gelu | 1 | +0.1000 | — | — | — | one seed: no interval |" in markdown(report)


def test_added_seeds_are_judged_at_the_rate_the_sweeps_own_seeds_chose_which_are_judged_on_nothing(
    tmp_path,
):
    sweep = tmp_path / "sweep"
    number = 0
    # GELU is best at 1e-3 on seeds 1-2 (the first look) though 1e-2 is better later: the choice stands.
    losses = {
        ("gelu", "1e-3"): [2.00, 2.00, 2.10, 2.11, 2.12, 2.10],
        ("gelu", "1e-2"): [2.05, 2.06, 2.00, 2.00, 2.00, 2.00],
        ("swiglu", "1e-3"): [2.10, 2.10, 2.30, 2.30, 2.30, 2.30],
        ("swiglu", "1e-2"): [2.00, 2.01, 2.00, 2.03, 2.01, 2.00],
    }
    for (act, lr), values in losses.items():
        for seed, loss in enumerate(values, start=1):
            fake_run(sweep, number, "completed", loss, act=act, **{"optim.lr": lr}, seed=str(seed))
            number += 1
    design = {"alpha": 0.05, "min_effect": 0.02, "max_seeds": 6, "baseline": "act=gelu",
              "looks": [["1", "2"], ["1", "2", "3", "4"], ["1", "2", "3", "4", "5", "6"]], "round": None}  # fmt: skip
    (sweep / "sequential.json").write_text(json.dumps(design), encoding="utf-8")
    fixed = build_report(sweep)  # the sweep as it was: no design yet
    (sweep / "sequential.json").write_text(json.dumps(design), encoding="utf-8")
    report = build_report(sweep)
    tuned = {s.choices["act"]: s for s in report.tuned}
    # The sweep's own seeds 1-2 chose the rates and are judged on nothing, with the design as without it.
    assert tuned["gelu"].tuned_on == ("1", "2") and sorted(tuned["gelu"].seeds) == ["3", "4", "5", "6"]
    before = {s.choices["act"]: s.comparison.judgement.verdict for s in fixed.tuned if s.comparison}
    assert {a: s.comparison.judgement.verdict for a, s in tuned.items() if s.comparison} == before
    assert all(
        s.comparison.judgement.verdict.outcome is Outcome.NOT_RESOLVED for s in fixed.tuned if s.comparison
    )
    # The added seeds 3-6 at the rate seeds 1-2 chose: GELU at 1e-3 (though 1e-2 is better later), SwiGLU at 1e-2.
    c = tuned["swiglu"].added
    assert sorted(c.tests.seeds) == ["3", "4", "5", "6"] and tuned["swiglu"].answer is c
    assert c.tests.difference.mean == pytest.approx(
        ((2.00 - 2.10) + (2.03 - 2.11) + (2.01 - 2.12) + (2.00 - 2.10)) / 4
    )
    assert (
        str(c.judgement.verdict).endswith("(look 3, 4 added seeds)")
        and c.judgement.verdict.outcome is Outcome.BETTER
    )
    text = markdown(report)
    assert "## Seeds added to the open rows (scripts/add_seeds.py)" in text
    assert "the settings table orders them the other way" not in text  # its rows at the rates agree


def test_an_answer_that_disagrees_with_the_settings_table_says_why_in_the_same_line(tmp_path):
    sweep = tmp_path / "sweep"
    # Seeds 1-2 choose 1e-3 for both and put GELU far ahead there; the judging seeds 3-4 put SwiGLU ahead.
    losses = {
        ("gelu", "1e-3"): [1.80, 1.80, 2.10, 2.12],
        ("gelu", "1e-2"): [2.50, 2.50],
        ("swiglu", "1e-3"): [2.30, 2.30, 2.05, 2.07],
        ("swiglu", "1e-2"): [2.50, 2.50],
    }
    number = 0
    for (act, lr), values in losses.items():
        for seed, loss in enumerate(values, start=1):
            fake_run(sweep, number, "completed", loss, act=act, **{"optim.lr": lr}, seed=str(seed))
            number += 1
    design = {"alpha": 0.05, "min_effect": 0.01, "max_seeds": 4, "baseline": "act=gelu",
              "looks": [["1", "2"], ["1", "2", "3", "4"]], "round": None}  # fmt: skip
    (sweep / "sequential.json").write_text(json.dumps(design), encoding="utf-8")
    text = markdown(build_report(sweep))
    answer = next(line for line in text.splitlines() if line.startswith("- `act=swiglu` against `act=gelu`"))
    assert "**better (the same difference on every seed) (look 2, 2 added seeds)**; -0.0500" in answer
    assert answer.endswith(
        "; the settings table orders them the other way at the chosen rates: its means there include the "
        "tuning seeds, which chose those rates and so flatter them, and this pairs the judging seeds only"
    )
    assert text.index("| 1 | gelu | 0.001 |") < text.index("| 2 | swiglu | 0.001 |")


def test_the_report_opens_with_the_answer_a_sentence_per_comparison_and_what_is_still_open(tmp_path):
    sweep = tmp_path / "sweep"
    losses = {"gelu": [2.00, 2.10, 2.05], "swiglu": [1.90, 2.00, 1.95], "relu": [2.01, 2.08, 2.09]}
    number = 0
    for act, values in losses.items():
        for seed, loss in enumerate(values, start=1):
            fake_run(sweep, number, "completed", loss, act=act, seed=str(seed))
            number += 1
    report = build_report(sweep, baseline="act=gelu")
    lines = markdown(report).splitlines()
    assert lines[2] == "## Answer"
    answer = lines[4:6]
    swiglu = next(s for s in report.family if s.choices["act"] == "swiglu").comparison
    # Only the column that varies names a setting; the verdict, difference and interval are the table's.
    assert answer[0] == (
        f"- `act=swiglu` against `act=gelu`: **{swiglu.judgement.verdict}**; -0.1000 nats/char over the seeds both sides trained, "
        f"95% CI {fmt_interval(swiglu.tests.difference, signed=True)}, 3 seeds; fails 0/3 vs 0/3"
    )
    assert answer[1].startswith("- `act=relu` against `act=gelu`: **not resolved**")
    opening = "\n".join(lines[: lines.index("## Settings")])
    assert "Still open: 1 of 2. `python scripts/add_seeds.py" in opening and "None" not in opening


def test_a_path_every_run_shares_is_shown_as_a_reader_recognises_it_and_judged_as_given(tmp_path):
    """Issue 67, point 5: `data.path` given absolute names a directory of the machine that ran the sweep, so
    the report's *Shared by every run* names the file (`…/input.txt`); given relative, it stays as the
    command gave it (docs/results.md's `data.path=input.txt`). The runs keep it as given: not a number
    changes. A report.json of format 7 reads with the path named the same way."""
    losses = {"gelu": [2.00, 2.10, 2.05], "swiglu": [1.90, 2.00, 1.95]}
    shared, compared = {}, {}
    for given, says in (("/home/someone/corpora/input.txt", "…/input.txt"), ("input.txt", "input.txt")):
        sweep = tmp_path / ("absolute" if given.startswith("/") else "relative")
        for number, (act, seed, loss) in enumerate(
            (act, str(seed), loss) for act, values in losses.items() for seed, loss in enumerate(values, 1)
        ):
            fake_run(sweep, number, "completed", loss, act=act, seed=seed, **{"data.path": given})
        report = build_report(sweep, baseline="act=gelu")
        text = markdown(report)
        shared[given] = next(line for line in text.splitlines() if line.startswith("Shared by every run: "))
        assert report.common["data.path"] == says and f"`data.path={says}`" in shared[given]
        assert all(run.choices["data.path"] == given for run in report.runs)
        compared[given] = [s.comparison for s in report.family if s.comparison is not None]
        record = json.loads(json.dumps(to_json(report)))
        assert record["common"]["data.path"] == says and markdown(from_json(record)) == text
        older = record | {"format": 7, "common": record["common"] | {"data.path": given}}
        assert from_json(older).common["data.path"] == says
    assert "/home/someone" not in "".join(shared.values())
    absolute, relative = compared.values()
    assert absolute == relative and len(absolute) == 1  # the same comparison, to the last digit
    # A list of files and a Windows path alike; a value that is no path is itself.
    assert portable(["/data/a.txt", "b.txt"]) == ["…/a.txt", "b.txt"]
    assert portable("C:\\Users\\someone\\input.txt") == "…/input.txt"
    assert [portable(v) for v in ("/", 0.003, "pre")] == ["/", 0.003, "pre"]


# --- steps and seconds to a level (report.py --metric) ---------------------------------------------------------


@pytest.fixture
def target_sweep(tmp_path) -> Path:
    """gelu, swiglu and relu × seeds 1-4, each run with the step (and seconds, a tenth of it plus the seed) at
    which it reached 2.0 and 1.88: swiglu reaches 1.88 250-500 steps before gelu on every seed, yet ends
    0.04-0.06 nats higher; relu's seed 3 never reaches 1.88."""
    sweep = tmp_path / "sweep"
    steps = {
        "gelu": [1250, 1500, 1250, 1500],
        "swiglu": [750, 1000, 750, 1250],
        "relu": [1500, 1500, None, 1750],
    }
    losses = {
        "gelu": [1.80, 1.82, 1.79, 1.81],
        "swiglu": [1.85, 1.86, 1.84, 1.87],
        "relu": [1.81, 1.83, 1.90, 1.80],
    }
    levels = {"uniform": 4.174, "unigram": 3.347, "bigram": 2.487}
    number = 0
    for act in steps:
        for seed, (step, loss) in enumerate(zip(steps[act], losses[act], strict=True), start=1):
            reached = {2.0: (500, 50.0 + seed)} | ({1.88: (step, step / 10 + seed)} if step else {})
            fake_run(sweep, number, "completed", loss, levels, reached, act=act, seed=str(seed))
            number += 1
    return sweep


def test_a_run_that_did_not_watch_the_level_has_no_result_rather_than_a_failure(target_sweep):
    # gelu's seed 5 watched only 2.0 (callbacks.targets.levels=[2.0]): it cannot have reached 1.88 unrecorded.
    fake_run(
        target_sweep, 12, "completed", 1.80, None, {2.0: (500, 55.0)}, watched=(2.0,), act="gelu", seed="5"
    )
    report = build_report(target_sweep, "act=gelu", metric="steps_to=1.88")
    (run,) = [r for r in report.runs if r.choices["act"] == "gelu" and r.seed == "5"]
    assert run.watched == (2.0,) and run.result is None
    gelu = next(s for s in report.family if s.choices["act"] == "gelu")
    assert "5" not in gelu.results and gelu.fails == 0 and gelu.without_result == 1
    # relu's seed 3 watched 1.88 and never reached it: a failure (+inf), not a run without a result.
    (relu_3,) = [r for r in report.runs if r.choices["act"] == "relu" and r.seed == "3"]
    assert relu_3.watches(1.88) and relu_3.result == math.inf and not run.watches(1.88)
    # The runs table says which (the rendering of those two runs): after the params, the steps to 1.88.
    text, rank = markdown(report), report.runs.index(relu_3) + 1
    assert rendered_row(text, "—", run.name, "gelu", "5", "801,664", "not watched")
    assert rendered_row(text, rank, relu_3.name, "relu", "3", "801,664", "not reached")
    # By the loss it is a run like any other, and at the level it watched it has its step.
    for metric, expected in ((None, 1.80), ("steps_to=2", 500.0)):
        by_act = {s.choices["act"]: s for s in build_report(target_sweep, "act=gelu", metric=metric).family}
        assert by_act["gelu"].results["5"] == expected


def test_steps_to_a_level_judges_the_runs_that_reached_it_and_counts_the_others_as_failures(target_sweep):
    text, written = write_report(target_sweep, "act=gelu", metric="steps_to=1.88")
    report = build_report(target_sweep, "act=gelu", metric="steps_to=1.88")
    assert report.metric.flag == "steps_to=1.88" and report.min_effect == 50  # δ in steps by default
    by_act = {s.choices["act"]: s for s in report.family}
    swiglu, relu = by_act["swiglu"].comparison, by_act["relu"]
    # Each run's result is its step at 1.88: swiglu's are 500, 500, 500 and 250 fewer, paired seed by seed.
    assert by_act["swiglu"].results == {"1": 750.0, "2": 1000.0, "3": 750.0, "4": 1250.0}
    assert (
        swiglu.tests.difference.mean == pytest.approx(-437.5) and swiglu.tests.eval_se is None
    )  # no windows to steps
    assert swiglu.judgement.verdict == BETTER and swiglu.judgement.verdict.outcome is Outcome.BETTER
    # relu's seed 3 never reached 1.88: a failure, counted apart; its steps are over the three that did.
    assert relu.results["3"] == math.inf and relu.fails == 1 and relu.estimate.n == 3
    assert relu.estimate.mean == pytest.approx(1583.333, abs=1e-3)
    assert relu.comparison.tests.failures == Failures(mine=1, theirs=0, n=4, p_value=1.0)

    # The report says what it compares, in its units, and reads no loss against the reference levels.
    assert text.startswith(f"# Sweep report: {target_sweep}, steps to 1.88\n")
    assert "Steps to 1.88 (lower is better) of 12 runs in 3 settings" in text
    assert "never reached 1.88 fails" in text and "δ = 50 steps, `--min-effect`" in text
    assert "gain over unigram" not in text and "Reference levels" not in text and "nats/char when" not in text
    d = swiglu.tests.difference
    assert (
        f"- `act=swiglu` against `act=gelu`: **better**; -437.5 steps over the seeds both sides trained, 95% CI "
        f"{fmt_interval(d, signed=True, digits=1)}, 4 seeds; fails 0/4 vs 0/4"
    ) in text
    # relu's settings row: 1 of its 4 runs failed, with the rate's interval; its mean in steps, to 0.1 step.
    assert len(relu.results) == 4 and relu.fail_interval is not None and report.metric.digits == 1
    low, high = relu.fail_interval
    row = rendered_row(text, report.settings.index(relu) + 1, "relu", 4, "1583.3")
    assert row is not None and f" | 1/4 [{low:.2f}, {high:.2f}] | " in row
    runs = {(r.choices["act"], r.seed): r for r in report.runs}
    assert runs["relu", "3"].result == math.inf and runs["gelu", "2"].result == 1500.0
    gelu_2 = runs["gelu", "2"]
    assert rendered_row(text, report.runs.index(gelu_2) + 1, gelu_2.name, "gelu", "2", "801,664", "1500.0")
    # report.json records the metric, and renders the same report.md again.
    record = json.loads(written[1].read_text(encoding="utf-8"))
    assert record["metric"] == {"kind": "steps_to", "level": 1.88}
    assert markdown(from_json(record)) == text

    seconds = build_report(target_sweep, "act=gelu", metric="time_to=1.88")
    assert seconds.min_effect == 10 and seconds.family[0].results["1"] in (76.0, 126.0, 151.0)
    assert "δ = 10 s, `--min-effect`" in markdown(seconds)
    # By default the final loss, as ever: there swiglu, which got to 1.88 first, ends worse.
    default = build_report(target_sweep, "act=gelu")
    assert (
        next(s for s in default.family if s.choices["act"] == "swiglu").comparison.judgement.verdict == WORSE
    )
    assert default.metric.is_loss and "gain over unigram" in markdown(default)


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("steps", "write loss (the default), steps_to=LEVEL or time_to=LEVEL"),
        ("speed=1.88", "write loss (the default)"),
        ("steps_to=fast", "the level 'fast' is not a positive number"),
        ("time_to=1.5", "no run of this sweep reached 1.5; the runs recorded 2, 1.88"),
    ],
)
def test_a_bad_metric_exits_in_one_line_naming_the_flag(target_sweep, flag, says):
    result = run_script_in_process("report.py", str(target_sweep), "--metric", flag)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: --metric ") and says in result.stderr
    assert not (target_sweep / REPORT_MD).exists()


def test_report_json_records_how_each_familys_p_values_were_adjusted_and_an_older_file_reads_with_it(
    target_sweep,
):
    """Issue 67, point 4: report.json names each family's adjustment (Holm), its size and α beside the
    adjusted p-values; through JSON and back they hold, and a format-6 file, which lacks them, reads with them.
    The steps to 1.88: relu's seed that never reached it is a failure, whose exact test joins the family."""
    report = build_report(target_sweep, "act=gelu", metric="steps_to=1.88")
    record = json.loads(json.dumps(to_json(report)))  # plain JSON, as report.json holds it
    difference, equivalence = record["families"]
    stated = {"method": "holm", "alpha": 0.05, "look": None}  # the sweep's own seeds: no sequential look
    assert [{k: f[k] for k in ("tests", *stated)} for f in (difference, equivalence)] == [
        {"tests": "difference", **stated},
        {"tests": "equivalence", **stated},
    ]

    # Each family is what was adjusted: its method over as many raw p-values as its size gives the adjusted
    # ones, each where `adjusts` says (swiglu's and relu's loss tests, relu's failure test; their TOSTs).
    def raw(tests: dict, adjusted: str) -> float | None:
        failures = tests["failures"]
        return {
            "p_adjusted": tests["p_value"],
            "p_failures_adjusted": failures and failures["p_value"],
            "p_equivalence_adjusted": tests["p_equivalence"],
        }[adjusted]

    judged = [s["comparison"] for s in record["settings"] if s["comparison"] is not None]
    for family in (difference, equivalence):
        assert all(where.startswith("comparison.judgement.") for where in family["adjusts"])
        keys = [where.rsplit(".", 1)[1] for where in family["adjusts"]]
        pairs = [
            (p, c["judgement"][k]) for k in keys for c in judged if (p := raw(c["tests"], k)) is not None
        ]
        assert family["size"] == len(pairs)
        adjusted = multipletests([p for p, _ in pairs], method=family["method"])[1]
        assert list(adjusted) == pytest.approx([q for _, q in pairs], abs=1e-12)
    assert (difference["size"], equivalence["size"]) == (3, 2)
    assert from_json(record).families == report.families
    older = {key: value for key, value in record.items() if key != "families"} | {"format": 6}
    assert from_json(older).families == report.families


def test_a_report_that_would_read_differently_moves_the_old_one_and_its_files_aside_first(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    files = [sweep / REPORT_MD, sweep / "report.json", sweep / "report.png"]
    for path in files:
        path.write_text(f"old {path.name}", encoding="utf-8")
    assert keep_previous(sweep, "old report.md", files) is None  # the same words: nothing to keep
    kept = keep_previous(sweep, "new words", files)
    assert kept is not None and kept.parent == sweep / PREVIOUS_REPORTS
    assert {p.name: p.read_text() for p in kept.iterdir()} == {p.name: f"old {p.name}" for p in files}
    (sweep / REPORT_MD).write_text("new words", encoding="utf-8")
    again = keep_previous(sweep, "newer words", files[:1])  # a second, in the same second: its own folder
    assert again != kept and (again / REPORT_MD).read_text() == "new words"


def test_the_reference_levels_runs_share_are_stated_and_each_setting_gets_its_gain_over_the_unigram(tmp_path):
    sweep = tmp_path / "sweep"
    levels = {"uniform": 4.1744, "unigram": 3.3473, "bigram": 2.4872}
    for number, (act, loss) in enumerate([("gelu", 2.10), ("swiglu", 3.3473)]):
        run = fake_run(sweep, number, "completed", loss, act=act)
        record = json.loads((run / "metrics.json").read_text())
        write_run_record(run, "completed", **{k: v for k, v in record.items() if k != "status"},
                         reference_levels=levels)  # fmt: skip
    report = build_report(sweep)
    assert report.reference == levels
    text = markdown(report)
    assert "unigram 3.3473, bigram 2.4872" in text
    assert "| 1 | gelu | 1 | 2.1000 | — | — | +1.2473 | 0/1 [0.00, 0.97] | 0 | — |  |" in text
    # At the unigram level: its gain says so; with no validation curve (a record only) no stall can be shown
    # (issue 48: can't tell is not flat), so the `why` column names none.
    assert "| 2 | swiglu | 1 | 3.3473 | — | — | +0.0000 | 0/1 [0.00, 0.97] | 0 | — |  |" in text
    # Runs on another split share no levels: none are shown rather than the wrong ones.
    other = fake_run(sweep, 2, "completed", 2.0, act="geglu")
    record = json.loads((other / "metrics.json").read_text())
    write_run_record(other, "completed", **{k: v for k, v in record.items() if k != "status"},
                     reference_levels={**levels, "unigram": 3.0})  # fmt: skip
    assert build_report(sweep).reference is None


def test_a_setting_that_fails_more_often_is_better_only_when_trained_and_says_both():
    """Issue 48: instability is a finding of its own. The trained seeds' gain is far beyond doubt (0.5 nats,
    sd 0.01): `better when trained`, with how often each side failed beside it (issue 34's `better` alone hid
    that 3 of 5 failed; its answer, an open verdict, hid the gain)."""
    baseline = {str(s): 2.0 + 0.01 * s for s in range(1, 6)}
    mine = {"1": math.inf, "2": math.inf, "3": math.inf, "4": 1.54, "5": 1.55}
    c = compare(mine, baseline)
    assert c.tests.failures == Failures(3, 0, 5, 0.25) and c.tests.difference.mean < -0.4
    assert (
        c.judgement.verdict
        == "better (the same difference on every seed) when trained; fails 3/5 vs 0/5 (exact p = 0.25)"
    )


@pytest.mark.parametrize(("shift", "outcome"), [(-0.5, Outcome.BETTER), (+0.5, Outcome.WORSE)])
def test_unequal_failures_that_are_not_resolved_are_said_beside_the_loss_verdict(shift, outcome):
    baseline = {str(s): 2.0 + 0.01 * (s % 3) for s in range(1, 9)}
    mine = {s: v + shift for s, v in baseline.items()} | {"1": math.inf}
    (c,) = judge([paired_tests(mine, baseline)])
    assert c.judgement.verdict.outcome is outcome
    assert str(c.judgement.verdict).endswith(" when trained; fails 1/8 vs 0/8 (exact p = 1)")


def test_equal_failures_on_both_sides_leave_the_loss_verdict_to_the_trained_seeds():
    baseline = {str(s): 2.0 + 0.01 * (s % 3) for s in range(1, 9)} | {"1": math.inf}
    mine = {s: v - 0.5 for s, v in baseline.items()}
    (c,) = judge([paired_tests(mine, baseline)])
    assert c.tests.failures == Failures(1, 1, 8, 1.0)
    assert c.judgement.verdict.outcome is Outcome.BETTER and "when trained; fails 1/8 vs 1/8" in str(
        c.judgement.verdict
    )


def test_resolved_failures_decide_a_row_its_losses_leave_open():
    baseline = {str(s): 2.0 + 0.01 * (s % 3) for s in range(1, 9)}
    mine = {s: (math.inf if int(s) <= 7 else v - 1.0) for s, v in baseline.items()}  # 7/8 vs 0/8: p = 0.016
    (c,) = judge([paired_tests(mine, baseline)])
    assert c.judgement.verdict == "worse: fails more often, 7/8 vs 0/8 (exact p = 0.016)"


def test_runs_group_into_settings_by_every_choice_but_the_seed():
    def run(norm: str, seed: str, status: str, loss: float | None) -> RunSummary:
        return RunSummary(
            Path(f"{norm}{seed}"), f"{norm}{seed}", status, {"norm": norm}, seed, final_val_loss=loss
        )

    runs = [run("post", "1", "completed", 2.5), run("pre", "1", "completed", 2.0), run("post", "2", "diverged", None),
            run("pre", "2", "failed", None), run("pre", "3", "completed", 2.2)]  # fmt: skip
    pre, post = group_settings(runs, ["norm"], 0.95)  # ranked by mean: post's diverged seed is the worst
    assert pre.choices == {"norm": "pre"} and [r.seed for r in pre.runs] == ["1", "2", "3"]
    assert pre.results == {"1": 2.0, "3": 2.2} and pre.estimate.mean == pytest.approx(2.1)
    assert post.results == {"1": 2.5, "2": math.inf} and post.fails == 1


def test_a_ladder_with_the_rate_tuned_per_level_says_how_to_judge_it_before_any_seed_is_judged(tmp_path):
    sweep = tmp_path / "sweep"
    number = 0
    for data in ("a", "b"):
        for act, shift in (("gelu", 0.0), ("swiglu", -0.1)):
            for lr, penalty in (("1e-3", 0.05), ("1e-2", 0.0)):
                for seed in ("1", "2", "3"):
                    loss = 2.0 + shift + penalty + 0.001 * int(seed)
                    fake_run(
                        sweep, number, "completed", loss, act=act, data=data, **{"optim.lr": lr}, seed=seed
                    )
                    number += 1
    report = build_report(sweep, baseline="act=gelu", ladder="data")
    assert all(s.rate == 0.01 and s.results == {} for s in report.tuned)
    text = markdown(report)
    assert "not yet judged (rates 0.01 against 0.01, chosen on seeds 1, 2, 3) at a" in text
    assert f"Not yet judged: `python scripts/add_seeds.py {sweep}` runs judging seeds" in text


def test_a_ladder_over_the_rate_judges_each_rate_against_its_own_baseline_with_no_tuning(lr_sweep):
    report = build_report(lr_sweep, baseline="norm=pre", ladder="optim.lr")
    assert not report.lr_varies and report.tuned == []  # each rate is a level, not a choice to tune
    ladder = report.ladder
    assert [rung.level for rung in ladder.rungs] == ["0.001", "0.003"] and ladder.ordered  # numeric order
    for rung in ladder.rungs:
        (post,) = [s for s in rung.settings if s.choices["norm"] == "post"]
        assert rung.baseline.choices == {
            "norm": "pre",
            "norm_type": "layer",
            "act": "gelu",
            "optim.lr": float(rung.level),
        }
        diverged = "1/3 vs 0/3 (exact p = 1)" if rung.level == "0.003" else None  # post at 3e-3, seed 2
        assert (
            post.comparison.tests.failures is None
            if diverged is None
            else post.comparison.tests.failures.describe() == diverged
        )
    low = next(s for s in ladder.rungs[0].settings if s.choices["norm"] == "post")
    assert low.comparison.tests.difference.mean == pytest.approx(
        (0.10 + 0.15 + 0.05) / 3
    )  # post − pre at 1e-3
    (trend,) = ladder.trends
    assert trend.design == {"norm": "post", "norm_type": "layer", "act": "gelu"}
    text = markdown(report)
    assert "## Across levels of optim.lr" in text and "| norm | 0.001 | 0.003 | across levels |" in text
    assert f"along `optim.lr`: **{trend.verdict}**" in text  # the answer first, for a ladder too


def test_a_ladder_over_two_choices_has_no_ends_to_compare_and_bad_axes_are_refused(tmp_path):
    sweep = tmp_path / "sweep"
    number = 0
    for norm in ("pre", "post"):
        for layers in ("4", "12"):
            for warmup, shift in (("100", 0.0), ("0", 0.3)):
                for seed, noise in (("1", 0.0), ("2", 0.01), ("3", -0.02)):
                    choices = {
                        "norm": norm,
                        "model.n_layer": layers,
                        "optim.warmup_steps": warmup,
                        "seed": seed,
                    }
                    fake_run(sweep, number, "completed", 2.0 + shift + noise, **choices)
                    number += 1
    report = build_report(sweep, baseline="optim.warmup_steps=100", ladder="norm,model.n_layer")
    ladder = report.ladder
    assert [rung.level for rung in ladder.rungs] == [
        "pre/4",
        "pre/12",
        "post/4",
        "post/12",
    ] and not ladder.ordered
    assert all(rung.baseline.choices["optim.warmup_steps"] == 100 for rung in ladder.rungs)
    (trend,) = ladder.trends  # no warm-up: +0.3 at every level, on every seed
    assert trend.word is TrendWord.HOLDS and trend.p_value is None  # no change test between unordered levels
    with pytest.raises(ReportError, match="--ladder 'dropout': dropout does not vary in this sweep"):
        build_report(sweep, baseline="optim.warmup_steps=100", ladder="dropout")
    with pytest.raises(ReportError, match="the baseline names norm, the ladder's axis"):
        build_report(sweep, baseline="norm=pre,optim.warmup_steps=100", ladder="norm,model.n_layer")


def test_seeds_added_to_a_ladder_go_to_the_open_level_and_are_judged_against_its_baseline(tmp_path):
    """add_seeds on a ladder (issue 35): post-norm is resolved worse at 2 blocks and open at 4 on the sweep's
    seeds 1-3; a round adds seeds to the open row and its level's baseline only, and the report judges the
    added seeds 4-5 against that level's baseline, then reads the verdict across levels from the answers."""
    sweep = tmp_path / "sweep"
    differences = {"2": [0.30, 0.32, 0.31], "4": [0.05, -0.02, 0.10]}
    number = 0
    for layers, shifts in differences.items():
        for seed, shift in zip(("1", "2", "3"), shifts, strict=True):
            for norm, loss in (("pre", 2.0 + 0.01 * int(seed)), ("post", 2.0 + 0.01 * int(seed) + shift)):
                fake_run(sweep, number, "completed", loss, norm=norm, **{"model.n_layer": layers}, seed=seed)
                number += 1
    report = build_report(sweep, baseline="norm=pre", ladder="model.n_layer")
    assert [s.answer.judgement.verdict.outcome for rung in report.ladder.rungs for s in rung.settings if s.answer] == [
        Outcome.WORSE, Outcome.NOT_RESOLVED,
    ]  # fmt: skip
    (before,) = report.ladder.trends
    assert before.word is TrendWord.CHANGES  # +0.31 -> +0.04 is a change shown; its direction at 4 is not
    open_rows = [s for s in report.family if s.answer is not None and not s.answer.resolved]
    chosen = round_settings(report, open_rows)
    assert [(s.choices["norm"], s.choices["model.n_layer"]) for s in chosen] == [("pre", 4), ("post", 4)]

    # The design add_seeds starts keeps the axis (`--ladder`: these runs' config names none) before a round starts.
    design = start_design(sweep, "norm=pre", 0.01, 0.05, Budget(max_seeds=5), ladder="model.n_layer")
    assert read_design(sweep).ladder == ("model.n_layer",)

    # The round's runs, as add_seeds would have launched them, and the design's second look.
    for seed, shift in (("4", 0.30), ("5", 0.32)):
        for norm, loss in (("pre", 2.0), ("post", 2.0 + shift)):
            fake_run(sweep / ADDED_DIR / f"look1_norm-{norm}", number, "completed", loss, norm=norm,
                     **{"model.n_layer": "4"}, seed=seed)  # fmt: skip
            number += 1
    looks = (("1", "2", "3"), ("1", "2", "3", "4", "5"))
    # Seeds added to the flat family cannot be read level by level: that would regroup the families they were
    # judged in.
    write_design(sweep, replace(design, looks=looks, ladder=()))
    with pytest.raises(
        ReportError, match=r"^--ladder model.n_layer: this sweep's seeds were added without a ladder"
    ):
        build_report(sweep, ladder="model.n_layer")
    write_design(sweep, replace(design, looks=looks))
    report = build_report(sweep)  # judged along the design's axis
    low, high = (
        next(s for s in rung.settings if s.choices["norm"] == "post") for rung in report.ladder.rungs
    )
    assert (
        low.added is None and len(low.comparison.tests.seeds) == 3
    )  # resolved by the sweep: its own verdict
    assert (
        sorted(high.added.tests.seeds) == ["4", "5"] and high.added.judgement.verdict.outcome is Outcome.WORSE
    )
    assert high.added.tests.difference.mean == pytest.approx(
        0.31
    )  # against the 4-block baseline's added seeds
    (after,) = report.ladder.trends
    assert after.word is TrendWord.HOLDS, after.verdict  # worse at both levels, read from the answers
    text, _ = write_report(sweep)
    assert "; added seeds: worse (look 2, 2 added seeds)" in text.split("## Across levels")[1]


def test_a_ladder_over_corpora_reads_losses_in_bits_and_as_gain_over_each_corpuss_unigram(tmp_path):
    """Issue 35: nats are not comparable between vocabularies. Two corpora with their own reference levels:
    the settings table adds bits/char and gain over unigram (bits/char), a table of each corpus's levels, and
    the ladder states each difference in bits/char and as a share of its level's baseline's gain."""
    sweep = tmp_path / "sweep"
    levels = {"verse": {"uniform": 4.0, "unigram": 3.3, "bigram": 2.5},
              "code": {"uniform": 5.1, "unigram": 3.1, "bigram": 2.4}}  # fmt: skip
    number = 0
    for corpus, base in (("verse", 2.3), ("code", 1.6)):
        for seed, noise in (("1", 0.0), ("2", 0.01), ("3", -0.01)):
            for norm, shift in (("pre", 0.0), ("post", 0.1 + noise / 2)):
                fake_run(sweep, number, "completed", base + noise + shift, reference=levels[corpus], norm=norm,
                         data=corpus, seed=seed)  # fmt: skip
                number += 1
    report = build_report(sweep, baseline="norm=pre", ladder="data")
    assert report.reference is None and report.ladder.in_bits
    text = markdown(report)
    code_pre = next(s for s in report.settings if (s.choices["norm"], s.choices["data"]) == ("pre", "code"))
    assert code_pre.estimate.mean == pytest.approx(1.6, abs=1e-4) and code_pre.reference == levels["code"]
    # The settings table reads its mean in bits/char and as its gain over its own corpus's unigram level.
    assert "| 95% CI | bits/char | gain over unigram (bits/char) | fails | no result | why | note |\n" in text
    row = rendered_row(text, report.settings.index(code_pre) + 1, "pre", "code", 3)
    bits, gain = 1.6 / math.log(2), (3.1 - 1.6) / math.log(2)
    assert row is not None and row.split(" | ")[-6:-4] == [f"{bits:.4f}", f"{gain:+.4f}"]
    assert "| data=code | 5.1000 | 3.1000 | 2.4000 | 7.358 | 4.472 | 3.462 |" in text
    # The difference at each corpus, in nats (as judged) and as a share of that corpus's baseline's gain (1.0
    # on verse, 1.5 on code): the same 0.1 nats is 10% of one and 6.7% of the other.
    across = text.split("## Across levels of data")[1]
    post = next(
        line for line in across.splitlines() if line.startswith("| post") and "baseline's gain" in line
    )
    assert "+0.1000 [" in post and "(+10.0% of the baseline's gain)" in post
    assert "(+6.7% of the baseline's gain)" in post


def test_a_new_report_moves_aside_every_figure_the_old_one_was_written_with(lr_sweep):
    write_report(lr_sweep, baseline="norm=pre")  # the rate tuned: lr_sensitivity.png
    assert (lr_sweep / "lr_sensitivity.png").is_file()
    write_report(lr_sweep, baseline="norm=pre", ladder="optim.lr")  # reads differently, draws no such figure
    (kept,) = (lr_sweep / PREVIOUS_REPORTS).iterdir()
    assert {"report.md", "report.json", "report.png", "lr_sensitivity.png"} <= {
        p.name for p in kept.iterdir()
    }
    assert not (lr_sweep / "lr_sensitivity.png").exists()  # not left beside a report that does not name it


def test_two_close_rates_stay_two_settings_and_are_printed_short(tmp_path):
    """An Optuna search's trials at 0.00125029 and 0.00125039: a setting's identity is the typed value, never
    its 4-digit display (they once became one setting whose results were averaged)."""
    sweep = tmp_path / "sweep"
    for number, (lr, loss) in enumerate([("0.00125029", 2.0), ("0.00125039", 2.5)]):
        fake_run(sweep, number, "completed", loss, **{"optim.lr": lr}, seed="1")
    report = build_report(sweep)
    assert sorted(s.choices["optim.lr"] for s in report.settings) == [0.00125029, 0.00125039]
    assert [s.estimate.mean for s in report.settings] == [2.0, 2.5]
    text = markdown(report)
    assert "| 1 | 0.00125029 | 1 | 2.0000 |" in text and "| 2 | 0.00125039 | 1 | 2.5000 |" in text


def test_a_folder_above_sweeps_is_refused_naming_them_and_a_lone_run_is_not_sent_to_a_sweep(tmp_path):
    """Pooled, two sweeps (or a sweep and the seeds added to it, judged under its sequential design) would
    be judged as one experiment (issue 50, point 1): each is reported by its own directory."""
    first, second = tmp_path / "multirun" / "a", tmp_path / "multirun" / "b"
    for sweep in (first, second):
        fake_run(sweep, 0, "completed", 2.0, norm="pre", seed="1")
        (sweep / SWEEP_RECORD).write_text("varies: [norm]\n", encoding="utf-8")
    fake_run(first / "added" / "look2_x", 0, "completed", 2.1, norm="pre", seed="4")
    (first / "added" / "look2_x" / SWEEP_RECORD).write_text("varies: [seed]\n", encoding="utf-8")
    with pytest.raises(ReportError, match=r"holds 2 sweeps \(.*multirun/a, .*multirun/b\); report each"):
        build_report(tmp_path / "multirun")
    shutil.rmtree(second)
    with pytest.raises(ReportError, match=r"holds 1 sweep \(.*multirun/a\)"):  # its added seeds are its own
        build_report(tmp_path / "multirun")
    assert len(build_report(first).runs) == 2
    with pytest.raises(ReportError, match=r"is one run of the sweep .*: report the sweep"):
        build_report(next(first.glob("0_*")))
    lone = fake_run(tmp_path / "runs", 0, "completed", 2.0, norm="pre")
    with pytest.raises(ReportError, match="is a single run, not a sweep: a report compares settings"):
        build_report(lone)


def test_after_added_seeds_every_part_of_the_report_states_the_same_comparison(tmp_path):
    """Issue 50, point 2: after a round of add_seeds, the figure draws the interval the Answer states (the
    added seeds', where the sweep's own left the row open), the open verdict names the look as add_seeds
    counts it, and what resolving would take counts added seeds against the design's horizon."""
    sweep = tmp_path / "sweep"
    number = 0
    for seed, shift in (("1", 0.05), ("2", -0.04), ("3", 0.03), ("4", 0.02), ("5", -0.03)):
        for norm, loss in (("pre", 2.0 + 0.01 * int(seed)), ("post", 2.0 + 0.01 * int(seed) + shift)):
            folder = sweep if int(seed) <= 3 else sweep / ADDED_DIR / "look1"
            fake_run(folder, number, "completed", loss, norm=norm, seed=seed)
            number += 1
    design = replace(
        start_design(sweep, "norm=pre", 0.01, 0.05, Budget(max_seeds=8)),
        looks=(("1", "2", "3"), ("1", "2", "3", "4", "5")),
    )
    write_design(sweep, design)
    report = build_report(sweep)
    (post,) = [s for s in report.family if s.choices["norm"] == "post"]
    assert post.comparison.judgement.verdict.outcome is Outcome.NOT_RESOLVED and post.answer is post.added
    assert str(post.added.judgement.verdict) == "not resolved at look 2 (2 added seeds)"
    (row,) = [row for row in forest_rows(report) if not row.baseline]
    d = post.added.tests.difference
    assert row.label.endswith("(added seeds)") and (row.mean, row.low, row.high) == (d.mean, d.low, d.high)
    text = markdown(report)
    answer = text.split("## Answer")[1].split("\n\n")[1]
    assert f"95% CI {fmt_interval(d, signed=True)}, 2 added seeds" in answer
    (size,) = report.sizing.rows
    assert size.added and size.has == 2 and size.horizon == 5
    assert size.more == min(size.needed - 2, 3)
    assert "- `norm=pre norm_type=layer act=gelu`" not in text  # the baseline is not an open row
    assert f": {size.needed} added seeds" in text


def test_a_ladder_tuned_then_judged_names_its_rates_as_its_tuning_seeds_chose_them(tmp_path):
    """A ladder over a tuned sweep (the optimizer ladder) says each design is at the rate its tuning seeds
    chose per level; only a report judged by the rule before (report.json format <= 2) says cross-fitted."""
    sweep = tmp_path / "sweep"
    number = 0
    for norm in ("pre", "post"):
        for optim, gain in (("adamw", 0.0), ("muon", -0.1)):
            for lr, shift in (("1e-3", 0.02), ("3e-3", 0.0)):
                for seed in ("1", "2", "3"):
                    loss = 2.0 + gain + shift + 0.01 * int(seed)
                    fake_run(sweep, number, "completed", loss, norm=norm, optim=optim, seed=seed,
                             **{"optim.lr": lr})  # fmt: skip
                    number += 1
    report = build_report(sweep, baseline="optim=adamw", ladder="norm")
    across = markdown(report).split("## Across levels of norm")[1]
    assert "each at its own rate its tuning seeds chose per level" in across
    assert "cross-fitted" not in across


def test_an_added_row_left_open_still_says_how_often_each_side_failed(tmp_path):
    """The failures of the added seeds are a finding of their own: a row the looks leave open says them too
    (it dropped them, and read `not resolved` as if neither side had failed)."""
    sweep = tmp_path / "sweep"
    number = 0
    for seed, shift in (("1", 0.05), ("2", -0.02), ("3", 0.10)):
        for norm, loss in (("pre", 2.0 + 0.01 * int(seed)), ("post", 2.0 + 0.01 * int(seed) + shift)):
            fake_run(sweep, number, "completed", loss, norm=norm, seed=seed)
            number += 1
    design = start_design(sweep, "norm=pre", 0.01, 0.05, Budget(max_seeds=6))
    for seed, post in (("4", None), ("5", 2.1), ("6", 1.9)):  # post fails on seed 4, the rest is noise
        for norm, loss in (("pre", 2.0), ("post", post)):
            fake_run(sweep / ADDED_DIR / f"look1_norm-{norm}", number, "completed" if loss else "diverged", loss,
                     norm=norm, seed=seed)  # fmt: skip
            number += 1
    write_design(sweep, replace(design, looks=(("1", "2", "3"), ("1", "2", "3", "4", "5", "6"))))
    (post,) = [s for s in build_report(sweep).family if s.choices["norm"] == "post"]
    assert post.added.judgement.verdict.outcome is Outcome.NOT_RESOLVED
    assert (
        str(post.added.judgement.verdict)
        == "not resolved at look 2 (3 added seeds); fails 1/3 vs 0/3 (exact p = 1)"
    )
