"""The report's figures: what the verdict table says (each setting's difference from the baseline with its
interval and verdict, a forest plot) above the validation-loss curves per setting (mean over seeds with a
band); when the learning rate varies, final validation loss against learning rate; a ladder's forest plots
and, on the scale ladder, loss against size; a *Why* row's health curves. Each draws what the report value
holds (`SweepReport`, its `Setting`s and `WhyRow`s); rendered headless (matplotlib's Agg)."""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinylm.analysis.estimates import Estimate, estimate
from tinylm.analysis.grouping import LR, Setting
from tinylm.analysis.metric import Metric
from tinylm.analysis.outcome import Outcome
from tinylm.analysis.report import SweepReport
from tinylm.analysis.runs import natural_key
from tinylm.analysis.why import judged_runs, quantity, why_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import Locator

X_AXES = {"step": "optimizer step", "chars": "training characters", "time": "wall time (s)"}
# Characters per line: of a figure's title, a setting's name and a verdict beside a forest plot, and the
# verdicts across levels under the ladder figure.
TITLE_WIDTH, NAME_WIDTH, VERDICT_WIDTH, ACROSS_WIDTH = 110, 44, 34, 150
# The widest x tick label a forest plot leaves room for, in ems of its font (with the gap to the next).
LABEL_EMS = 5
# One marker per seed, drawn hollow: runs at the same point stay told apart (21, past a design's 16 seeds).
SEED_MARKERS = tuple("os^vD<>ph8*PXdHx+1234")


def _written(figure: Figure, path: Path) -> Path:
    """Every figure is written here, at one resolution."""
    figure.savefig(path, dpi=120)
    return path


def _legend_columns(labels: Sequence[str]) -> int:
    return 1 if max(map(len, labels), default=0) > 45 else 2


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _figure(labels: Sequence[str], legend_entries: int | None = None) -> tuple[Figure, Axes, int]:
    """One axes, tall enough for a legend below it of `legend_entries` (default: one per label)."""
    columns = _legend_columns(labels)
    entries = len(labels) if legend_entries is None else legend_entries
    figure = _new_figure(10, 5 + 0.2 * math.ceil(entries / columns))
    return figure, figure.subplots(), columns


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


def _y_label(metric: Metric) -> str:
    """The y axis of a figure of results: `final validation loss (nats / char)`."""
    return f"{metric.noun} ({'nats / char' if metric.is_loss else metric.units})"


def _reference_lines(axes: Axes, report: SweepReport, levels: Sequence[str]) -> None:
    """The validation split's reference levels as dashed grey lines, labelled at the right edge."""
    for name in levels if report.reference is not None else ():
        value = report.reference[name]
        axes.axhline(value, color="grey", linestyle="--", linewidth=0.8)
        # A level outside the y-limits has no label; one inside takes no part in the layout (a label far
        # outside once squeezed the axes to nothing).
        label = axes.annotate(f"{name} {value:.2f}", (1.0, value), xycoords=("axes fraction", "data"),
                              ha="right", va="bottom", fontsize="x-small", color="grey", annotation_clip=True)  # fmt: skip
        label.set_in_layout(False)


@dataclass(frozen=True)
class ForestRow:
    """One row of a forest plot: a setting's final loss minus the baseline's (the mean over paired seeds and
    its interval), and the verdict the table gives it; the baseline's row is 0 by definition. Without a
    baseline, each setting's own mean and interval."""

    label: str
    mean: float | None  # None: no finite difference (no result, or every seed diverged)
    low: float | None
    high: float | None
    verdict: str
    baseline: bool = False

    @classmethod
    def of_baseline(cls, label: str) -> ForestRow:
        return cls(label, 0.0, None, None, "baseline", baseline=True)

    @classmethod
    def of(cls, label: str, e: Estimate | None, verdict: Any) -> ForestRow:
        """The row of an estimate (a difference, or a setting's own) and its verdict."""
        if e is None or not math.isfinite(e.mean):
            return cls(label, None, None, None, verdict)
        low, high = (e.low, e.high) if e.has_interval else (None, None)
        return cls(label, e.mean, low, high, verdict)


