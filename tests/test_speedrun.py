"""The speedrun (docs/performance.md): its preset keeps what the rule fixes, and benchmarks/speedrun.py counts a
seed that never reached the target apart from the times it compares."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, TINYSHAKESPEARE
from hydra import compose, initialize_config_module
from scipy import stats

sys.path.insert(0, str(REPO / "benchmarks"))
from speedrun import EVERY_RUN, RECIPES, TARGET, Result, summary


def composed(*overrides: str):
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_recipe_validates_on_the_fixed_data_split_and_context_often_enough(recipe):
    """Fixed by the rule: Tiny Shakespeare, its last 10% for validation, every window of 64 characters, and a
    check of the target at least every 5% of the steps the recipe may take."""
    cfg = composed(
        *RECIPES[recipe].split(),
        *(o for o in EVERY_RUN if not o.startswith("+")),
        f"data.path={TINYSHAKESPEARE}",
    )
    assert cfg.data.source == "tinyshakespeare" and cfg.data.val_fraction == 0.1
    assert cfg.model.block_size == 64 and cfg.data.val_windows is None
    assert list(cfg.callbacks.targets.levels) == [TARGET]
    steps = cfg.optim.decay_steps if recipe == "nanogpt_baby" else cfg.trainer.max_steps
    assert cfg.trainer.val_check_interval <= 0.05 * steps


def run(recipe: str, seed: int, time_s: float | None, step: int = 100) -> Result:
    return Result(recipe, seed, time_s is not None, step if time_s else None, time_s, step, "32-true")


def test_the_summary_counts_failures_apart_and_compares_each_recipe_with_the_one_before():
    base = [run("a", 1, 80.0), run("a", 2, 84.0), run("a", 3, 82.0), run("a", 4, None)]
    fast = [run("b", 1, 20.0), run("b", 2, 21.0), run("b", 3, 19.0), run("b", 4, 22.0)]
    a, b = summary([*base, *fast], ["a", "b"])
    assert (a["runs"], a["failures"], a["mean_s"]) == (4, 1, 82.0)
    assert a["low_s"] < 82.0 < a["high_s"] and "ratio" not in a
    assert b["failures"] == 0 and b["ratio"] == pytest.approx(20.5 / 82.0)
    expected = stats.ttest_ind(
        [20.0, 21.0, 19.0, 22.0], [80.0, 84.0, 82.0], equal_var=False, alternative="less"
    )
    assert b["p_faster"] == pytest.approx(expected.pvalue) and b["p_faster"] < 0.01
