"""The sweep report on real (shrunk) sweeps: the runs table, the settings with intervals over seeds, the tuned
table when the learning rate varies, the figures, runs that failed or never finished, and directories that are
not sweeps. (The statistics themselves, on made-up numbers: tests/test_stats.py.)"""

from __future__ import annotations

import contextlib
import io
import json
import math
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
from conftest import REPO, run_script, run_sweep
from omegaconf import OmegaConf

from tinylm.analysis.multiplier import Cost
from tinylm.analysis.present.plots import report_figure, save_figure
from tinylm.analysis.present.schema import from_json
from tinylm.analysis.present.write_report import write_report
from tinylm.analysis.report import SweepReport, build_report
from tinylm.analysis.runs import ReportError, read_runs
from tinylm.layout import (
    RECORD_FILE,
    REPORT_JSON,
    REPORT_MD,
    REPORT_PNG,
    SENSITIVITY_PNG,
    read_run_record,
    write_run_record,
)
from tinylm.model import ModelConfig
from tinylm.probe.depth import depth_probe

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def report_script(*args: str) -> tuple[int, str]:
    """Run scripts/report.py in this process (as `python scripts/report.py ...` would): (exit code, stderr)."""
    argv = sys.argv
    sys.argv = [str(REPO / "scripts" / "report.py"), *args]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exit_:
        return (0 if exit_.code is None else exit_.code), stderr.getvalue()
    finally:
        sys.argv = argv
    return 0, stderr.getvalue()


def written_report(sweep: Path) -> SweepReport:
    """The report value a sweep's report.json holds: what its report.md was rendered from."""
    return from_json(json.loads((sweep / REPORT_JSON).read_text(encoding="utf-8")))


def _assert_valid_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image.std() > 0  # something was drawn


@pytest.fixture
def sweep_copy(grid_sweep, tmp_path) -> Path:
    sweep_dir, result = grid_sweep
    assert result.returncode == 0, result.stderr[-3000:]
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    return copy