def forest_rows(report: SweepReport) -> list[ForestRow]:
    """The Answer's rows, as the figure draws them: the baseline first, then the settings it judges in the
    table's order, each at the comparison that answers it (`Setting.answer`: the added seeds' where the
    sweep's own left the row open)."""
    columns, baseline = _family_names(report), report.family_baseline
    if baseline is None:  # a ladder's verdicts are each level's, drawn in ladder.png
        verdict = "judged per level: ladder.png" if report.ladder else "no baseline named: no verdict"
        return [ForestRow.of(s.label(columns), s.estimate, verdict) for s in report.family]
    rows = [ForestRow.of_baseline(baseline.label(columns))]
    for s in report.family:
        c = s.answer
        if s is not baseline and c is not None:
            label = s.label(columns) + (" (added seeds)" if c is s.added else "")
            rows.append(ForestRow.of(label, c.tests.difference, c.judgement.verdict))
    return rows


def _family_names(report: SweepReport) -> list[str]:
    """The columns that name the family's rows in the figure: those that vary between them, as the report's
    tables name them (the shared ones are in no row: `norm=pre norm_type=layer` on every row squeezed the plot)."""
    return report.shown_family_columns or report.family_columns


def _curve_labels(report: SweepReport) -> list[str]:
    """The settings as the curves' legend names them: by the columns the sweep varies."""
    return [s.label(report.swept_columns or report.setting_columns) for s in report.settings]


def plot_report(
    report: SweepReport, path: Path, x_axis: str = "step", band: str = "minmax", curve: str | None = None
) -> Path:
    """report.png: what the verdict table says (`plot_verdicts`) above the curves (`plot_curves`)."""
    return _written(report_figure(report, x_axis, band, curve), path)


def report_figure(
    report: SweepReport, x_axis: str = "step", band: str = "minmax", curve: str | None = None
) -> Figure:
    rows, legend_columns = forest_rows(report), _legend_columns(_curve_labels(report))
    legend_rows = math.ceil(len(report.settings) / legend_columns)
    forest_height, curves_height = 1.4 + 0.3 * sum(map(_row_lines, rows)), 4.5 + 0.2 * legend_rows
    figure = _new_figure(11, forest_height + curves_height)
    verdicts, curves = figure.subplots(2, 1, height_ratios=[forest_height, curves_height])
    plot_verdicts(verdicts, report, rows)
    plot_curves(curves, report, x_axis, band, curve)
    figure.suptitle(textwrap.fill(report_title(report), TITLE_WIDTH), fontsize="large")
    figure.legend(*curves.get_legend_handles_labels(), fontsize="small", loc="outside lower center",
                  ncols=legend_columns, frameon=False)  # fmt: skip
    return figure


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
    minus, over = (" minus the baseline's", "paired seeds") if differences else ("", "seeds")
    axes.set_xlabel(f"{measured}{minus}, {metric.units}: lower is better\n"
                    f"(mean over {over}, {report.confidence:.0%} CI)")  # fmt: skip
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


def _row_name(row: ForestRow) -> str:
    """The row's setting, wrapped as its verdict is."""
    return textwrap.fill(f"{row.label}  (baseline)" if row.baseline else row.label, NAME_WIDTH)


def _row_lines(row: ForestRow) -> int:
    """The lines a forest row's labels take: its height in the figure."""
    return max(_row_name(row).count("\n"), _verdict_text(row).count("\n")) + 1


def _verdict_text(row: ForestRow) -> str:
    """The verdict as the table words it, wrapped: a long one (why there is no test) would squeeze the plot."""
    text = str(row.verdict) if row.mean is not None else f"{row.verdict} (nothing to draw)"
    return textwrap.fill(text, VERDICT_WIDTH)


def _verdict_colour(row: ForestRow) -> str:
    """Worse red, better green (the verdict's outcome), the rest blue."""
    if row.baseline:
        return "black"
    outcome = getattr(row.verdict, "outcome", None)  # the baseline's and no-baseline rows' words are plain
    return {Outcome.WORSE: "tab:red", Outcome.BETTER: "tab:green"}.get(outcome, "tab:blue")


