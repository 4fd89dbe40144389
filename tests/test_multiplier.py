"""The compute multiplier's rules on constructed curves, and its coverage through the benchmark's simulation."""

import argparse
import math
import sys
from pathlib import Path

import pytest

from tinylm.analysis.multiplier import Cost, Reading, first_reached, multiplier

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import multiplier_rates


def power_law(
    multiple: float, offset: float = 0.0, steps: int = 300, every: int = 15
) -> list[tuple[float, float]]:
    """A falling validation curve that reaches any loss in `multiple`× the steps `multiple=1` takes."""
    return [(float(s), 1.5 + 40.0 * (s / multiple) ** -0.86 + offset) for s in range(every, steps + 1, every)]


def test_first_reached_interpolates_between_the_validations_around_the_crossing():
    curve = [(10.0, 3.0), (20.0, 2.0), (30.0, 1.0)]
    assert first_reached(curve, 2.5) == pytest.approx(15.0)
    assert first_reached(curve, 2.0) == pytest.approx(20.0)
    assert first_reached(curve, 3.5) == 10.0  # the first validation is already below
    assert first_reached(curve, 0.5) is None


def test_first_reached_reads_the_first_crossing_not_a_later_one():
    zigzag = [(10.0, 3.0), (20.0, 1.9), (30.0, 2.2), (40.0, 1.5)]
    assert first_reached(zigzag, 2.0) == pytest.approx(10 + 10 * (1.0 / 1.1))


def test_a_design_twice_as_fast_needs_half_the_steps_on_every_seed():
    base = {seed: power_law(1.0, 0.01 * seed) for seed in range(4)}
    fast = {seed: power_law(0.5, 0.01 * seed) for seed in range(4)}
    found = multiplier(fast, base)
    assert found.ratio.mean == pytest.approx(0.5, rel=0.02)
    assert found.reading is Reading.LESS
    assert found.never_reached == ()


def test_a_design_that_never_reaches_the_baselines_loss_is_counted_apart_and_costs_more():
    base = {seed: power_law(1.0) for seed in range(3)}
    slow = {seed: power_law(1.4) for seed in range(3)}
    found = multiplier(slow, base)
    assert found.never_reached == ("0", "1", "2")
    # The loss both reached is the slow design's own final loss, which the baseline reached earlier.
    assert all(r.level == pytest.approx(slow[0][-1][1]) for r in found.reaches.values())
    assert found.ratio.mean == pytest.approx(1.4, rel=0.03)
    assert found.reading is Reading.MORE


def test_identical_curves_give_one_and_no_word():
    base = {seed: power_law(1.0, 0.01 * seed) for seed in range(3)}
    found = multiplier(base, base)
    assert found.ratio.mean == pytest.approx(1.0)
    assert found.reading is Reading.NOT_RESOLVED  # an interval of width 0 at 1 excludes nothing


def test_failed_and_unpaired_seeds_are_left_out():
    base = {0: power_law(1.0), 1: power_law(1.0), 2: power_law(1.0)}
    design = {0: power_law(1.5), 1: [*power_law(1.5)[:-1], (300.0, math.inf)], 3: power_law(1.5)}
    found = multiplier(design, base, Cost.TIME)
    assert list(found.reaches) == ["0"]
    assert found.ratio.n == 1 and not found.ratio.has_interval
    assert found.reading is Reading.NOT_RESOLVED and found.cost is Cost.TIME


def test_no_seed_in_common_has_no_ratio():
    found = multiplier({1: power_law(1.0)}, {2: power_law(1.0)})
    assert found.ratio is None and found.reading is Reading.NOT_RESOLVED


@pytest.mark.parametrize("true", [0.8, 1.0])
def test_the_interval_covers_the_true_multiplier_near_its_level(true):
    """A smaller run of benchmarks/multiplier_rates.py (docs/sweeps.md has the 2,000-replicate figures)."""
    args = argparse.Namespace(replicates=400, seed_sd=0.01, val_sd=0.005, rho=0.5, rng_seed=3)
    import numpy as np

    row = multiplier_rates.case(true, 4, args, np.random.default_rng(3))
    assert 0.91 <= row["coverage"] <= 0.98
    assert row["false_less"] <= 0.05 and row["false_more"] <= 0.05


def _setting(choices: dict, multiple: float, seconds_a_step: float, seeds: range = range(3)):
    """A setting of real `RunSummary` values whose curves are `power_law(multiple)` with a training clock."""
    from tinylm.analysis.grouping import Setting
    from tinylm.analysis.runs import RunSummary

    runs = []
    for seed in seeds:
        curve = [(int(step), loss, 0.0) for step, loss in power_law(multiple, 0.01 * seed)]
        clock = [(step, step * seconds_a_step) for step in range(1, 301)]
        name = f"{choices}-{seed}"
        runs.append(
            RunSummary(
                Path(name), name, "completed", dict(choices), str(seed), val_curve=curve, train_seconds=clock
            )
        )
    return Setting(dict(choices), runs, {run.seed: run.val_curve[-1][1] for run in runs})