@pytest.fixture(scope="module")
def grid_report(grid_sweep, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A copy of the grid with its report written (the depth probe included) by the one fresh interpreter of
    scripts/report.py, as a user runs it; the other tests run it in-process. Read only by its tests."""
    sweep_dir, result = grid_sweep
    assert result.returncode == 0, result.stderr[-3000:]
    copy = tmp_path_factory.mktemp("grid_report") / "sweep"
    shutil.copytree(sweep_dir, copy)
    return copy, run_script("report.py", str(copy), "--baseline", "norm=pre,act=gelu")


def test_each_comparison_states_its_compute_multipliers_read_from_the_runs_curves(grid_report):
    """The multipliers of a real sweep, read back from report.json: each row's level is the loss both sides
    reached (the worse of the two last validations) and the Answer states each row's step multiplier."""
    sweep_copy, _ = grid_report
    report = written_report(sweep_copy)
    runs = {(r.choices["norm"], r.choices["act"]): r for r in read_runs(sweep_copy)}
    base = runs["pre", "gelu"]
    compared = {(c.design["norm"], c.design["act"]) for c in report.costs}
    assert compared == {("pre", "swiglu"), ("post", "gelu"), ("post", "swiglu")}
    for costs in report.costs:
        run = runs[costs.design["norm"], costs.design["act"]]
        (reach,) = costs.steps.reaches.values()
        assert reach.level == pytest.approx(max(run.val_curve[-1][1], base.val_curve[-1][1]))
        assert reach.reached_baseline == (run.val_curve[-1][1] <= base.val_curve[-1][1])
        assert 0 < reach.design <= 6 and 0 < reach.baseline <= 6  # steps, within the 6-step runs
        assert costs.steps.ratio.n == 1 and not costs.steps.ratio.has_interval
        assert costs.time.cost is Cost.TIME and costs.time.ratio is not None  # train/time was logged
    markdown = (sweep_copy / REPORT_MD).read_text(encoding="utf-8")
    assert markdown.split("## Answer")[1].count("the loss both reached in **") == 3


def test_report_ranks_the_four_runs_of_a_grid_and_plots_them(grid_report):
    sweep_copy, result = grid_report
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
    markdown = (sweep_copy / REPORT_MD).read_text(encoding="utf-8")
    assert markdown in result.stdout

    # Every run has a result, so all four are ranked, in the order of their final losses.
    runs = written_report(sweep_copy).runs
    assert len(runs) == 4 and all(run.result is not None for run in runs)
    assert {(run.choices["norm"], run.choices["act"]) for run in runs} == {
        ("pre", "gelu"), ("pre", "swiglu"), ("post", "gelu"), ("post", "swiglu")
    }  # fmt: skip
    finals = [run.final_val_loss for run in runs]
    assert finals == sorted(finals) and [run.result for run in runs] == finals

    # The numbers are the runs' own: metrics.json's final evaluation on every validation window and its
    # parameter count; the best of the periodic validations from TensorBoard.
    for run in runs:
        (run_dir,) = sweep_copy.glob(f"{run.name}_*")
        record = read_run_record(run_dir)
        assert run.final_val_loss == pytest.approx(record["loss/val_full"], abs=1e-4)
        assert run.final_bpc == pytest.approx(record["loss/val_full"] / math.log(2), abs=1e-3)
        assert run.best_val_loss == pytest.approx(record["loss/val_best"], abs=1e-4)
        assert run.params == record["params"] and run.tokens_per_s > 0
        assert run.status == "completed" and run.error is None and (run.steps, run.max_steps) == (6, 6)

    # The runs table renders them (its subject here: the rendering): a choice every run shares is stated once
    # above the tables, not repeated in each row; the best run's row reads its own numbers.
    assert "`norm_type=layer`" in markdown.split("## Settings")[0]
    assert (
        "| rank | run | norm | act | params | final val loss | evaluated on | best val loss | bits/char | "
        "tokens/s | wall time | steps | status |\n"
    ) in markdown
    best = runs[0]
    row = (
        f"| 1 | {best.name} | {best.choices['norm']} | {best.choices['act']} | {best.params:,} | "
        f"{best.final_val_loss:.4f} | {best.evaluated} | {best.best_val_loss:.4f} | {best.final_bpc:.3f} | "
    )
    assert any(
        line.startswith(row) and line.endswith(" | 6/6 | completed |") for line in markdown.splitlines()
    )

    _assert_valid_png(sweep_copy / REPORT_PNG)
    record = json.loads((sweep_copy / REPORT_JSON).read_text(encoding="utf-8"))
    assert len(record["runs"]) == 4 and len(record["settings"]) == 4
    # One seed per setting: the comparison says so rather than inventing an interval.
    verdicts = [s["comparison"]["judgement"]["verdict"] for s in record["settings"] if s["comparison"]]
    assert [verdict["text"] for verdict in verdicts] == ["one seed: no interval"] * 3
    assert record["family_baseline"]["norm"] == "pre" and record["baseline_source"] == "--baseline"
    assert not (sweep_copy / SENSITIVITY_PNG).exists()  # the learning rate does not vary


def test_report_marks_failed_and_unfinished_runs_without_crashing(sweep_copy):
    run_dirs = sorted(p.parent.parent for p in sweep_copy.rglob(".hydra/overrides.yaml"))
    killed, failed, never_started = run_dirs[0], run_dirs[1], run_dirs[2]
    # killed mid-run: curves logged, no record
    (killed / RECORD_FILE).unlink()
    # failed before logging anything: the record run_job writes, and no TensorBoard events
    shutil.rmtree(failed / "tb")
    for path in (failed / RECORD_FILE, failed / "config.yaml"):
        path.unlink()
    write_run_record(failed, "failed", error="ValueError: bad config", wall_time_s=0.1)
    # killed before run() began: only Hydra's own files
    for path in never_started.iterdir():
        if path.name != ".hydra":
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    text, written = write_report(sweep_copy)
    markdown, png = written[0], written[2]
    assert markdown.read_text(encoding="utf-8") == text
    report = written_report(sweep_copy)
    runs = {run.name: run for run in report.runs}
    assert len(runs) == 4
    number = {d: d.name.split("_")[0] for d in run_dirs}
    assert runs[number[killed]].status == "unfinished"
    assert runs[number[killed]].final_val_loss is not None  # its curve is still read
    assert (runs[number[failed]].status, runs[number[failed]].error) == ("failed", "ValueError: bad config")
    assert runs[number[never_started]].status == "unfinished"
    assert runs[number[never_started]].final_val_loss is None
    # Only the completed run has a result, so only it is ranked, and only its setting has a mean.
    assert [run.name for run in report.runs if run.result is not None] == [number[run_dirs[3]]]
    assert runs[number[run_dirs[3]]].status == "completed"
    assert sum(s.estimate is not None for s in report.settings) == 1
    assert "| failed: ValueError: bad config |" in text  # the runs table's status cell names the error
    assert "1 completed" in text and "1 failed" in text and "2 unfinished" in text
    _assert_valid_png(png)


@pytest.fixture(scope="module")
def seeds_by_lrs(tmp_path_factory) -> Path:
    """A real shrunk sweep: pre-norm GELU, 2 seeds × 2 learning rates."""
    sweep_dir, result = run_sweep(tmp_path_factory.mktemp("lr"), "seed=1,2", "optim.lr=1e-3,1e-2")
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir


@pytest.fixture(scope="module")
def lrs_report(seeds_by_lrs) -> SweepReport:
    """seeds_by_lrs' report, written once by scripts/report.py (`--x step --band ci`); returns the value built
    from its runs, curves included, for the figures on the other x axes. Read only by its tests."""
    code, stderr = report_script(str(seeds_by_lrs), "--x", "step", "--band", "ci")
    assert code == 0, stderr
    return build_report(seeds_by_lrs)


@pytest.mark.parametrize("x_axis", ["step", "chars", "time"])
def test_report_of_seeds_times_learning_rates_has_intervals_a_tuned_table_and_both_figures(
    seeds_by_lrs, lrs_report, x_axis, tmp_path
):
    # The report is the same on every x axis; report.png's curves are drawn on this one.
    figure = (
        seeds_by_lrs / REPORT_PNG
        if x_axis == "step"
        else save_figure(report_figure(lrs_report, x_axis, "ci"), tmp_path / REPORT_PNG)
    )
    text = (seeds_by_lrs / REPORT_MD).read_text(encoding="utf-8")
    settings = written_report(seeds_by_lrs).settings
    assert len(settings) == 2  # one per learning rate, each over two seeds
    for s in settings:
        assert len(s.results) == 2 and s.estimate.has_interval
        assert s.estimate.low < s.estimate.mean < s.estimate.high
    assert "## Each setting at a cross-fitted learning rate" not in text  # one design: nothing to compare
    record = json.loads((seeds_by_lrs / REPORT_JSON).read_text(encoding="utf-8"))
    # Cross-fitted: each seed at the rate where the other seed did better.
    by_rate = {s["choices"]["optim.lr"]: s["results"] for s in record["settings"]}
    for seed, rate in record["tuned"][0]["rates"].items():
        other = "2" if seed == "1" else "1"
        assert rate == min(by_rate, key=lambda r: by_rate[r][other])
    _assert_valid_png(figure)
    _assert_valid_png(seeds_by_lrs / SENSITIVITY_PNG)


def test_report_md_renders_again_from_report_json_alone(seeds_by_lrs, lrs_report, tmp_path):
    """`--from-json`: report.json holds every value report.md states, so a copy of it alone, with no runs
    beside it, renders the same report.md (and the figure that needs no curves)."""
    shutil.copy(seeds_by_lrs / REPORT_JSON, tmp_path / REPORT_JSON)
    code, stderr = report_script("--from-json", str(tmp_path / REPORT_JSON))
    assert code == 0, stderr
    assert (tmp_path / REPORT_MD).read_text(encoding="utf-8") == (seeds_by_lrs / REPORT_MD).read_text(
        encoding="utf-8"
    )
    _assert_valid_png(tmp_path / SENSITIVITY_PNG)
    assert not (tmp_path / REPORT_PNG).exists()  # its curves are not in report.json
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    code, stderr = report_script("--from-json", str(tmp_path / "bad.json"))
    assert code == 2 and stderr.startswith("error: ") and stderr.count("\n") == 1
    code, stderr = report_script("--from-json", str(tmp_path / "nope.json"))
    assert code == 2 and stderr.startswith(f"error: --from-json {tmp_path / 'nope.json'}: no such file;")
    code, stderr = report_script()
    assert code == 2 and "--from-json" in stderr


@pytest.mark.parametrize("kind", ["missing", "empty", "not a sweep", "single run"])
def test_report_on_a_directory_that_is_not_a_sweep_fails_in_one_line(grid_sweep, tmp_path, kind):
    target = {
        "missing": tmp_path / "nope",
        "empty": tmp_path,
        "not a sweep": REPO / "conf",
        "single run": next(grid_sweep[0].glob("0_*")),
    }[kind]
    before = sorted(p.name for p in target.iterdir()) if target.is_dir() else None
    code, message = report_script(str(target))
    assert code == 2
    assert message.startswith("error: ") and message.count("\n") == 1
    assert "sweep" in message
    with pytest.raises(ReportError):
        build_report(target)
    if before is not None:
        assert sorted(p.name for p in target.iterdir()) == before  # nothing written


def test_the_report_probes_each_placement_at_initialisation_at_the_sweeps_own_shape(grid_report):
    sweep_copy, result = grid_report
    assert result.returncode == 0, result.stderr[-3000:]
    text = (sweep_copy / REPORT_MD).read_text(encoding="utf-8")
    rows = {(row["norm"], row["act"]): row for row in written_report(sweep_copy).probe}
    assert sorted(rows) == [("post", "gelu"), ("post", "swiglu"), ("pre", "gelu"), ("pre", "swiglu")]
    # The numbers are the probe's own at the runs' shape (SHRINK: 2 blocks of width 32, context 32).
    run_dir = next(sweep_copy.glob("*norm=post*act=swiglu*"))
    config = OmegaConf.load(run_dir / ".hydra" / "config.yaml").model
    expected = depth_probe(ModelConfig.from_dict(OmegaConf.to_container(config, resolve=True)), batch_size=4,
                           seq_len=32, causal=True)[-1]  # fmt: skip
    row = rows["post", "swiglu"]
    assert (row["n_layer"], row["d_model"]) == (2, 32)
    assert row["token_spread"] == pytest.approx(expected["token_spread"], rel=1e-9)
    assert row["grad_w_q"] == pytest.approx(expected["grad_w_q"], rel=1e-9)
    # The section renders that row (its subject here: the rendering), three significant figures.
    (line,) = [line for line in text.splitlines() if line.startswith("| post | swiglu | 2 | 32 | ")]
    cells = line.strip("|").split(" | ")
    assert float(cells[5]) == pytest.approx(row["token_spread"], rel=1e-3)
    assert float(cells[6]) == pytest.approx(row["grad_w_q"], rel=1e-2)
