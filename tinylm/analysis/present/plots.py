"""The report's figures (report.png, lr_sensitivity.png, ladder.png, scale.png, why_<quantity>.png), drawn
from the report value and rendered headless (matplotlib's Agg); docs/sweeps.md says what each shows."""

import math
import statistics
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Self

from matplotlib import colormaps, lines, ticker, transforms
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tinylm.analysis.estimates import Estimate, estimate
from tinylm.analysis.grouping import LR, Setting, setting_label
from tinylm.analysis.ladder import Ladder, LadderKind
from tinylm.analysis.present.formats import ladder_title, level_label
from tinylm.analysis.report import SweepReport
from tinylm.analysis.runs import natural_key
from tinylm.analysis.verdicts import Outcome
from tinylm.analysis.why import judged_runs, quantity
from tinylm.layout import WHY_PNG

X_AXES = {"step": "optimizer step", "chars": "training characters", "time": "wall time (s)"}
TITLE_WIDTH, NAME_WIDTH, VERDICT_WIDTH, ACROSS_WIDTH = 110, 44, 34, 150  # characters per line
SEED_MARKERS = tuple("os^vD<>ph8*PXdHx+1234")  # hollow, one per seed (past a design's 16): runs told apart


def save_figure(figure: Figure, path: Path) -> Path:
    """`figure` written to `path` as PNG at the report's one resolution; returns `path`."""
    figure.savefig(path, dpi=120)  # every figure at one resolution
    return path


def _figure(labels: list[str], panels: Sequence[float] = (), bottom: float = 5) -> tuple[Figure, Any, int]:
    """Forest plots `panels` high above axes `bottom` high (alone: the axes), and `labels`' legend columns."""
    columns = 1 if max(map(len, labels), default=0) > 45 else 2
    heights = [*panels, bottom + 0.2 * math.ceil(len(labels) / columns)]
    figure = Figure(figsize=(11 if panels else 10, sum(heights)), layout="constrained")
    return figure, figure.subplots(len(heights), height_ratios=heights), columns


def _finish(figure: Figure, axes: Axes, title: str, columns: int, **title_style: Any) -> Figure:
    axes.set_title(title, **title_style)
    axes.grid(alpha=0.3, which="both")
    figure.legend(fontsize="small", loc="outside lower center", ncols=columns, frameon=False)
    return figure


def _colours(count: int) -> list[Any]:
    colours = colormaps["tab10" if count <= 10 else "tab20"]
    return [colours(index % colours.N) for index in range(count)]


def _y_label(report: SweepReport) -> str:
    return f"{report.metric.noun} ({'nats / char' if report.metric.is_loss else report.metric.units})"


def _reference_lines(axes: Axes, report: SweepReport, levels: Sequence[str]) -> None:
    for name in levels if report.reference is not None else ():
        value = report.reference[name]
        axes.axhline(value, color="grey", linestyle="--", linewidth=0.8)
        # Clipped outside the y-limits, out of the layout: a label far outside squeezed the axes to nothing.
        axes.annotate(f"{name} {value:.2f}", (1.0, value), xycoords=("axes fraction", "data"),
                      ha="right", va="bottom", fontsize="x-small", color="grey",
                      annotation_clip=True, in_layout=False)  # fmt: skip


class ForestRow(NamedTuple):
    """A setting's row in a forest plot: its difference from the baseline (0 for itself), or with no
    baseline its mean, with its interval and verdict."""

    label: str
    mean: float | None  # None: no finite difference (no result, or every seed diverged)
    low: float | None
    high: float | None
    verdict: str
    baseline: bool = False

    @classmethod
    def of_baseline(cls, label: str) -> Self:
        """The baseline's own row: drawn at 0, labelled as the baseline."""
        return cls(label, 0.0, None, None, "baseline", baseline=True)

    @classmethod
    def of(cls, label: str, e: Estimate | None, verdict: str) -> Self:
        """The row of an estimate `e` (a difference or a mean); nothing to draw where it is not finite."""
        if e is None or not math.isfinite(e.mean):
            return cls(label, None, None, None, verdict)
        low, high = (e.low, e.high) if e.has_interval else (None, None)
        return cls(label, e.mean, low, high, verdict)

    def name(self) -> str:
        """Its label as the plot prints it, wrapped (the baseline's marked)."""
        return textwrap.fill(f"{self.label}  (baseline)" if self.baseline else self.label, NAME_WIDTH)

    def verdict_text(self) -> str:
        """Its verdict as the plot prints it, wrapped: a long one (why there is no test) would squeeze the
        plot."""
        text = str(self.verdict) if self.mean is not None else f"{self.verdict} (nothing to draw)"
        return textwrap.fill(text, VERDICT_WIDTH)

    def lines(self) -> int:
        """The text lines the row takes in the plot: its height."""
        return max(self.name().count("\n"), self.verdict_text().count("\n")) + 1

    def colour(self) -> str:
        """Its marker's colour: red for worse, green for better, black for the baseline, else blue."""
        colours = {Outcome.WORSE: "tab:red", Outcome.BETTER: "tab:green"}  # a plain word: no outcome
        return "black" if self.baseline else colours.get(getattr(self.verdict, "outcome", None), "tab:blue")


