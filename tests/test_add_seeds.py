"""Seeds until the answer is known, on a real tiny sweep: rounds add seeds to the open comparison only (and
the baseline), the merged report counts them by the sequential design, and an interrupted round carries on
where it stopped (tinylm/seed_rounds/: plan.py decides, tinylm/training/launch.py
launches). The rounds launch real multiruns: -m slow; the default run
keeps the design's checks and the stop on a round that adds nothing (the sequential rule itself, on made-up
numbers: tests/test_verdicts.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_script, run_sweep

from tinylm.analysis.estimates import Failures, paired_tests
from tinylm.analysis.present.write_report import write_report
from tinylm.analysis.report import build_report
from tinylm.analysis.runs import ReportError
from tinylm.layout import DESIGN_FILE, PREVIOUS_REPORTS, read_run_record, write_run_record
from tinylm.seed_rounds.plan import ADDED_DIR, Budget
from tinylm.seed_rounds.rounds import add_seeds

TRAIN = [sys.executable, str(REPO / "scripts" / "train.py")]
# optimized_metric changes nothing a run learns, only what it hands a sweeper: GELU's second row is identical
# to the baseline on every seed (CPU runs are deterministic) and resolved at the first look; SwiGLU's two rows
# (also identical to each other) after 6 steps on 2 seeds are not.
BASELINE = "act=gelu,optimized_metric=loss/val_full"


@pytest.fixture(scope="module")
def two_seed_sweep(tmp_path_factory) -> Path:
    sweep_dir, result = run_sweep(
        tmp_path_factory.mktemp("seeds"),
        "act=gelu,swiglu",
        "optimized_metric=loss/val_full,loss/val",
        "seed=1,2",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return sweep_dir


# The default run's design checks and stop conditions need one open comparison, not the resolved second row:
# GELU against SwiGLU on 2 seeds, the same runs as two_seed_sweep's `optimized_metric=loss/val_full` half.
ACT_BASELINE = "act=gelu"


@pytest.fixture(scope="module")
def act_by_seeds(tmp_path_factory) -> Path:
    sweep_dir, result = run_sweep(tmp_path_factory.mktemp("act_seeds"), "act=gelu,swiglu", "seed=1,2")
    assert result.returncode == 0, result.stderr[-2000:]
    return sweep_dir


def copy_of(sweep: Path, tmp_path: Path) -> Path:
    target = tmp_path / "sweep"
    shutil.copytree(sweep, target)
    return target


def seeds_of(report, **choices: str) -> list[str]:
    setting = next(s for s in report.settings if all(s.choices.get(k) == v for k, v in choices.items()))
    return sorted(setting.results)


@pytest.mark.slow
def test_rounds_add_seeds_to_the_open_comparison_only_and_the_report_counts_them(two_seed_sweep, tmp_path):
    sweep = copy_of(two_seed_sweep, tmp_path)
    lines: list[str] = []
    report = add_seeds(sweep, TRAIN, BASELINE, min_effect=1e-6, budget=Budget(4, 2), echo=lines.append)

    assert seeds_of(report, act="gelu", optimized_metric="loss/val_full") == [
        "1",
        "2",
        "3",
        "4",
    ]  # the baseline
    for metric in ("loss/val_full", "loss/val"):
        assert seeds_of(report, act="swiglu", optimized_metric=metric) == ["1", "2", "3", "4"]
    assert seeds_of(report, act="gelu", optimized_metric="loss/val") == [
        "1",
        "2",
    ]  # resolved: no more seeds
    design = json.loads((sweep / DESIGN_FILE).read_text())
    assert design["looks"] == [["1", "2"], ["1", "2", "3", "4"]] and design["round"] is None
    assert lines[0] == "look 1: the sweep's own 2 seeds; 2 of 3 comparisons open"
    # The next look counts the seeds it added, as the report does, and says each verdict reached.
    look_2 = next(i for i, line in enumerate(lines) if line.startswith("look 2: "))
    assert lines[look_2].startswith("look 2: 2 added seeds; ")
    assert any(line.startswith("- act=swiglu optimized_metric=loss/val_full: ") for line in lines[look_2:])

    # The report read afresh keeps the sweep's own verdicts on seeds 1-2 and judges the added seeds 3-4 apart,
    # by the design's looks, from its file alone.
    again = build_report(sweep)
    rows = {(s.choices["act"], s.choices["optimized_metric"]): s for s in again.family if s.comparison}
    assert rows["gelu", "loss/val"].comparison.judgement.verdict == "identical on every seed"
    assert rows["gelu", "loss/val"].added is None  # resolved by the sweep: no seeds added to it
    swiglu = rows["swiglu", "loss/val_full"]
    assert len(swiglu.comparison.tests.seeds) == 2 and not swiglu.comparison.resolved
    # Whichever way the second look went, it judged SwiGLU on the two added seeds.
    added = str(swiglu.added.judgement.verdict)
    assert added.startswith("not resolved at look 2 (2 added seeds") or added.endswith(
        "(look 2, 2 added seeds)"
    )
    assert sorted(swiglu.added.tests.seeds) == ["3", "4"]
    assert len(list((sweep / ADDED_DIR).glob("*/*/metrics.json"))) == 3 * 2  # 3 settings, seeds 3 and 4


@pytest.mark.slow
def test_an_interrupted_round_loses_nothing_and_the_same_command_carries_on(two_seed_sweep, tmp_path):
    sweep = copy_of(two_seed_sweep, tmp_path)
    launched: list[str] = []

    def interrupt_before_the_second_launch(line: str) -> None:
        if line.startswith("  "):
            launched.append(line)
            if len(launched) == 2:
                raise KeyboardInterrupt  # as a Ctrl-C between the round's multiruns would

    with pytest.raises(KeyboardInterrupt):
        add_seeds(sweep, TRAIN, BASELINE, 1e-6, budget=Budget(3, 1), echo=interrupt_before_the_second_launch)
    design = json.loads((sweep / DESIGN_FILE).read_text())
    assert design["round"]["seeds"] == ["3"] and design["looks"] == [["1", "2"]]
    done = build_report(sweep)
    # The round adds seed 3 to the baseline and both open rows, one multirun each: the first finished and is
    # kept, the other two never started.
    in_round = [("gelu", "loss/val_full"), ("swiglu", "loss/val_full"), ("swiglu", "loss/val")]
    assert sum(len(seeds_of(done, act=a, optimized_metric=m)) for a, m in in_round) == 2 * 3 + 1

    lines: list[str] = []
    report = add_seeds(sweep, TRAIN, echo=lines.append, min_effect=1e-6, budget=Budget(3, 1))
    for act, metric in in_round:
        assert seeds_of(report, act=act, optimized_metric=metric) == ["1", "2", "3"]
    assert sum(line.startswith("  ") for line in lines) == 2  # only the runs that were missing
    assert json.loads((sweep / DESIGN_FILE).read_text())["looks"] == [["1", "2"], ["1", "2", "3"]]


def test_a_design_cannot_change_between_looks_and_a_command_that_adds_no_result_changes_no_verdict(
    act_by_seeds, tmp_path
):
    sweep = copy_of(act_by_seeds, tmp_path)
    with pytest.raises(ReportError, match="name the baseline"):
        add_seeds(sweep, TRAIN, budget=Budget(2, 1))
    text, _ = write_report(sweep, ACT_BASELINE, min_effect=1e-6)
    lines: list[str] = []
    add_seeds(sweep, TRAIN, ACT_BASELINE, 1e-6, budget=Budget(16, 2, max_minutes=1e-9), echo=lines.append)
    assert lines[-1].startswith("stopped: the next round would take about")  # no run was launched
    assert json.loads((sweep / DESIGN_FILE).read_text())["looks"] == [["1", "2"]]
    again, _ = write_report(sweep)
    assert again == text and not (sweep / PREVIOUS_REPORTS).exists()  # not a word changed, nothing kept
    with pytest.raises(ReportError, match="cannot change between its looks"):
        add_seeds(sweep, TRAIN, min_effect=0.02, budget=Budget(16, 2))
    with pytest.raises(ReportError, match="its verdicts hold only at that δ"):
        build_report(sweep, min_effect=0.5)
    result = run_script("add_seeds.py", str(sweep), "--per-round", "0")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--per-round" in result.stderr


def test_a_round_that_adds_no_result_stops_instead_of_launching_forever(act_by_seeds, tmp_path):
    sweep = copy_of(act_by_seeds, tmp_path)
    does_nothing = [
        sys.executable,
        "-c",
        "pass",
    ]  # exits 0 and trains nothing, like a round whose runs all fail
    with pytest.raises(ReportError, match="the last round added no result to the baseline"):
        add_seeds(sweep, does_nothing, ACT_BASELINE, 1e-6, budget=Budget(4, 2), echo=lambda _: None)
    assert json.loads((sweep / DESIGN_FILE).read_text())["looks"] == [["1", "2"]]


def _as_seed_3(run_dir: Path) -> Path:
    """A copy of a seed-1 run directory recorded as seed 3 (its config, overrides and curves as they were)."""
    copy = run_dir.with_name(run_dir.name + "_seed3")
    shutil.copytree(run_dir, copy)
    for name, old, new in (
        ("config.yaml", "seed: 1\n", "seed: 3\n"),
        ("overrides.yaml", "- seed=1\n", "- seed=3\n"),
    ):
        path = copy / ".hydra" / name
        text = path.read_text(encoding="utf-8")
        assert old in text, (path, text)
        path.write_text(text.replace(old, new), encoding="utf-8")
    return copy


@pytest.mark.slow  # ~8 s: three reports and a round; the rule itself is tested fast in tests/test_stats.py
def test_a_comparison_whose_sides_diverge_unequally_is_judged_on_the_runs_that_trained_and_gets_no_seeds(
    two_seed_sweep, tmp_path
):
    """GELU's second row is identical to the baseline on seeds 1 and 2 (resolved: `identical on every seed`).
    Given a seed 3 on which it diverged and the baseline did not (1/3 vs 0/3, exact p = 1), its loss is still
    judged over the runs that trained and the failures are stated beside it (issue 48, which reversed issue
    34's rule that kept such a row open): it stays resolved, and add_seeds adds no seeds for it."""
    sweep = copy_of(two_seed_sweep, tmp_path)
    runs = {
        (r.choices["optimized_metric"], r.choices["act"], r.seed): r.path for r in build_report(sweep).runs
    }
    _as_seed_3(runs[("loss/val_full", "gelu", "1")])  # the baseline, finished on seed 3
    diverged = _as_seed_3(runs[("loss/val", "gelu", "1")])
    record = read_run_record(diverged)
    write_run_record(diverged, "diverged", **{k: v for k, v in record.items() if k != "status"})
    family = build_report(sweep, BASELINE, min_effect=1e-6).family
    row = next(
        s for s in family if s.choices["act"] == "gelu" and s.choices["optimized_metric"] == "loss/val"
    )
    assert row.comparison.tests.failures == Failures(1, 0, 3, 1.0) and row.comparison.resolved
    assert (
        str(row.comparison.judgement.verdict)
        == "identical on every seed when trained; fails 1/3 vs 0/3 (exact p = 1)"
    )
    said = []
    with pytest.raises(ReportError, match="the last round added no result"):
        add_seeds(
            sweep, [sys.executable, "-c", "pass"], BASELINE, 1e-6, budget=Budget(6, 2), echo=said.append
        )
    assert said[0] == "look 1: the sweep's own 3 seeds; 2 of 3 comparisons open"
    launched = [line.split(":")[0].strip() for line in said[1:] if "-> " in line]
    # The two open SwiGLU rows and the baseline get seeds; the resolved GELU row does not.
    assert "norm=pre norm_type=layer act=gelu optimized_metric=loss/val" not in launched
    assert len(launched) == 3


# --- issue 59: what add_seeds prints, and an open row at a look says why ----------------------------------


def _judged_sweep(base_results: dict[str, float], row_results: dict[str, float], **row_fields):
    """A sweep of `act=swiglu` against the baseline `act=gelu` with these results by seed (and, for the row,
    `row_fields` of its Setting), as a report holds it."""
    from tinylm.analysis.grouping import Setting
    from tinylm.analysis.report import SweepReport
    from tinylm.analysis.runs import RunSummary

    def runs(act: str, results: dict[str, float]) -> list[RunSummary]:
        return [
            RunSummary(
                Path(f"{act}{seed}"), f"{act}{seed}", "completed", {"act": act}, seed, final_val_loss=v
            )
            for seed, v in results.items()
        ]

    base = Setting({"act": "gelu"}, runs("gelu", base_results), dict(base_results))
    row = Setting({"act": "swiglu"}, runs("swiglu", row_results), dict(row_results), **row_fields)
    return SweepReport(Path("sweep"), [], ["act"], {}, [base, row], ["act"], family_baseline=base), base, row


def test_add_seeds_counts_a_looks_seeds_as_the_report_does_and_prints_the_verdict_reached():
    """Issue 59: add_seeds printed `look 2: 4 seeds` (the baseline's seeds, the sweep's own included) where the
    report says `look 2 (2 added seeds)`, and never the verdict it reached."""
    from tinylm.analysis.estimates import PairedTests
    from tinylm.analysis.sequential_design import Design
    from tinylm.analysis.verdicts import Comparison, Judgement, Outcome, Verdict
    from tinylm.seed_rounds.plan import next_round

    seeds = {"1": 2.0, "2": 2.0, "3": 2.0, "4": 2.0}
    own = Comparison(
        PairedTests(("1", "2")), Judgement(verdict=Verdict("not resolved", Outcome.NOT_RESOLVED))
    )
    better = Verdict("better (look 2, 2 added seeds)", Outcome.BETTER)
    added = Comparison(PairedTests(("3", "4")), Judgement(verdict=better))
    report, *_ = _judged_sweep(seeds, seeds, comparison=own, added=added)
    design = Design(0.05, 0.01, 16, "act=gelu", (("1", "2"), ("1", "2", "3", "4")))
    lines: list[str] = []
    _, _, stop = next_round(Path("unused"), design, report, Budget(), lambda: 0.0, echo=lines.append)
    assert stop and lines == [
        "look 2: 2 added seeds; 0 of 1 comparisons open",
        "- act=swiglu: better (look 2, 2 added seeds)",
        "every comparison is resolved",
    ]


def test_a_row_left_open_by_its_looks_level_says_so_in_its_verdict():
    """Issue 59: a row at p (Holm) 0.011, its interval outside ±δ, read `not resolved` and only a paragraph
    below said why (the look's level). Here 4 added seeds, 0.03-0.06 worse on each: p 0.0061 (Holm, one test)
    is within α, but the second look of a design of up to 14 added seeds gives it 0.00025."""
    from tinylm.analysis.grouping import Rules
    from tinylm.analysis.sequential_design import Design, judge_added
    from tinylm.analysis.verdicts import Comparison

    base_results = {str(seed): 2.0 for seed in range(1, 7)}
    row_results = {"1": 2.0, "2": 2.0, "3": 2.03, "4": 2.05, "5": 2.04, "6": 2.06}
    own = Comparison(paired_tests({"1": 2.0, "2": 2.0}, {"1": 2.0, "2": 2.0}))  # the sweep's own: open
    _, base, row = _judged_sweep(base_results, row_results, comparison=own)
    design = Design(0.05, 0.01, 16, "act=gelu", (("1", "2"), tuple(base_results)))
    rules = Rules(0.95, 0.05, 0.01, False)
    key, base_key = row.key(["act"]), base.key(["act"])
    added = judge_added({key: base_key}, [base, row], ["act"], rules, design)
    c = added[key]
    assert c.judgement.p_adjusted == pytest.approx(0.0061, abs=5e-5) and c.tests.difference.low > 0.01
    assert (
        str(c.judgement.verdict)
        == "not resolved at look 2 (4 added seeds; p 0.0061 > 0.00025, the level look 2 gives it)"
    )
