"""The files `scripts/report.py` writes into a sweep directory: the report value rendered as report.md,
report.json and figures (`write_report`), or report.md again from a report.json alone (`write_from_json`)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from cattrs import BaseValidationError

from tinylm import layout
from tinylm.analysis.ladder import LadderKind
from tinylm.analysis.present.plots import (
    draw_ladder_verdicts,
    draw_scale,
    draw_why,
    plot_lr_sensitivity,
    report_figure,
    save_figure,
)
from tinylm.analysis.present.render import markdown
from tinylm.analysis.present.schema import from_json, to_json
from tinylm.analysis.report import ReportError, SweepReport, build_report
from tinylm.files import write_json

# The figures drawn from the report value alone, with no run's curves: what `--from-json` can draw again.
CURVELESS_FIGURES = (layout.SENSITIVITY_PNG, layout.SCALE_PNG, layout.LADDER_PNG)


def write_report(
    sweep_dir: str | Path,
    baseline: str | None = None,
    x_axis: str = "step",
    band: str = "minmax",
    curve: str | None = None,
    min_effect: float | None = None,
    ladder: str | None = None,
    metric: str | None = None,
) -> tuple[str, list[Path]]:
    """Build the report and write report.md, report.json, report.png (`report_<curve>.png` for another curve)
    and the figures its value calls for into the sweep directory; returns the markdown and the paths."""
    report = build_report(
        sweep_dir, baseline, curve=curve, min_effect=min_effect, ladder=ladder, probe=True, metric=metric
    )
    if curve and not any(run.curve for run in report.runs):
        raise ReportError(
            f"--curve {curve}: no run of this sweep logged it; try loss/train, lr, or "
            "training_health/<quantity>/block_<k> (docs/probe.md lists them)"
        )
    directory = report.sweep_dir
    record = directory / layout.REPORT_JSON
    figure = directory / (f"report_{curve.replace('/', '_')}.png" if curve else layout.REPORT_PNG)
    # Before anything is written: the old report goes aside with every figure it was written with.
    patterns = (*CURVELESS_FIGURES, layout.WHY_PNG.format("*"), "report*.png")
    drawn = [p for pattern in patterns for p in directory.glob(pattern)]
    text, curveless = _write(report, directory, [record, figure, *drawn])
    write_json(record, to_json(report))
    save_figure(report_figure(report, x_axis, band, curve), figure)
    return text, [directory / layout.REPORT_MD, record, figure, *curveless, *draw_why(report)]


def write_from_json(path: str | Path) -> tuple[str, list[Path]]:
    """report.md written again beside `path`, a report.json, from it alone, with the figures it can draw."""
    path = Path(path)
    if not path.is_file():
        raise ReportError(
            f"--from-json {path}: no such file; pass the report.json a report wrote (<sweep dir>/report.json)"
        )
    try:
        report = from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, StopIteration, BaseValidationError) as err:
        raise ReportError(f"{path} is not a report.json that scripts/report.py wrote: {err!r}") from None
    text, drawn = _write(report, path.parent, [path.parent / name for name in CURVELESS_FIGURES])
    return text, [path.parent / layout.REPORT_MD, *drawn]


def _write(report: SweepReport, directory: Path, aside: list[Path]) -> tuple[str, list[Path]]:
    """report.md (one that reads differently moves aside first, with `aside`), then the value's figures."""
    text = markdown(report)
    keep_previous(directory, text, [directory / layout.REPORT_MD, *aside])
    (directory / layout.REPORT_MD).write_text(text, encoding="utf-8")
    drawn = [plot_lr_sensitivity(report, directory / layout.SENSITIVITY_PNG)] if report.lr_varies else []
    if report.ladder:
        drawn.append(draw_ladder_verdicts(report, report.ladder, directory / layout.LADDER_PNG))
    if report.ladder and report.ladder.kind is LadderKind.SIZE:
        drawn.append(draw_scale(report, report.ladder, directory / layout.SCALE_PNG))
    return text, drawn


def keep_previous(sweep_dir: Path, text: str, files: list[Path]) -> Path | None:
    """Move a report `text` rewords, with `files`, to previous_reports/<its time>/ (returned), never lost."""
    current = sweep_dir / layout.REPORT_MD
    if not current.is_file() or current.read_text(encoding="utf-8") == text:
        return None
    stamp = datetime.fromtimestamp(current.stat().st_mtime).strftime("%Y-%m-%d_%H-%M-%S")
    target, attempt = sweep_dir / layout.PREVIOUS_REPORTS / stamp, 1
    while target.exists():
        attempt += 1
        target = sweep_dir / layout.PREVIOUS_REPORTS / f"{stamp}_{attempt}"
    target.mkdir(parents=True)
    for path in filter(Path.is_file, files):
        path.rename(target / path.name)  # a new folder: nothing there to replace
    return target