def forest_rows(report: SweepReport) -> list[ForestRow]:
    """The Answer's rows: the baseline, then each setting it judges at the comparison that answers it."""
    # Named by the columns that vary between the rows: the shared ones on every row squeezed the plot.
    columns, baseline = report.shown_family_columns or report.family_columns, report.family_baseline
    if baseline is None:  # a ladder's verdicts are each level's, drawn in ladder.png
        verdict = "judged per level: ladder.png" if report.ladder else "no baseline named: no verdict"
        return [ForestRow.of(s.label(columns), s.estimate, verdict) for s in report.family]
    rows = [ForestRow.of_baseline(baseline.label(columns))]
    for s in report.family:
        if s is not baseline and (c := s.answer) is not None:
            label = s.label(columns) + (" (added seeds)" if c is s.added else "")
            rows.append(ForestRow.of(label, c.tests.difference, c.judgement.verdict))
    return rows


def report_title(report: SweepReport) -> str:
    """What the sweep compares (the axes it varies, nothing every run shares) and against what."""
    compared = " × ".join(report.swept_columns) or "one setting"
    if report.ladder is not None:
        against = f"(judged level by level along {' × '.join(report.axis)}: ladder.png)"
    elif report.family_baseline is None:
        against = "(no baseline named)"
    else:
        tuned = f", each at its tuned {LR}" if report.lr_varies else ""
        against = f"against {forest_rows(report)[0].label}{tuned}"
    experiment = report.common.get("experiment")
    return f"{f'experiment={experiment}: ' if experiment else ''}{compared}, {report.metric.noun} {against}"


def report_figure(
    report: SweepReport, x_axis: str = "step", band: str = "minmax", curve: str | None = None
) -> Figure:
    """The forest plot above each setting's curve (`curve`, else validation loss), dashed without a result."""
    rows = forest_rows(report)
    labels = [s.label(report.swept_columns or report.setting_columns) for s in report.settings]
    figure, (verdicts, axes), columns = _figure(labels, [1.4 + 0.3 * sum(row.lines() for row in rows)], 4.5)
    plot_verdicts(verdicts, report, rows, differences=report.family_baseline is not None)
    for setting, label, colour in zip(report.settings, labels, _colours(len(labels)), strict=True):
        points = list(setting_curve(setting, x_axis, band, report.confidence))
        style = {"color": colour} if setting.results else {"color": colour, "alpha": 0.45, "linestyle": "--"}
        seeds = max((p.seeds for p in points), default=0)
        label = f"{label} (n={seeds})" + ("" if setting.results else ", no result")
        if not points:
            axes.plot([], [], label=f"{label}, nothing logged", **style)
            continue
        xs, means, lows, highs, _ = zip(*points, strict=True)
        axes.plot(xs, means, label=label, marker=".", markersize=3, **style)
        if seeds > 1:
            axes.fill_between(xs, lows, highs, color=colour, alpha=0.15, linewidth=0)
    _reference_lines(axes, report, ("uniform", "unigram", "bigram") if curve is None else ())
    if curve is None and report.metric.level is not None:  # the level the report counts steps or seconds to
        axes.axhline(report.metric.level, color="black", linestyle=":", linewidth=1)
    band_name = "min-max over seeds" if band == "minmax" else f"{report.confidence:.0%} CI over seeds"
    axes.set(xlabel=X_AXES[x_axis], ylabel=curve or "validation loss (nats / char)")
    figure.suptitle(textwrap.fill(report_title(report), TITLE_WIDTH), fontsize="large")
    title = f"{curve or 'validation loss'} during training: mean over seeds, band {band_name}"
    return _finish(figure, axes, title, columns, fontsize="medium")