def test_a_comparison_is_read_by_steps_and_by_training_time_from_its_runs():
    from tinylm.analysis.multiplier import compare_costs

    base = _setting({"act": "gelu"}, 1.0, seconds_a_step=0.10)
    swiglu = _setting({"act": "swiglu"}, 0.8, seconds_a_step=0.11)  # fewer steps, each 10% dearer
    costs = compare_costs(swiglu, base)
    assert costs.design == {"act": "swiglu"}
    assert costs.steps.ratio.mean == pytest.approx(0.8, rel=0.02) and costs.steps.reading is Reading.LESS
    assert costs.time.ratio.mean == pytest.approx(0.88, rel=0.02) and costs.time.cost is Cost.TIME


def test_a_failed_seed_has_no_curve_to_compare():
    from tinylm.analysis.multiplier import seed_curves

    swiglu = _setting({"act": "swiglu"}, 0.8, 0.1)
    failed = type(swiglu)(swiglu.choices, swiglu.runs, {**swiglu.results, "1": math.inf})
    assert sorted(seed_curves(failed, Cost.STEPS)) == ["0", "2"]


def test_the_answer_states_the_multiplier_with_its_interval_and_the_seeds_apart():
    from tinylm.analysis.multiplier import compare_costs
    from tinylm.analysis.present.render import _multiplier_clause

    base = _setting({"act": "gelu"}, 1.0, 0.1)
    slow = _setting({"act": "relu"}, 1.25, 0.1)
    clause = _multiplier_clause(compare_costs(slow, base))
    assert clause.startswith("the loss both reached in **1.25× [")
    assert "the steps** (more)" in clause and "the training time (more)" in clause and "3 seeds" in clause
    assert "on 3 of 3 it never came down to the baseline's final loss" in clause


def test_a_design_whose_multiplier_is_the_same_at_both_budgets_holds_and_one_that_reverses_flips():
    from tinylm.analysis.ladder import Ladder, Rung, TrendWord
    from tinylm.analysis.multiplier import compared_costs, costs_across

    rungs, rows = [], []
    for budget, (swiglu, relu) in {"300": (0.8, 0.8), "600": (0.8, 1.25)}.items():
        at = {"trainer.max_steps": int(budget)}
        base = _setting({"act": "gelu", **at}, 1.0, 0.1)
        designs = [_setting({"act": "swiglu", **at}, swiglu, 0.1), _setting({"act": "relu", **at}, relu, 0.1)]
        rungs.append(Rung(budget, None, int(budget), base, [base, *designs]))
        rows += [(s, base) for s in designs]
    ladder = Ladder(["trainer.max_steps"], ["act"], rungs, [])
    trends = costs_across(ladder, compared_costs(rows, 0.95), alpha=0.05)
    words = {t.design["act"]: t.word for t in trends}
    assert words == {"swiglu": TrendWord.HOLDS, "relu": TrendWord.FLIPS}
    assert all(t.levels == ("300", "600") for t in trends)


def test_on_unordered_levels_each_levels_multiplier_is_shown_and_only_words_that_need_no_order_are_said():
    """A ladder over placements (no first or last level): each level's multiplier is reported, with no change
    test; the same reading at every level `holds`, opposite readings `flip`."""
    from tinylm.analysis.ladder import Ladder, Rung, TrendWord
    from tinylm.analysis.multiplier import Reading, compared_costs, costs_across

    rungs, rows = [], []
    for norm, (swiglu, relu) in {"post": (0.8, 0.8), "pre": (0.8, 1.25)}.items():
        base = _setting({"act": "gelu", "norm": norm}, 1.0, 0.1)
        designs = [
            _setting({"act": "swiglu", "norm": norm}, swiglu, 0.1),
            _setting({"act": "relu", "norm": norm}, relu, 0.1),
        ]
        rungs.append(Rung(norm, None, None, base, [base, *designs]))
        rows += [(s, base) for s in designs]
    ladder = Ladder(["norm"], ["act"], rungs, [])
    assert not ladder.ordered
    trends = {t.design["act"]: t for t in costs_across(ladder, compared_costs(rows, 0.95), alpha=0.05)}
    assert {act: t.word for act, t in trends.items()} == {"swiglu": TrendWord.HOLDS, "relu": TrendWord.FLIPS}
    assert all(t.p_value is None and t.change is None for t in trends.values())
    assert trends["swiglu"].readings == (Reading.LESS, Reading.LESS)
    assert trends["relu"].levels == ("post", "pre")
