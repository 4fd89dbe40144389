"""Does a ranking transfer? `experiment=corpus_ladder` and `experiment=length_ladder` composed as shipped, then
run scaled down (two corpora or two lengths, a few steps) and reported level by level, with a round of
add_seeds on the corpus ladder (issue 35). The rules behind the words across levels are tested on made-up
numbers in tests/test_scale.py and tests/test_stats.py."""

from __future__ import annotations

import itertools
import json
import sys

import matplotlib.image
import pytest
from conftest import REPO, SHRINK, run_sweep
from hydra import compose, initialize_config_module
from script_runner import run_script_in_process

from tinylm.analysis.present.write_report import write_report
from tinylm.analysis.report import build_report
from tinylm.layout import DESIGN_FILE, LADDER_PNG
from tinylm.seed_rounds.plan import ADDED_DIR, Budget
from tinylm.seed_rounds.rounds import add_seeds


@pytest.mark.parametrize(
    ("preset", "axis", "levels", "runs"),
    [
        ("corpus_ladder", "data", ["shakespeare", "python_stdlib", "python_docs"], 72),
        ("length_ladder", "trainer.max_steps", ["600", "2400"], 48),
    ],
)
def test_each_transfer_preset_crosses_the_four_designs_with_its_levels_rates_and_three_seeds(
    preset, axis, levels, runs
):
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={preset}"], return_hydra_config=True)
    assert cfg.ladder == axis and cfg.baseline == "norm=pre,act=gelu"
    grid = {key: str(values).split(",") for key, values in cfg.hydra.sweeper.params.items()}
    assert grid[axis] == levels
    assert grid["norm"] == ["pre", "post"] and grid["act"] == ["gelu", "swiglu"]
    assert len(grid["optim.lr"]) >= 2 and len(grid["seed"]) >= 3  # each level's rate cross-fitted
    assert len(list(itertools.product(*grid.values()))) == runs


def _shrunk(*overrides: str) -> list[str]:
    return [o for o in SHRINK if not o.startswith("trainer.max_steps")] + list(overrides)


@pytest.mark.slow
def test_a_scaled_down_corpus_ladder_reads_each_corpus_in_bits_and_add_seeds_goes_to_its_open_levels(
    tmp_path,
):
    """Two of the preset's corpora (offline, from the interpreter), SwiGLU vs GELU (too close to resolve in
    6 steps), one rate, 3 seeds; then one round of add_seeds: its seeds go to the open comparisons of each
    level and their baselines."""
    sweep = tmp_path / "sweep"  # on the preset's own corpora, not the tests' small one
    result = run_script_in_process(
        "train.py", "-m", *_shrunk("experiment=corpus_ladder", "data=python_docs,python_stdlib", "norm=pre",
                                   "act=gelu,swiglu", "optim.lr=1e-3", "seed=1,2,3", "trainer.max_steps=6",
                                   f"hydra.sweep.dir={sweep}"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    text, written = write_report(sweep)
    assert "## Across levels of data" in text and sweep / LADDER_PNG in written
    assert matplotlib.image.imread(sweep / LADDER_PNG).shape[0] > 100
    # Each corpus its own levels: the settings table reads means in bits/char and gains over each unigram.
    assert "| 95% CI | bits/char | gain over unigram (bits/char) | fails | no result | why | note |\n" in text
    assert "| data=python_docs |" in text and "| data=python_stdlib |" in text  # each corpus's levels
    report = build_report(sweep)
    assert report.ladder.in_bits and [rung.level for rung in report.ladder.rungs] == [
        "python_docs",
        "python_stdlib",
    ]  # corpora have no order: as the family lists them
    open_levels = {
        rung.level
        for rung in report.ladder.rungs
        for s in rung.settings
        if s.answer and not s.answer.resolved
    }

    lines: list[str] = []
    train = [sys.executable, str(REPO / "scripts" / "train.py")]
    add_seeds(sweep, train, budget=Budget(max_seeds=4, per_round=1, max_minutes=10), echo=lines.append)
    assert lines[0].startswith(f"look 1: the sweep's own 3 seeds; {len(open_levels)} of 2 comparisons open")
    design = json.loads((sweep / DESIGN_FILE).read_text(encoding="utf-8"))
    assert design["looks"] == [["1", "2", "3"], ["1", "2", "3", "4"]]
    added = sorted(path.parent.name for path in (sweep / ADDED_DIR).glob("*/*/metrics.json"))
    assert open_levels, "the test needs an open comparison to add seeds to"
    # Seed 4 for each open level's SwiGLU row and that level's GELU baseline, and for no other level.
    assert len(added) == 2 * len(open_levels) and all("seed=4" in name for name in added)
    assert {name.split("data=")[1].split(",")[0] for name in added} == open_levels
    after = build_report(sweep)
    for rung in after.ladder.rungs:
        (swiglu,) = [s for s in rung.settings if s.choices["act"] == "swiglu"]
        assert (swiglu.added is not None) == (rung.level in open_levels)
        if swiglu.added is not None:
            assert swiglu.added.tests.seeds == ("4",)


@pytest.mark.slow
def test_a_scaled_down_length_ladder_orders_its_levels_by_steps(tmp_path):
    sweep, result = run_sweep(
        tmp_path, *_shrunk("experiment=length_ladder", "trainer.max_steps=8,4", "norm=pre,post", "act=gelu",
                           "optim.lr=1e-3", "seed=1,2,3"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    text, _ = write_report(sweep)
    report = build_report(sweep)
    assert [rung.level for rung in report.ladder.rungs] == ["4", "8"] and report.ladder.ordered
    assert [rung.steps for rung in report.ladder.rungs] == [4, 8]
    assert not report.ladder.in_bits  # one corpus: its nats compare
    assert "## Across levels of trainer.max_steps" in text
