"""The report's figures: what the verdict table says (each setting's difference from the baseline with its
interval and verdict, a forest plot) above the validation-loss curves per setting (mean over seeds with a
band); when the learning rate varies, final validation loss against learning rate. Rendered headless
(matplotlib's Agg)."""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tinylm.analysis.estimates import Estimate, estimate
from tinylm.analysis.grouping import LR, Setting, setting_label
from tinylm.analysis.outcome import Outcome
from tinylm.analysis.report import SweepReport
from tinylm.analysis.runs import runs_frame
from tinylm.analysis.why import judged_runs, quantity, why_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import Locator

X_AXES = {"step": "optimizer step", "chars": "training characters", "time": "wall time (s)"}
BANDS = ("minmax", "ci")


def _figure(legend_entries: int, labels: Sequence[str]) -> tuple[Figure, Axes, int]:
    from matplotlib.figure import Figure

    columns = 1 if max(map(len, labels), default=0) > 45 else 2
    figure = Figure(figsize=(10, 5 + 0.2 * math.ceil(legend_entries / columns)), layout="constrained")
    return figure, figure.subplots(), columns


def _save(figure: Figure, axes: Axes, title: str, legend_columns: int, path: Path) -> Path:
    """Title, log-scale grid and the legend below the axes; written to `path`."""
    _finish(figure, axes, title, legend_columns)
    figure.savefig(path, dpi=120)
    return path


def _finish(figure: Figure, axes: Axes, title: str, legend_columns: int) -> Figure:
    """Title, log-scale grid and the legend below the axes."""
    axes.set_title(title)
    axes.grid(alpha=0.3, which="both")
    figure.legend(fontsize="small", loc="outside lower center", ncols=legend_columns, frameon=False)
    return figure


def _colour(index: int, count: int) -> Any:
    from matplotlib import colormaps

    colours = colormaps["tab10" if count <= 10 else "tab20"]
    return colours(index % colours.N)


def _band(values: Sequence[float], band: str, confidence: float) -> tuple[float, float]:
    if band == "ci" and len(values) > 1:
        e = estimate(values, confidence)
        assert e.low is not None and e.high is not None
        return e.low, e.high
    return min(values), max(values)


def setting_curve(
    setting: Setting, x_axis: str, band: str, confidence: float = 0.95
) -> list[tuple[float, float, float, float, int]]:
    """(x, mean, band low, band high, seeds) at every step some run of the setting logged a finite value."""
    by_step: dict[int, list[tuple[float, float]]] = {}
    for run in setting.runs:
        for step, value, seconds in run.curve:
            if not math.isfinite(value):
                continue
            if x_axis == "chars":
                if run.chars_per_step is None:
                    continue
                x = float(step * run.chars_per_step)
            else:
                x = seconds if x_axis == "time" else float(step)
            by_step.setdefault(step, []).append((x, value))
    points = []
    for step in sorted(by_step):
        xs, values = zip(*by_step[step], strict=True)
        low, high = _band(values, band, confidence)
        points.append((statistics.fmean(xs), statistics.fmean(values), low, high, len(values)))
    return points


@dataclass(frozen=True)
class ForestRow:
    """One row of the report figure's forest plot: a setting's final loss minus the baseline's (the mean over
    paired seeds and its interval), and the verdict the table gives it; the baseline's row is 0 by definition.
    Without a baseline, each setting's own mean and interval."""

    label: str
    mean: float | None  # None: no finite difference (no result, or every seed diverged)
    low: float | None
    high: float | None
    verdict: str
    baseline: bool = False


def forest_rows(report: SweepReport) -> list[ForestRow]:
    """The Answer's rows, as the figure draws them: the baseline first, then the settings it judges in the
    table's order, each at the comparison that answers it."""
    columns, baseline = _family_names(report), report.family_baseline
    if baseline is None:  # a ladder's verdicts are each level's, drawn in ladder.png
        verdict = "judged per level: ladder.png" if report.ladder else "no baseline named: no verdict"
        return [ForestRow(s.label(columns), *_interval(s.estimate), verdict) for s in report.family]
    rows = [ForestRow(baseline.label(columns), 0.0, None, None, "baseline", baseline=True)]
    for setting in report.family:
        # As the Answer: the added seeds' comparison where the sweep's own left the row open.
        c = setting.answer
        if setting is baseline or c is None:
            continue
        label = setting.label(columns) + (" (added seeds)" if c is setting.added else "")
        rows.append(ForestRow(label, *_interval(c.difference), c.verdict))
    return rows


