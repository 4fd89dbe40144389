"""The verdicts' error rates and their agreement with the libraries: Holm against statsmodels' multipletests,
TOST against ttost_paired and a hand computation, seeds-needed against TTestPower and scipy's noncentral t,
and seeded simulations with a known truth (docs/sweeps.md quotes their figures)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import rate_not_above
from scipy.stats import nct, ttest_rel
from scipy.stats import t as student_t
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from tinylm.analysis.estimates import MIN_EFFECT, estimate, paired_tests, seeds_needed
from tinylm.analysis.grouping import LR, Rules, Setting, tuned_settings
from tinylm.analysis.grouping import tests_against as row_tests
from tinylm.analysis.sequential_design import T_PATHS, Look, first_verdicts, sequential_plan, spent, t_levels
from tinylm.analysis.verdicts import ALPHA, Outcome, judge

# The outcomes a false claim states; counted by outcome, so `better, but by less than δ` and the divergence
# verdicts count too.
CLAIMS = (Outcome.BETTER, Outcome.WORSE)


def sweep_values(
    rng: np.random.Generator, settings: int, seeds: int, shift: float = 0.0, noise: float = 0.05
) -> list[dict]:
    """Final losses of `settings` settings over `seeds` seeds: a shared effect per seed (sd 0.1, as the
    seeds of a real sweep share their data order) and each run's own noise (sd `noise`)."""
    seed_effect = rng.normal(0, 0.1, seeds)
    return [
        {str(s): 2.0 + seed_effect[s] + rng.normal(0, noise) + (shift if i else 0.0) for s in range(seeds)}
        for i in range(settings)
    ]


def family(values: list[dict], min_effect: float = 0.01, seeds: int | None = None) -> list:
    """The tests of every setting against the first, on the first `seeds` seeds."""
    keep = [str(s) for s in range(seeds)] if seeds else None
    cut = [{k: v for k, v in d.items() if keep is None or k in keep} for d in values]
    return [paired_tests(d, cut[0], min_effect) for d in cut[1:]]


def test_holm_adjusted_p_values_match_statsmodels_and_the_raw_ones_scipy():
    rng = np.random.default_rng(0)
    values = sweep_values(rng, settings=8, seeds=5, shift=0.02)
    judged = judge(family(values))
    raw = [c.tests.p_value for c in judged]
    for c, d in zip(judged, values[1:], strict=True):
        seeds = sorted(d)
        expected = ttest_rel([d[s] for s in seeds], [values[0][s] for s in seeds]).pvalue
        assert c.tests.p_value == pytest.approx(expected, rel=1e-12)
    holm = multipletests(raw, method="holm")[1]
    assert max(abs(c.judgement.p_adjusted - h) for c, h in zip(judged, holm, strict=True)) < 1e-12
    assert len(set(raw)) == 7 and any(
        c.judgement.p_adjusted > c.tests.p_value for c in judged
    )  # the adjustment did act


def test_tost_p_values_match_statsmodels_and_the_two_one_sided_t_tests():
    rng = np.random.default_rng(1)
    for _ in range(20):
        mine, theirs = (rng.normal(2.0, 0.05, 6) for _ in range(2))
        delta = float(rng.uniform(0.005, 0.1))
        c = paired_tests(dict(enumerate(mine)), dict(enumerate(theirs)), min_effect=delta)
        assert c.p_equivalence == pytest.approx(ttost_paired(mine, theirs, -delta, delta)[0], abs=1e-10)
        d = mine - theirs
        se = d.std(ddof=1) / math.sqrt(len(d))
        by_hand = max(student_t.sf((d.mean() + delta) / se, 5), student_t.cdf((d.mean() - delta) / se, 5))
        assert c.p_equivalence == pytest.approx(by_hand, abs=1e-10)


@pytest.mark.parametrize("effect_size", [0.3, 0.8, 1.1, 2.0])
@pytest.mark.parametrize("level", [0.05, 0.05 / 7])
def test_seeds_needed_agree_with_statsmodels_and_give_the_power_scipy_computes(effect_size, level):
    n = seeds_needed(effect_size, level)
    reference = TTestPower().solve_power(effect_size=effect_size, alpha=level, power=0.8)
    assert abs(n - reference) <= 1

    def power(seeds: int) -> float:  # two-sided paired t, from the noncentral t distribution
        df, shift = seeds - 1, effect_size * math.sqrt(seeds)
        critical = student_t.ppf(1 - level / 2, df)
        return nct.sf(critical, df, shift) + nct.cdf(-critical, df, shift)

    assert power(n) >= 0.8 and (n == 2 or power(n - 1) < 0.8)


def test_a_real_gap_needs_the_seeds_the_issue_estimated():
    # SwiGLU - GELU at 3e-3 (docs/results.md): paired sd 0.018; a 0.02 gap at 80% power needs ~9 seeds, ~14
    # under Holm over 7 rows.
    assert seeds_needed(0.02 / 0.018, 0.05) in (8, 9)
    assert seeds_needed(0.02 / 0.018, 0.05 / 7) in (13, 14)