def plot_verdicts(axes: Axes, report: SweepReport, rows: Sequence[ForestRow], differences: bool) -> None:
    """A row's mean (a dot), interval (a bar) and verdict (at the right); with `differences`, the ±δ band."""
    metric = report.metric
    ys = list(range(len(rows)))[::-1]  # the first row at the top
    for y, row in zip(ys, rows, strict=True):
        if row.mean is not None:
            xerr = None if row.low is None else [[row.mean - row.low], [row.high - row.mean]]
            marker = "D" if row.baseline else "o"
            axes.errorbar([row.mean], [y], xerr=xerr, capsize=3, marker=marker, color=row.colour())
    axes.set_yticks(ys, [row.name() for row in rows])
    verdicts = axes.secondary_yaxis("right")  # the verdicts as its labels: the layout makes room for them
    verdicts.set_yticks(ys, [row.verdict_text() for row in rows])
    for label, row in zip(verdicts.get_yticklabels(), rows, strict=True):
        label.set_color(row.colour())
    verdicts.tick_params(length=0)
    axes.set_ylim(-0.6, len(rows) - 0.4)
    if differences:
        axes.axvline(0.0, color="black", linewidth=0.8)
        axes.axvspan(-report.min_effect, report.min_effect, color="grey", alpha=0.15, linewidth=0)
        units = "" if metric.is_loss else " " + metric.units
        axes.annotate(f"±δ = {report.min_effect:g}{units}: no difference worth a claim", (0.0, 1.0),
                      xycoords=("data", "axes fraction"), xytext=(0, 2), textcoords="offset points",
                      ha="center", va="bottom", fontsize="x-small", color="grey")  # fmt: skip
    measured = "final validation loss (loss/val_full)" if metric.is_loss else f"{metric.noun} ({metric.tag})"
    minus, over = (" minus the baseline's", "paired seeds") if differences else ("", "seeds")
    axes.set_xlabel(f"{measured}{minus}, {metric.units}: lower is better\n"
                    f"(mean over {over}, {report.confidence:.0%} CI)")  # fmt: skip
    axes.xaxis.set_major_locator(_RoomyTicks(steps=[1, 2, 2.5, 5, 10]))  # AutoLocator's steps, the default
    axes.grid(alpha=0.3, axis="x")