def _family_names(report: SweepReport) -> list[str]:
    """The columns that name the family's rows in the figure: those that vary between them, as the report's
    tables name them (the shared ones are in no row: `norm=pre norm_type=layer` on every row squeezed the plot)."""
    return report.shown_family_columns or report.family_columns


def _interval(e: Estimate | None) -> tuple[float | None, float | None, float | None]:
    if e is None or not math.isfinite(e.mean):
        return None, None, None
    return (e.mean, e.low, e.high) if e.has_interval else (e.mean, None, None)


def plot_report(
    report: SweepReport, path: Path, x_axis: str = "step", band: str = "minmax", curve: str | None = None
) -> Path:
    """report.png: what the verdict table says (`plot_verdicts`) above the curves (`plot_curves`)."""
    report_figure(report, x_axis, band, curve).savefig(path, dpi=120)
    return path


def report_figure(
    report: SweepReport, x_axis: str = "step", band: str = "minmax", curve: str | None = None
) -> Figure:
    from matplotlib.figure import Figure

    rows = forest_rows(report)
    labels = [s.label(_setting_names(report)) for s in report.settings]
    legend_columns = 1 if max(map(len, labels), default=0) > 45 else 2
    legend_rows = math.ceil(len(labels) / legend_columns)
    lines = sum(map(_row_lines, rows))
    forest_height, curves_height = 1.4 + 0.3 * lines, 4.5 + 0.2 * legend_rows
    figure = Figure(figsize=(11, forest_height + curves_height), layout="constrained")
    verdicts, curves = figure.subplots(2, 1, height_ratios=[forest_height, curves_height])
    plot_verdicts(verdicts, report, rows)
    plot_curves(curves, report, x_axis, band, curve)
    figure.suptitle(textwrap.fill(report_title(report), TITLE_WIDTH), fontsize="large")
    figure.legend(*curves.get_legend_handles_labels(), fontsize="small", loc="outside lower center",
                  ncols=legend_columns, frameon=False)  # fmt: skip
    return figure


# Characters per line of a figure's title.
TITLE_WIDTH = 110


def _setting_names(report: SweepReport) -> list[str]:
    """The columns that name the settings in the curves' legend: those the sweep varies."""
    return report.swept_columns or report.setting_columns


def report_title(report: SweepReport) -> str:
    """What the sweep compares and against what, e.g. `experiment=norm_act_sweep: norm × act, final
    validation loss against norm=pre act=gelu`: the axes it varies (`SweepReport.swept_columns`), nothing
    every run shares."""
    compared = " × ".join(report.swept_columns) or "one setting"
    baseline = report.family_baseline
    if report.ladder is not None:
        against = f"(judged level by level along {' × '.join(report.axis)}: ladder.png)"
    elif baseline is None:
        against = "(no baseline named)"
    else:
        tuned = f", each at its tuned {LR}" if report.lr_varies else ""
        against = f"against {baseline.label(_family_names(report))}{tuned}"
    experiment = report.common.get("experiment")
    return f"{f'experiment={experiment}: ' if experiment else ''}{compared}, {report.metric.noun} {against}"