def setting_curve(
    setting: Setting, x_axis: str, band: str, confidence: float = 0.95
) -> list[tuple[float, float, float, float, int]]:
    """(x, mean, band low, band high, seeds) at every step some run of the setting logged a finite value. The
    one statistic drawn that the report value does not hold: it is over the runs' logged curves, on the
    figure's own x axis and band (`--x`, `--band`)."""
    by_step: dict[int, list[tuple[float, float]]] = {}
    for run in setting.runs:
        for step, value, seconds in run.curve:
            chars = None if run.chars_per_step is None else float(step * run.chars_per_step)
            x = {"chars": chars, "time": seconds}.get(x_axis, float(step))
            if math.isfinite(value) and x is not None:
                by_step.setdefault(step, []).append((x, value))
    points = []
    for step in sorted(by_step):
        xs, values = zip(*by_step[step], strict=True)
        e = estimate(values, confidence) if band == "ci" and len(values) > 1 else None
        low, high = (e.low, e.high) if e is not None else (min(values), max(values))
        points.append((statistics.fmean(xs), statistics.fmean(values), low, high, len(values)))
    return points


def plot_curves(
    axes: Axes, report: SweepReport, x_axis: str = "step", band: str = "minmax", curve: str | None = None
) -> None:
    """The validation loss (or the scalar `curve` names) against `x_axis`, one colour per setting: the mean
    over its seeds, a band (min-max over seeds, or the confidence interval), the seed count in the legend.
    Settings without a result are dashed and faded."""
    for index, (setting, label) in enumerate(zip(report.settings, _curve_labels(report), strict=True)):
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


def plot_lr_sensitivity(report: SweepReport, path: Path) -> Path:
    """Final validation loss against learning rate (log axis), one line per design (`report.tuned`, each
    with its results at every rate, `Setting.by_rate`): the mean over seeds, a min-max band; a learning
    rate where some seed failed is drawn as x at the top of the axes. The designs in the settings table's
    order (ranked by mean)."""
    tuned = {s.label(report.family_columns): s for s in report.tuned}
    labels = list(dict.fromkeys(s.label(report.family_columns) for s in report.settings if s.results))
    figure, axes, legend_columns = _figure(labels, len(labels) + 1)
    results = [v for s in report.tuned for by_seed in s.by_rate.values() for v in by_seed.values()]
    finite = [v for v in results if math.isfinite(v)]
    top = max(finite) + 0.05 * (max(finite) - min(finite) + 1e-9) if finite else 1.0
    for index, label in enumerate(labels):
        colour = _colour(index, len(labels))
        rates = sorted(
            (float(rate), list(by_seed.values())) for rate, by_seed in tuned[label].by_rate.items() if by_seed
        )
        alive = [(rate, values) for rate, values in rates if math.inf not in values]
        dead = [rate for rate, values in rates if math.inf in values]
        if alive:
            xs, values = zip(*alive, strict=True)
            axes.plot(xs, list(map(statistics.fmean, values)), marker="o", color=colour, label=label)
            axes.fill_between(xs, list(map(min, values)), list(map(max, values)), color=colour, alpha=0.15)
        if dead:
            axes.plot(dead, [top] * len(dead), linestyle="none", marker="x", markersize=9, color=colour,
                      label=None if alive else label)  # fmt: skip
    # A failure as the report counts it: under the cross-fitted rule (format 2 and before), only a divergence.
    failed = "failed" if report.judged_apart or not report.metric.is_loss else "diverged"
    axes.plot(
        [], [], linestyle="none", marker="x", color="black", label=f"a seed {failed} (drawn at the top)"
    )
    axes.set_xscale("log")
    axes.set_ylim(top=top * 1.01)
    axes.set_xlabel("peak learning rate (optim.lr)")
    if report.metric.is_loss:
        _reference_lines(axes, report, ("unigram", "bigram"))
    axes.set_ylabel(_y_label(report.metric))
    title = f"{report.sweep_dir.name}: learning-rate sensitivity, mean and min-max over seeds"
    return _written(_finish(figure, axes, title, legend_columns), path)


@dataclass(frozen=True)
class RunCurve:
    """One run's curve in a why figure: its seed, the tag it logged, and its (step, value) readings."""

    seed: str
    tag: str
    points: Sequence[tuple[int, float]]


