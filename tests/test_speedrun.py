"""The speedrun (docs/performance.md): its preset keeps what the rule fixes, and benchmarks/speedrun.py counts a
seed that never reached the target apart from the times it compares."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from conftest import REPO, TINYSHAKESPEARE
from hydra import compose, initialize_config_module
from scipy import stats

sys.path.insert(0, str(REPO / "benchmarks"))
from speedrun import EVERY_RUN, RECIPES, TARGET, Result, compile_cache, summary, train, warmup_phrase


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


def test_each_recipe_compiles_into_its_own_cache_cold_until_a_run_fills_it(tmp_path):
    env, cache = compile_cache(tmp_path, "speedrun")
    assert cache == "cold" and env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "speedrun")
    assert env["TRITON_CACHE_DIR"].startswith(env["TORCHINDUCTOR_CACHE_DIR"])
    (tmp_path / "speedrun").mkdir()
    assert compile_cache(tmp_path, "speedrun")[1] == "cold"  # an empty directory holds nothing compiled
    (tmp_path / "speedrun" / "fxgraph").mkdir()
    assert compile_cache(tmp_path, "speedrun")[1] == "warm"
    assert compile_cache(tmp_path, "other")[1] == "cold"


def test_the_summary_reports_a_compiled_recipes_warm_up_cold_and_warm_apart_from_its_time():
    eager = [run("a", 1, 80.0), run("a", 2, 84.0)]
    compiled = [
        replace(run("b", 1, 20.0), warmup_s=40.0, cache="cold"),
        replace(run("b", 2, 21.0), warmup_s=9.0, cache="warm"),
        replace(run("b", 3, 19.0), warmup_s=11.0, cache="warm"),
    ]
    a, b = summary([*eager, *compiled], ["a", "b"])
    assert "warmup_s" not in a
    assert b["warmup_s"] == {"cold": [40.0], "warm": [9.0, 11.0]} and b["mean_s"] == 20.0
    assert warmup_phrase(b["warmup_s"]) == "compile warm-up 40.0 s cold (1 run), 10.0 s warm (mean of 2)"


@pytest.mark.slow  # two compiled runs in fresh processes
def test_a_compiled_recipes_runs_record_their_warm_up_the_first_cold_the_next_warm(tmp_path):
    model = ["model.n_layer=1", "model.n_head=1", "model.d_model=16", "model.block_size=32"]
    tiny = [
        *model,
        "data.batch_size=8",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "compile=true",
    ]
    cache = tmp_path / "inductor"
    first = train("tiny", tiny, 1, str(TINYSHAKESPEARE), tmp_path, threads=1, inductor_cache=cache)
    second = train("tiny", tiny, 2, str(TINYSHAKESPEARE), tmp_path, threads=1, inductor_cache=cache)
    assert (first.cache, second.cache) == ("cold", "warm")
    assert first.warmup_s > 0 and second.warmup_s > 0
    assert any((cache / "tiny").iterdir())