def plot_verdicts(
    axes: Axes, report: SweepReport, rows: Sequence[ForestRow], differences: bool | None = None
) -> None:
    """The forest plot: a row per setting, its difference from the baseline (a dot) with its interval (a bar),
    the ±δ band within which no difference is worth a claim, and the table's verdict at the right.
    `differences`: whether the rows are differences (default: the report has a baseline)."""
    differences = report.family_baseline is not None if differences is None else differences
    metric = report.metric
    measured = "final validation loss (loss/val_full)" if metric.is_loss else f"{metric.noun} ({metric.tag})"
    ys = list(range(len(rows)))[::-1]  # the first row at the top
    colours = [_verdict_colour(row) for row in rows]
    for y, row, colour in zip(ys, rows, colours, strict=True):
        if row.mean is None:
            continue
        spread = {}
        if row.low is not None and row.high is not None:
            spread = {"xerr": [[row.mean - row.low], [row.high - row.mean]], "capsize": 3}
        axes.errorbar([row.mean], [y], **spread, marker="D" if row.baseline else "o", color=colour)
    axes.set_yticks(ys, [_row_name(row) for row in rows])
    # The verdicts as the right axis's labels, so that the layout makes room for them.
    verdicts = axes.secondary_yaxis("right")
    verdicts.set_yticks(ys, [_verdict_text(row) for row in rows])
    for label, colour in zip(verdicts.get_yticklabels(), colours, strict=True):
        label.set_color(colour)
    verdicts.tick_params(length=0)
    axes.set_ylim(-0.6, len(rows) - 0.4)
    if differences:
        axes.axvline(0.0, color="black", linewidth=0.8)
        delta = report.min_effect
        axes.axvspan(-delta, delta, color="grey", alpha=0.15, linewidth=0)
        axes.annotate(f"±δ = {delta:g}{'' if metric.is_loss else ' ' + metric.units}: no difference worth a claim", (0.0, 1.0), xycoords=("data", "axes fraction"),
                      xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize="x-small",
                      color="grey")  # fmt: skip
        axes.set_xlabel(
            f"{measured} minus the baseline's, {metric.units}: lower is better\n"
            f"(mean over paired seeds, {report.confidence:.0%} CI)"
        )
    else:
        axes.set_xlabel(f"{measured}, {metric.units}: lower is better\n"
                        f"(mean over seeds, {report.confidence:.0%} CI)")  # fmt: skip
    axes.xaxis.set_major_locator(_roomy_ticks())
    axes.grid(alpha=0.3, axis="x")