def health_figure(curves: dict[str, list[RunCurve]], title: str) -> Figure:
    """One `training_health/` quantity against the step: a colour per setting (`curves` maps its label to
    its runs) and a marker per seed, each named in a legend, so that every point says which run it is. A log
    axis when every reading is positive; else a linear one (a healthy run's dead_units are 0, which a log
    axis drops)."""
    from matplotlib.lines import Line2D

    figure, axes, legend_columns = _figure(list(curves))
    runs = [run for setting in curves.values() for run in setting]
    seeds = sorted({run.seed for run in runs}, key=natural_key)
    markers = {seed: SEED_MARKERS[i % len(SEED_MARKERS)] for i, seed in enumerate(seeds)}
    finite = {id(run): [(x, y) for x, y in run.points if math.isfinite(y)] for run in runs}
    for index, (label, setting) in enumerate(curves.items()):
        colour = _colour(index, len(curves))
        for run in (run for run in setting if finite[id(run)]):
            axes.plot(*zip(*finite[id(run)], strict=True), color=colour, marker=markers[run.seed], markersize=7,
                      fillstyle="none", linewidth=1)  # fmt: skip
        drawn = any(finite[id(run)] for run in setting)
        shown = f"{label} ({len(setting)} runs{'' if drawn else ', nothing logged'})"
        axes.plot([], [], color=colour, linewidth=2, label=shown)  # the setting's entry in the legend
    values = [y for points in finite.values() for _, y in points]
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
    label to its (parameters, estimate over seeds) at every size, smallest first (the ladder's order), the
    estimate's interval as error bars."""
    figure, axes, legend_columns = _figure(list(points))
    for index, (label, sizes) in enumerate(points.items()):
        finite = [(n, e) for n, e in sizes if math.isfinite(e.mean)]
        if finite:
            below = [e.mean - e.low if e.has_interval else 0.0 for _, e in finite]
            above = [e.high - e.mean if e.has_interval else 0.0 for _, e in finite]
            axes.errorbar([n for n, _ in finite], [e.mean for _, e in finite], yerr=[below, above], marker="o",
                          capsize=3, color=_colour(index, len(points)), label=label)  # fmt: skip
    axes.set_xscale("log")
    axes.set_xlabel("parameters (without position embeddings)")
    axes.set_ylabel(_y_label(report.metric))
    if report.metric.is_loss:
        _reference_lines(axes, report, ("bigram",))
    return _written(_finish(figure, axes, title, legend_columns), path)


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
    from matplotlib.transforms import blended_transform_factory

    heights = [1.2 + 0.35 * sum(map(_row_lines, rows)) for _, rows in panels]
    heights.append(0.3 + 0.25 * sum(len(textwrap.wrap(line, ACROSS_WIDTH)) for line in across))
    figure = _new_figure(11, sum(heights))
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
    return _written(figure, path)


def why_figures(report: SweepReport) -> dict[str, dict[str, list[RunCurve]]]:
    """The curves of `why_<quantity>.png` for every health quantity a *Why* row's finding names: that tag in
    each explained setting's judged runs, and the same block's in the runs of the baseline it is judged
    against; by quantity, then by the label of the runs' setting (its choices the sweep varies)."""
    wanted: dict[str, dict[str, list[RunCurve]]] = {}
    for row in report.why:
        columns = [c for c in row.design if c in report.swept_columns] or list(row.design)
        label, base = row.setting.label(columns), report.baseline_of(row.setting)
        for tag in (f.example.tag for f in row.findings if quantity(f.example.tag)):
            curves = wanted.setdefault(quantity(tag), {})
            curves.pop(f"{label} (baseline)", None)  # a baseline explained in its own right: drawn once
            curves[label] = _run_curves(row.setting, tag)
            if base is not None and base is not row.setting and base.label(columns) not in curves:
                curves.setdefault(f"{base.label(columns)} (baseline)", _run_curves(base, tag))
    return wanted


def _run_curves(setting: Setting, tag: str) -> list[RunCurve]:
    return [RunCurve(run.seed, tag, run.health.get(tag, [])) for run in judged_runs(setting)]


def draw_why(report: SweepReport) -> list[Path]:
    """Draws each of `why_figures` into the sweep directory."""
    return [
        _written(
            health_figure(curves, f"{report.sweep_dir.name}: {name}, the runs diagnosed and their baselines"),
            report.sweep_dir / why_figure(name),
        )
        for name, curves in why_figures(report).items()
    ]