# Each simulation runs 250 or 300 replicates in the default run, its rate checked against α within its Monte
# Carlo error; -m slow runs the 2000 or 1000 replicates docs/sweeps.md quotes, against a fixed bound.
@pytest.mark.parametrize("sweeps", [250, pytest.param(2000, marks=pytest.mark.slow)])
def test_eight_identical_settings_give_a_false_verdict_in_at_most_5_percent_of_sweeps(sweeps):
    rng = np.random.default_rng(2)
    holm_false, unadjusted_false = 0, 0
    for _ in range(sweeps):
        judged = judge(family(sweep_values(rng, settings=8, seeds=3)), with_power=False)
        holm_false += any(c.judgement.verdict.outcome in CLAIMS for c in judged)
        unadjusted_false += any(c.tests.p_value <= 0.05 for c in judged)
    assert holm_false / sweeps <= 0.055 if sweeps >= 2000 else rate_not_above(holm_false, sweeps, 0.05)
    # Judged one row at a time, the same sweeps would make a false claim far more often (the issue's 19-25%).
    assert unadjusted_false / sweeps > 0.15


@pytest.mark.parametrize("sweeps", [300, pytest.param(2000, marks=pytest.mark.slow)])
def test_tuning_on_some_seeds_and_judging_on_others_is_unbiased_between_a_broad_and_a_sharp_optimum(sweeps):
    """Five rates, sd 0.05 per run: a setting whose optimum is broad (three rates at the best loss) against one
    with a single best rate (its neighbours 3σ worse), both reaching 2.0 at best; each rate chosen on 3 tuning
    seeds, the difference judged on 4 fresh seeds at the chosen rates (`tuned_settings`, as the report does).
    The truth is no difference."""
    rng = np.random.default_rng(3)
    curves = {"broad": [2.3, 2.0, 2.0, 2.0, 2.3], "sharp": [2.3, 2.15, 2.0, 2.15, 2.3]}
    tuning, judging, sigma = ["1", "2", "3"], ["4", "5", "6", "7"], 0.05
    rules = Rules(0.95, 0.05, 0.01, lr_varies=True)
    differences, naive, false_claims = [], [], 0
    for _ in range(sweeps):
        seed_effect = {s: rng.normal(0, 0.1) for s in tuning + judging}
        settings = [
            Setting({"act": name, LR: rate}, [], {s: mean + seed_effect[s] + rng.normal(0, sigma) for s in tuning + judging})
            for name, curve in curves.items()
            for rate, mean in enumerate(curve)
        ]  # fmt: skip
        broad, sharp = sorted(tuned_settings(settings, ["act"], 0.95, tuning), key=lambda t: t.choices["act"])
        [c] = judge([row_tests(broad, sharp, rules)], with_power=False)
        differences.append(c.tests.difference.mean)
        false_claims += c.judgement.verdict.outcome in CLAIMS
        best = [min(np.mean([v for k, v in t.results.items() if k in tuning]) for t in settings if t.choices["act"] == name)
                for name in curves]  # fmt: skip
        naive.append(best[0] - best[1])  # the best mean over seeds, chosen on the seeds it is judged on
    assert abs(np.mean(differences)) < 0.01
    assert rate_not_above(false_claims, sweeps, 0.05)
    # Choosing on the judged seeds flatters the broad optimum by about 0.85 σ/√3 (the expected best of three
    # equally good rates): the bias judging on other seeds removes.
    assert np.mean(naive) < -0.015


def test_the_t_boundaries_spend_each_increment_on_independent_paths():
    """Eight looks at 2, 4, ..., 16 seeds of 16: paired t tests on fresh null paths (another generator than the
    one the boundaries were calibrated on) stop at each look, and at none before, as often as the spending
    function's increment there, and at some look as often as α; the first look's level is its increment."""
    counts = tuple(range(2, 17, 2))
    levels = t_levels(counts, 16, ALPHA)
    increments = np.diff([0.0, *(spent(n / 16, ALPHA) for n in counts)])
    assert levels[0] == pytest.approx(increments[0], rel=1e-9)
    assert t_levels((16,), 16, ALPHA) == pytest.approx((0.05,), rel=1e-9)
    assert list(levels) == sorted(levels) and levels[-1] < 0.05
    paths = 200_000
    x = np.random.default_rng(8).standard_normal((paths, 16))
    p = np.column_stack([ttest_rel(x[:, :n], np.zeros((paths, n)), axis=1).pvalue for n in counts])
    crossed = p <= np.array(levels)
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    for look, increment in enumerate(increments):
        observed = float(np.mean(first == look))
        # Both Monte Carlo errors: this test's paths and the calibration's (T_PATHS).
        error = math.sqrt(increment * (1 / paths + 1 / T_PATHS))
        assert abs(observed - increment) <= 4 * error + 1e-6, (look, observed, increment)
    overall = float(np.mean(first >= 0))
    assert abs(overall - 0.05) <= 4 * math.sqrt(0.05 * 0.95 * (1 / paths + 1 / T_PATHS)), overall