def _roomy_ticks() -> Locator:
    """matplotlib's default ticks, as many as fit labels `LABEL_EMS` wide in the axis' length when drawn: the
    default counts 3 ems a label, and `−0.0075` is 4.4, so where the rows' names and verdicts narrowed the
    forest plot its labels overlapped."""
    from matplotlib.ticker import MaxNLocator

    class RoomyTicks(MaxNLocator):
        def __call__(self) -> Sequence[float]:
            # get_tick_space: the labels of 3 ems that fit; at most 9 ticks, as the default.
            self.set_params(nbins=min(9, max(2, self.axis.get_tick_space() * 3 // LABEL_EMS)))
            return super().__call__()

    return RoomyTicks(steps=[1, 2, 2.5, 5, 10])  # AutoLocator's, the default


# The widest x tick label a forest plot leaves room for, in ems of its font (with the gap to the next).
LABEL_EMS = 5


def _row_name(row: ForestRow) -> str:
    """The row's setting, wrapped as its verdict is."""
    return textwrap.fill(f"{row.label}  (baseline)" if row.baseline else row.label, NAME_WIDTH)


def _row_lines(row: ForestRow) -> int:
    """The lines a forest row's labels take: its height in the figure."""
    return max(_row_name(row).count("\n"), _verdict_text(row).count("\n")) + 1


# Characters per line of a setting's name beside the forest plot.
NAME_WIDTH = 44


def _verdict_text(row: ForestRow) -> str:
    """The verdict as the table words it, wrapped: a long one (why there is no test) would squeeze the plot."""
    text = str(row.verdict) if row.mean is not None else f"{row.verdict} (nothing to draw)"
    return textwrap.fill(text, VERDICT_WIDTH)


# Characters per line of a verdict beside the forest plot.
VERDICT_WIDTH = 34


def _verdict_colour(row: ForestRow) -> str:
    """Worse red, better green (the verdict's outcome), the rest blue."""
    if row.baseline:
        return "black"
    outcome = getattr(row.verdict, "outcome", None)  # the baseline's and no-baseline rows' words are plain
    return {Outcome.WORSE: "tab:red", Outcome.BETTER: "tab:green"}.get(outcome, "tab:blue")


def plot_curves(
    axes: Axes, report: SweepReport, x_axis: str = "step", band: str = "minmax", curve: str | None = None
) -> None:
    """The validation loss (or the scalar `curve` names) against `x_axis`, one colour per setting: the mean
    over its seeds, a band (min-max over seeds, or the confidence interval), the seed count in the legend.
    Settings without a result are dashed and faded."""
    labels = [s.label(_setting_names(report)) for s in report.settings]
    for index, (setting, label) in enumerate(zip(report.settings, labels, strict=True)):
        colour = _colour(index, len(report.settings))
        points = setting_curve(setting, x_axis, band, report.confidence)
        style = {"color": colour} if setting.results else {"color": colour, "alpha": 0.45, "linestyle": "--"}
        seeds = max((p[4] for p in points), default=0)
        label = f"{label} (n={seeds})" + ("" if setting.results else ", no result")
        if not points:
            axes.plot([], [], label=f"{label}, nothing logged", **style)
            continue
        xs, means, lows, highs, _ = zip(*points, strict=True)
        axes.plot(xs, means, label=label, marker=".", markersize=3, **style)
        if seeds > 1:
            axes.fill_between(xs, lows, highs, color=colour, alpha=0.15, linewidth=0)
    band_name = "min-max over seeds" if band == "minmax" else f"{report.confidence:.0%} CI over seeds"
    axes.set_xlabel(X_AXES[x_axis])
    if curve is None:
        _reference_lines(axes, report, ("uniform", "unigram", "bigram"))
    if curve is None and report.metric.level is not None:  # the level the report counts steps or seconds to
        axes.axhline(report.metric.level, color="black", linestyle=":", linewidth=1)
    axes.set_ylabel(curve or "validation loss (nats / char)")
    axes.set_title(f"{curve or 'validation loss'} during training: mean over seeds, band {band_name}",
                   fontsize="medium")  # fmt: skip
    axes.grid(alpha=0.3)


def _reference_lines(axes: Axes, report: SweepReport, levels: Sequence[str]) -> None:
    """The validation split's reference levels as dashed grey lines, labelled at the right edge."""
    if report.reference is None:
        return
    for name in levels:
        value = report.reference[name]
        axes.axhline(value, color="grey", linestyle="--", linewidth=0.8)
        # A level outside the y-limits has no label; one inside takes no part in the layout (a label far
        # outside once squeezed the axes to nothing).
        label = axes.annotate(f"{name} {value:.2f}", (1.0, value), xycoords=("axes fraction", "data"),
                              ha="right", va="bottom", fontsize="x-small", color="grey", annotation_clip=True)  # fmt: skip
        label.set_in_layout(False)


def plot_lr_sensitivity(report: SweepReport, path: Path) -> Path:
    """Final validation loss against learning rate (log axis), one line per setting: the mean over seeds,
    a min-max band; a learning rate where some seed diverged is drawn as x at the top of the axes."""
    columns = [c for c in report.setting_columns if c != LR]
    runs = runs_frame(report.runs, report.setting_columns).dropna(subset=["result"])
    runs["design"] = [setting_label(row, columns) for _, row in runs.iterrows()]
    runs["rate"] = runs[LR].astype(float)
    # Per design and rate: the mean and range over seeds, and whether any seed diverged (+inf).
    points = runs.groupby(["design", "rate"]).result.agg(["mean", "min", "max"])
    points["diverged"] = points["max"] == math.inf
    labels = list(dict.fromkeys(s.label(columns) for s in report.settings if s.results))  # ranked by mean
    figure, axes, legend_columns = _figure(len(labels) + 1, labels)
    finite = runs.result[np.isfinite(runs.result)]
    top = finite.max() + 0.05 * (finite.max() - finite.min() + 1e-9) if len(finite) else 1.0
    for index, label in enumerate(labels):
        colour = _colour(index, len(labels))
        design = points.loc[label]  # indexed by rate, ascending
        alive, dead = design[~design.diverged], design[design.diverged]
        if len(alive):
            axes.plot(alive.index, alive["mean"], marker="o", color=colour, label=label)
            axes.fill_between(alive.index, alive["min"], alive["max"], color=colour, alpha=0.15)
        if len(dead):
            axes.plot(dead.index, [top] * len(dead), linestyle="none", marker="x", markersize=9, color=colour,
                      label=None if len(alive) else label)  # fmt: skip
    failed = "diverged" if report.metric.is_loss else "failed"
    axes.plot(
        [], [], linestyle="none", marker="x", color="black", label=f"a seed {failed} (drawn at the top)"
    )
    axes.set_xscale("log")
    axes.set_ylim(top=top * 1.01)
    axes.set_xlabel("peak learning rate (optim.lr)")
    if report.metric.is_loss:
        _reference_lines(axes, report, ("unigram", "bigram"))
    axes.set_ylabel(f"{report.metric.noun} ({report.metric.units})".replace("nats/char", "nats / char"))
    return _save(figure, axes, f"{report.sweep_dir.name}: learning-rate sensitivity, mean and min-max over seeds",
                 legend_columns, path)  # fmt: skip


@dataclass(frozen=True)
class RunCurve:
    """One run's curve in a why figure: its seed, the tag it logged, and its (step, value) readings."""

    seed: str
    tag: str
    points: Sequence[tuple[int, float]]


# One marker per seed, drawn hollow: runs at the same point stay told apart (21, past a design's 16 seeds).
SEED_MARKERS = (
    "o",
    "s",
    "^",
    "v",
    "D",
    "<",
    ">",
    "p",
    "h",
    "8",
    "*",
    "P",
    "X",
    "d",
    "H",
    "x",
    "+",
    "1",
    "2",
    "3",
    "4",
)


def plot_health(curves: dict[str, list[RunCurve]], path: Path, title: str) -> Path:
    """`health_figure`, written to `path`."""
    health_figure(curves, title).savefig(path, dpi=120)
    return path


def health_figure(curves: dict[str, list[RunCurve]], title: str) -> Figure:
    """One `training_health/` quantity against the step: a colour per setting (`curves` maps its label to
    its runs) and a marker per seed, each named in a legend, so that every point says which run it is. A log
    axis when every reading is positive; else a linear one (a healthy run's dead_units are 0, which a log
    axis drops)."""
    from matplotlib.lines import Line2D

    labels = list(curves)
    figure, axes, legend_columns = _figure(len(labels), labels)
    runs = [run for setting in curves.values() for run in setting]
    seeds = sorted(
        {run.seed for run in runs},
        key=lambda seed: (not seed.isdigit(), int(seed) if seed.isdigit() else 0, seed),
    )
    markers = {seed: SEED_MARKERS[i % len(SEED_MARKERS)] for i, seed in enumerate(seeds)}
    values: list[float] = []
    for index, (label, setting) in enumerate(curves.items()):
        colour = _colour(index, len(labels))
        drawn = 0
        for run in setting:
            finite = [(step, value) for step, value in run.points if math.isfinite(value)]
            if finite:
                xs, ys = zip(*finite, strict=True)
                axes.plot(xs, ys, color=colour, marker=markers[run.seed], markersize=7, fillstyle="none",
                          linewidth=1)  # fmt: skip
                values += ys
                drawn += 1
        shown = f"{label} ({len(setting)} runs{'' if drawn else ', nothing logged'})"
        axes.plot([], [], color=colour, linewidth=2, label=shown)  # the setting's entry in the legend
    if values and min(values) > 0:
        axes.set_yscale("log")
    axes.set_xlabel(X_AXES["step"])
    axes.set_ylabel(", ".join(sorted({run.tag for run in runs})))
    figure.legend(
        handles=[Line2D([], [], color="black", marker=markers[seed], fillstyle="none", linestyle="none",
                        label=f"seed {seed}") for seed in seeds],
        loc="outside right upper", title="run", fontsize="small", frameon=False,
    )  # fmt: skip
    return _finish(figure, axes, title, legend_columns)


def plot_scale(
    points: dict[str, list[tuple[float, Estimate]]], path: Path, report: SweepReport, title: str
) -> Path:
    """Final validation loss against parameters (log axis), a line per design: `points` maps each design's
    label to its (parameters, estimate over seeds) at every size, the estimate's interval as error bars."""
    labels = list(points)
    figure, axes, legend_columns = _figure(len(labels), labels)
    for index, (label, sizes) in enumerate(points.items()):
        finite = [(n, e) for n, e in sorted(sizes, key=lambda p: p[0]) if math.isfinite(e.mean)]
        if not finite:
            continue
        xs = [n for n, _ in finite]
        ys = [e.mean for _, e in finite]
        below = [e.mean - e.low if e.has_interval else 0.0 for _, e in finite]
        above = [e.high - e.mean if e.has_interval else 0.0 for _, e in finite]
        axes.errorbar(xs, ys, yerr=[below, above], marker="o", capsize=3, color=_colour(index, len(labels)),
                      label=label)  # fmt: skip
    axes.set_xscale("log")
    axes.set_xlabel("parameters (without position embeddings)")
    axes.set_ylabel(f"{report.metric.noun} ({report.metric.units})".replace("nats/char", "nats / char"))
    if report.metric.is_loss:
        _reference_lines(axes, report, ("bigram",))
    return _save(figure, axes, title, legend_columns, path)


def plot_ladder(
    panels: Sequence[tuple[str, Sequence[ForestRow]]],
    across: Sequence[str],
    path: Path,
    report: SweepReport,
    title: str,
) -> Path:
    """ladder.png: a forest plot per level (`panels`: its name and rows, the level's baseline first), on one
    shared axis of differences, each level's verdicts beside its rows; below, the verdict across levels of
    each design (`across`)."""
    from matplotlib.figure import Figure
    from matplotlib.transforms import blended_transform_factory

    heights = [1.2 + 0.35 * sum(map(_row_lines, rows)) for _, rows in panels]
    heights.append(0.3 + 0.25 * sum(len(textwrap.wrap(line, ACROSS_WIDTH)) for line in across))
    figure = Figure(figsize=(11, sum(heights)), layout="constrained")
    axes = figure.subplots(len(heights), 1, height_ratios=heights)
    for panel, (level, rows) in zip(axes, panels, strict=False):
        plot_verdicts(panel, report, rows, differences=True)
        panel.set_title(level, loc="left", fontsize="medium", pad=14)  # above the ±δ note
        panel.sharex(axes[0])
    for panel in axes[:-2]:
        panel.set_xlabel("")
    text = "\n".join(textwrap.fill(line, ACROSS_WIDTH, subsequent_indent="    ") for line in across)
    axes[-1].axis("off")
    # From the figure's left edge, not the axes': the panels' labels would push the lines past its right one.
    left_of_figure = blended_transform_factory(figure.transFigure, axes[-1].transAxes)
    axes[-1].text(0.01, 1.0, text, va="top", ha="left", fontsize="small", transform=left_of_figure)
    figure.suptitle(title, fontsize="large")
    figure.savefig(path, dpi=120)
    return path


# Characters per line of the verdicts across levels under the ladder figure.
ACROSS_WIDTH = 150


def why_figures(report: SweepReport) -> dict[str, dict[str, list[RunCurve]]]:
    """The curves of `why_<quantity>.png` for every health quantity a *Why* row's finding names: that tag in
    each explained setting's judged runs, and the same block's in the runs of the baseline it is judged
    against; by quantity, then by the label of the runs' setting (its choices the sweep varies)."""
    wanted: dict[str, dict[str, list[RunCurve]]] = {}
    for row in report.why:
        columns = [c for c in row.design if c in report.swept_columns] or list(row.design)
        for f in row.findings:
            name, tag = quantity(f.example.tag), f.example.tag
            if not name:
                continue
            curves = wanted.setdefault(name, {})
            label = row.setting.label(columns)
            curves.pop(f"{label} (baseline)", None)  # a baseline explained in its own right: drawn once
            curves[label] = [
                RunCurve(run.seed, tag, run.health.get(tag, [])) for run in judged_runs(row.setting)
            ]
            base = report.baseline_of(row.setting)
            if base is not None and base is not row.setting and base.label(columns) not in curves:
                curves.setdefault(
                    f"{base.label(columns)} (baseline)",
                    [RunCurve(run.seed, tag, run.health.get(tag, [])) for run in judged_runs(base)],
                )
    return wanted


def draw_why(report: SweepReport) -> list[Path]:
    """Draws each of `why_figures` into the sweep directory."""
    return [
        plot_health(
            curves,
            report.sweep_dir / why_figure(name),
            f"{report.sweep_dir.name}: {name}, the runs diagnosed and their baselines",
        )
        for name, curves in why_figures(report).items()
    ]
