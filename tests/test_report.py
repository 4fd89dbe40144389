"""The sweep report on a real (shrunk) sweep: the ranked table, the PNG, runs that failed or never finished,
and directories that are not sweeps."""

from __future__ import annotations

import math
import runpy
import shutil
import sys
from pathlib import Path

import matplotlib.image
import pytest
from conftest import REPO

from tinylm.analysis.report import (
    REPORT_MD,
    REPORT_PNG,
    ReportError,
    RunSummary,
    SweepReport,
    build_report,
    markdown_table,
    write_report,
)
from tinylm.training.run_record import RECORD_FILE, read_run_record, write_run_record

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def report_script(*args: str) -> tuple[int, str]:
    """Run scripts/report.py in this process (as `python scripts/report.py ...` would); (exit code, output)."""
    argv = sys.argv
    sys.argv = [str(REPO / "scripts" / "report.py"), *args]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        return (0, "") if code is None else (1, str(code)) if isinstance(code, str) else (code, "")
    finally:
        sys.argv = argv
    return 0, ""


def _table_rows(markdown: str) -> list[list[str]]:
    """The cells of the ranked table's body (the first table in the report)."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| rank |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def _header(markdown: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith("| rank |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


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


def test_report_ranks_the_four_runs_of_a_grid_and_plots_them(sweep_copy, capsys):
    code, _ = report_script(str(sweep_copy))
    printed = capsys.readouterr().out
    assert code == 0
    markdown = (sweep_copy / REPORT_MD).read_text(encoding="utf-8")
    assert markdown in printed

    header = _header(markdown)
    for column in ("run", "norm", "norm_type", "act", "params", "final val loss", "best val loss"):
        assert column in header
    for column in ("bits/char", "tokens/s", "wall time", "status"):
        assert column in header
    rows = [dict(zip(header, row, strict=True)) for row in _table_rows(markdown)]
    assert len(rows) == 4
    assert [row["rank"] for row in rows] == ["1", "2", "3", "4"]
    assert {(row["norm"], row["act"]) for row in rows} == {
        ("pre", "gelu"), ("pre", "swiglu"), ("post", "gelu"), ("post", "swiglu")
    }  # fmt: skip
    finals = [float(row["final val loss"]) for row in rows]
    assert finals == sorted(finals)

    # The numbers are the runs' own: TensorBoard's last val/loss and val/bpc, metrics.json's parameter count.
    for row in rows:
        (run_dir,) = sweep_copy.glob(f"{row['run']}_*")
        record = read_run_record(run_dir)
        assert float(row["final val loss"]) == pytest.approx(record["val/loss"], abs=1e-4)
        assert float(row["bits/char"]) == pytest.approx(record["val/loss"] / math.log(2), abs=1e-3)
        assert float(row["best val loss"]) <= float(row["final val loss"]) + 1e-9
        assert int(row["params"].replace(",", "")) == record["params"]
        assert float(row["tokens/s"].replace(",", "")) > 0
        assert row["status"] == "completed" and row["steps"] == "6/6"

    _assert_valid_png(sweep_copy / REPORT_PNG)


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

    text, markdown, png = write_report(sweep_copy)
    assert markdown.read_text(encoding="utf-8") == text
    header = _header(text)
    rows = {row[header.index("run")]: dict(zip(header, row, strict=True)) for row in _table_rows(text)}
    assert len(rows) == 4
    number = {d: d.name.split("_")[0] for d in run_dirs}
    assert rows[number[killed]]["status"] == "unfinished"
    assert rows[number[killed]]["final val loss"] != "—"  # its curve is still read
    assert rows[number[failed]]["status"] == "failed: ValueError: bad config"
    assert rows[number[never_started]]["status"] == "unfinished"
    assert rows[number[never_started]]["final val loss"] == "—"
    # only the completed run is ranked
    assert [row["rank"] for row in rows.values()].count("1") == 1
    assert sum(row["rank"] != "—" for row in rows.values()) == 1
    assert "1 completed" in text and "1 failed" in text and "2 unfinished" in text
    _assert_valid_png(png)


def test_report_groups_seeds_when_they_vary():
    def run(name: str, seed: str, act: str, loss: float, status: str = "completed") -> RunSummary:
        choices = {"norm": "pre", "norm_type": "layer", "act": act, "seed": seed}
        return RunSummary(Path(name), name, status, choices, final_val_loss=loss)

    runs = [
        run("0", "1", "gelu", 2.0),
        run("1", "2", "gelu", 2.2),
        run("2", "1", "swiglu", 1.9),
        run("3", "2", "swiglu", 2.1),
        run("4", "3", "swiglu", 9.9, "failed"),
    ]
    report = SweepReport(Path("sweep"), runs, ["norm", "norm_type", "act", "seed"], {})
    text = markdown_table(report)
    section = text[text.index("Across seeds") :]
    assert "| pre | layer | swiglu | 2 | 2.0000 | 1.9000 | 2.1000 |" in section
    assert "| pre | layer | gelu | 2 | 2.1000 | 2.0000 | 2.2000 |" in section
    assert section.index("swiglu") < section.index("gelu")  # best mean first; the failed run is left out


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
    assert code != 0
    assert message.startswith("report: ") and "\n" not in message
    assert "sweep" in message
    with pytest.raises(ReportError):
        build_report(target)
    if before is not None:
        assert sorted(p.name for p in target.iterdir()) == before  # nothing written