class _RoomyTicks(ticker.MaxNLocator):
    """matplotlib's default ticks, as many as fit labels 5 ems wide (its 3 ems overlapped `−0.0075`)."""

    def __call__(self) -> Sequence[float]:
        # get_tick_space: the labels of 3 ems that fit (5 leave a gap); at most 9 ticks, as the default.
        self.set_params(nbins=min(9, max(2, self.axis.get_tick_space() * 3 // 5)))
        return super().__call__()


class CurvePoint(NamedTuple):
    """A setting's curve at one step: the mean over its seeds, the band around it, and how many seeds."""

    x: float
    mean: float
    low: float
    high: float
    seeds: int


def setting_curve(setting: Setting, x_axis: str, band: str, confidence: float) -> Iterator[CurvePoint]:
    """A point per step of its runs' finite values (the curves are not in the report value)."""
    by_step: dict[int, list[tuple[float, float]]] = {}
    for run in setting.runs:
        for step, value, seconds in run.curve:
            chars = None if run.chars_per_step is None else float(step * run.chars_per_step)
            x = {"chars": chars, "time": seconds}.get(x_axis, float(step))
            if math.isfinite(value) and x is not None:
                by_step.setdefault(step, []).append((x, value))
    for step in sorted(by_step):
        xs, values = zip(*by_step[step], strict=True)
        e = estimate(values, confidence) if band == "ci" and len(values) > 1 else None
        low, high = (e.low, e.high) if e is not None else (min(values), max(values))
        yield CurvePoint(statistics.fmean(xs), statistics.fmean(values), low, high, len(values))


def plot_lr_sensitivity(report: SweepReport, path: Path) -> Path:
    """lr_sensitivity.png: each design's results against the learning rate (`Setting.by_rate`)."""
    tuned = {s.label(report.family_columns): s for s in report.tuned}
    labels = list(dict.fromkeys(s.label(report.family_columns) for s in report.settings if s.results))
    # A failure as the report counts it: under the cross-fitted rule (format 2 and before), only a divergence.
    failed = "failed" if report.judged_apart or not report.metric.is_loss else "diverged"
    legend = [*labels, f"a seed {failed} (drawn at the top)"]
    figure, axes, columns = _figure(legend)
    crosses = {"linestyle": "none", "marker": "x", "markersize": 9}
    results = [v for s in report.tuned for by_seed in s.by_rate.values() for v in by_seed.values()]
    finite = [v for v in results if math.isfinite(v)]
    top = max(finite) + 0.05 * (max(finite) - min(finite) + 1e-9) if finite else 1.0
    for label, colour in zip(labels, _colours(len(labels)), strict=True):
        by_rate = tuned[label].by_rate
        rates = sorted((float(rate), list(by_seed.values())) for rate, by_seed in by_rate.items() if by_seed)
        alive = [(rate, values) for rate, values in rates if math.inf not in values]
        dead = [rate for rate, values in rates if math.inf in values]
        if alive:
            xs, values = zip(*alive, strict=True)
            axes.plot(xs, list(map(statistics.fmean, values)), marker="o", color=colour, label=label)
            axes.fill_between(xs, list(map(min, values)), list(map(max, values)), color=colour, alpha=0.15)
        if dead:
            axes.plot(dead, [top] * len(dead), color=colour, label=None if alive else label, **crosses)
    axes.plot([], [], linestyle="none", marker="x", color="black", label=legend[-1])
    axes.set(xscale="log", xlabel="peak learning rate (optim.lr)", ylabel=_y_label(report))
    axes.set_ylim(top=top * 1.01)  # before the reference lines, which stay out of the limits
    _reference_lines(axes, report, ("unigram", "bigram") if report.metric.is_loss else ())
    title = f"{report.sweep_dir.name}: learning-rate sensitivity, mean and min-max over seeds"
    return save_figure(_finish(figure, axes, title, columns), path)


class RunCurve(NamedTuple):
    """One run's curve in a why figure: its seed, the tag it logged, its finite (step, value) readings."""

    seed: str
    tag: str  # the tag it logged
    points: Sequence[tuple[int, float]]  # its finite (step, value) readings


def health_figure(curves: dict[str, list[RunCurve]], title: str) -> Figure:
    """A `training_health/` quantity by step, a colour per setting, a marker per seed; log if all are > 0."""
    figure, axes, columns = _figure(list(curves))
    runs = [run for setting in curves.values() for run in setting]
    seeds = sorted({run.seed for run in runs}, key=natural_key)
    markers = {seed: SEED_MARKERS[i % len(SEED_MARKERS)] for i, seed in enumerate(seeds)}
    for (label, setting), colour in zip(curves.items(), _colours(len(curves)), strict=True):
        for run in (run for run in setting if run.points):
            axes.plot(*zip(*run.points, strict=True), color=colour, marker=markers[run.seed], markersize=7,
                      fillstyle="none", linewidth=1)  # fmt: skip
        shown = f"{label} ({len(setting)} runs{'' if any(r.points for r in setting) else ', nothing logged'})"
        axes.plot([], [], color=colour, linewidth=2, label=shown)  # the setting's entry in the legend
    yscale = "log" if min((y for run in runs for _, y in run.points), default=0) > 0 else "linear"
    axes.set(yscale=yscale, xlabel=X_AXES["step"], ylabel=", ".join(sorted({run.tag for run in runs})))
    hollow = {"color": "black", "fillstyle": "none", "linestyle": "none"}
    handles = [lines.Line2D([], [], marker=markers[seed], label=f"seed {seed}", **hollow) for seed in seeds]
    figure.legend(handles=handles, loc="outside right upper", title="run", fontsize="small", frameon=False)
    return _finish(figure, axes, title, columns)


def plot_scale(
    points: dict[str, list[tuple[float, Estimate]]], path: Path, report: SweepReport, title: str
) -> Path:
    """scale.png: each design's (parameters, estimate) at every size, smallest first."""
    figure, axes, columns = _figure(list(points))
    for (label, sizes), colour in zip(points.items(), _colours(len(points)), strict=True):
        finite = [(n, e) for n, e in sizes if math.isfinite(e.mean)]
        if finite:
            below = [e.mean - e.low if e.has_interval else 0.0 for _, e in finite]
            above = [e.high - e.mean if e.has_interval else 0.0 for _, e in finite]
            params, means = [n for n, _ in finite], [e.mean for _, e in finite]
            axes.errorbar(params, means, [below, above], marker="o", capsize=3, color=colour, label=label)
    axes.set(xscale="log", xlabel="parameters (without position embeddings)", ylabel=_y_label(report))
    _reference_lines(axes, report, ("bigram",) if report.metric.is_loss else ())
    return save_figure(_finish(figure, axes, title, columns), path)


def plot_ladder(
    panels: list[tuple[str, list[ForestRow]]], across: list[str], path: Path, report: SweepReport, title: str
) -> Path:
    """ladder.png: a forest plot per level on one axis; below, the verdicts `across` levels."""
    heights = [1.2 + 0.35 * sum(row.lines() for row in rows) for _, rows in panels]
    below = 0.3 + 0.25 * sum(len(textwrap.wrap(line, ACROSS_WIDTH)) for line in across)
    figure, axes, _ = _figure([], heights, below)  # no legend: the verdicts across levels below the panels
    for panel, (level, rows) in zip(axes, panels, strict=False):
        plot_verdicts(panel, report, rows, differences=True)
        panel.set_title(level, loc="left", fontsize="medium", pad=14)  # above the ±δ note
        panel.sharex(axes[0])
    for panel in axes[:-2]:
        panel.set_xlabel("")
    text = "\n".join(textwrap.fill(line, ACROSS_WIDTH, subsequent_indent="    ") for line in across)
    axes[-1].axis("off")
    # From the figure's left edge, not the axes': the panels' labels would push the lines past its right one.
    left_of_figure = transforms.blended_transform_factory(figure.transFigure, axes[-1].transAxes)
    axes[-1].text(0.01, 1.0, text, va="top", ha="left", fontsize="small", transform=left_of_figure)
    figure.suptitle(title, fontsize="large")
    return save_figure(figure, path)


def draw_why(report: SweepReport) -> list[Path]:
    """why_<quantity>.png per health quantity a *Why* row names: its settings' and baselines' judged runs."""
    wanted: dict[str, dict[str, tuple[Setting, str]]] = {}  # by quantity, then the setting's label
    for row in report.why:
        columns = [c for c in row.design if c in report.swept_columns] or list(row.design)
        label, base = row.setting.label(columns), report.baseline_of(row.setting)
        for tag in (f.example.tag for f in row.findings if quantity(f.example.tag)):
            settings = wanted.setdefault(quantity(tag), {})
            settings.pop(f"{label} (baseline)", None)  # a baseline explained in its own right: drawn once
            settings[label] = (row.setting, tag)
            if base is not None and base is not row.setting and base.label(columns) not in settings:
                settings.setdefault(f"{base.label(columns)} (baseline)", (base, tag))
    drawn = []
    for name, settings in wanted.items():
        curves = {
            label: [
                RunCurve(run.seed, tag, [p for p in run.health.get(tag, []) if math.isfinite(p[1])])
                for run in judged_runs(setting)
            ]
            for label, (setting, tag) in settings.items()
        }
        title = f"{report.sweep_dir.name}: {name}, the runs diagnosed and their baselines"
        drawn.append(save_figure(health_figure(curves, title), report.sweep_dir / WHY_PNG.format(name)))
    return drawn


def draw_scale(report: SweepReport, ladder: Ladder, path: Path) -> Path:
    """scale.png: each design's mean loss (and interval) at each size against the size's parameters."""
    points: dict[str, list[tuple[float, Estimate]]] = {}
    for rung in ladder.rungs:
        for s in rung.settings:
            if s.estimate is not None and rung.params is not None:
                points.setdefault(s.label(ladder.columns), []).append((float(rung.params), s.estimate))
    measured = "final loss" if report.metric.is_loss else report.metric.noun
    return plot_scale(points, path, report, f"{report.sweep_dir.name}: {measured} against model size")


def draw_ladder_verdicts(report: SweepReport, ladder: Ladder, path: Path) -> Path:
    """ladder.png: each design's difference and verdict, a panel per level, and its verdict across levels."""
    shown = ladder.shown_columns
    named = ladder.kind if ladder.kind is LadderKind.SIZE else ", ".join(ladder.axis)
    order = [tuple(t.design[c] for c in ladder.columns) for t in ladder.trends]  # the same rows in each panel
    panels = []
    for rung in ladder.rungs:
        drawn = {
            s.key(ladder.columns): ForestRow.of(s.label(shown), c.tests.difference, c.judgement.verdict)
            for s in rung.settings
            if s is not rung.baseline and (c := report.shown_comparison(s)) is not None
        }
        rows = [ForestRow.of_baseline(rung.baseline.label(shown)), *(drawn[k] for k in order if k in drawn)]
        panels.append((f"{named} = {level_label(ladder, rung)}", rows))
    across = [f"{setting_label(t.design, shown)}: {t.verdict}" for t in ladder.trends]
    base = ladder.rungs[0].baseline.label(shown)
    title = f"{report.sweep_dir.name}: each design against {base} at each {ladder.kind}"
    heading = f"{ladder_title(ladder)} (the difference at each in the plots above):"
    return plot_ladder(panels, [heading, *across], path, report, title)