def test_a_look_with_too_few_seeds_judges_nothing_and_spends_nothing():
    plan = sequential_plan([1, 1, 4, 4, 8], max_seeds=8)
    assert plan[0] is None and plan[1] is None and plan[3] is None
    assert plan[2] == Look((4,), 8) and plan[4] == Look((4, 8), 8)
    # The first look that judges: its whole share.
    assert plan[2].level(0.05) == pytest.approx(spent(0.5, 0.05))


def sequential_sweeps(rng: np.random.Generator, sweeps: int, shift: float) -> tuple[list, list]:
    """The issue's case: a family of 3 against a baseline, paired sd 0.05, looks every 2 seeds up to 16.
    Per sweep, each row's sequential outcome and its outcome on all 16 seeds at once."""
    counts = list(range(2, 17, 2))
    plan = sequential_plan(counts, 16)
    sequential, fixed = [], []
    for _ in range(sweeps):
        values = sweep_values(rng, settings=4, seeds=16, shift=shift, noise=0.05 / math.sqrt(2))
        looks = [family(values, seeds=n) for n in counts]
        sequential.append(
            [
                found[1].judgement.verdict.outcome if found else Outcome.NOT_RESOLVED
                for found in first_verdicts(looks, plan, MIN_EFFECT, ALPHA)
            ]
        )
        fixed.append([c.judgement.verdict.outcome for c in judge(looks[-1], with_power=False)])
    return sequential, fixed


@pytest.mark.parametrize("sweeps", [100, pytest.param(1000, marks=pytest.mark.slow)])
def test_the_sequential_design_keeps_the_family_wise_error_over_its_looks(sweeps):
    sequential, _ = sequential_sweeps(np.random.default_rng(4), sweeps, shift=0.0)
    false = sum(any(v in CLAIMS for v in row) for row in sequential)
    assert false / sweeps <= 0.055 if sweeps >= 1000 else rate_not_above(false, sweeps, 0.05)


@pytest.mark.parametrize("sweeps", [100, pytest.param(3000, marks=pytest.mark.slow)])
def test_the_sequential_design_has_the_power_of_the_fixed_one_within_3_points(sweeps):
    """A true difference of 0.02 in every row (the baseline better): each row found `worse` by the design as
    often as by 16 seeds judged at once, within 3 points, on the same sweeps (measured: 2.6 points below at
    3,000 sweeps; the z boundaries before came within 2, on an error 10% above α: docs/sweeps.md). That holds
    at this case's power, near 20%: the gap grows with the power (4.7 points at 0.04, near 80%:
    benchmarks/word_rates.py), so this is no bound for every case. The fast
    version: not below the fixed design by more than 3 points beyond its Monte Carlo error (a one-sided
    paired test at 1%)."""
    sequential, fixed = sequential_sweeps(np.random.default_rng(9), sweeps, shift=0.02)
    found = np.array([[v is Outcome.WORSE for v in row] for row in sequential], dtype=float).ravel()
    found_fixed = np.array([[v is Outcome.WORSE for v in row] for row in fixed], dtype=float).ravel()
    assert found_fixed.mean() > 0.1  # the case has the power the issue measured (about 20%)
    gap = found - found_fixed
    if sweeps >= 3000:
        assert gap.mean() >= -0.03
    else:
        assert (gap.mean() + 0.03) / (gap.std(ddof=1) / math.sqrt(len(gap))) > -2.33


def test_the_sequential_design_stops_early_on_a_large_difference():
    rng = np.random.default_rng(5)
    counts = [3, 5, 7, 9, 11]
    values = sweep_values(rng, settings=2, seeds=11, shift=0.2)  # 4 run-noise sds
    looks = [family(values, seeds=n) for n in counts]
    found = first_verdicts(looks, sequential_plan(counts, 11), MIN_EFFECT, ALPHA)[0]
    assert (
        found is not None
        and found[1].judgement.verdict.outcome is Outcome.WORSE
        and found[0] < len(counts) - 1
    )


def test_the_evaluation_set_error_of_a_paired_difference_is_that_of_the_window_differences():
    rng = np.random.default_rng(6)
    shared = rng.normal(2.0, 0.3, 1000)  # windows differ in difficulty; both runs see the same ones
    mine = {"1": list(shared + rng.normal(-0.01, 0.02, 1000)), "2": list(shared + rng.normal(0, 0.02, 1000))}
    theirs = {"1": list(shared), "2": list(shared)}
    c = paired_tests({"1": 1.99, "2": 2.0}, {"1": 2.0, "2": 2.01}, window_losses=(mine, theirs))
    per_seed = [np.std(np.subtract(mine[s], theirs[s]), ddof=1) / math.sqrt(1000) for s in ("1", "2")]
    assert c.eval_se == pytest.approx(math.sqrt(sum(v**2 for v in per_seed)) / 2, rel=1e-12)
    assert c.eval_se < 0.3 / math.sqrt(1000) / 5  # pairing removes the windows' own spread
    assert estimate([1.0, 2.0]).n == 2
