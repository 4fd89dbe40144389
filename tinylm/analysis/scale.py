"""A ladder rendered: the report's *Across sizes* section and scale.png, from the `Ladder` that
`tinylm.analysis.ladder` judged (docs/sweeps.md says what each word across sizes needs)."""

from __future__ import annotations

from pathlib import Path

from tinylm.analysis.ladder import Ladder, Rung
from tinylm.analysis.plots import plot_scale
from tinylm.analysis.render import fmt_interval, fmt_number, fmt_p, md_table, rates_cell
from tinylm.analysis.report import SweepReport
from tinylm.analysis.stats import Estimate

SCALE_PNG = "scale.png"


def _size_label(rung: Rung) -> str:
    params = f"{rung.params / 1e6:.2f}M" if rung.params is not None else "?"
    return f"{rung.size} ({params}, {rung.steps} steps)"


def ladder_section(report: SweepReport, ladder: Ladder) -> list[str]:
    """The report's *Across sizes* section: per design and size, the mean and the paired difference with its
    interval and verdict, then the verdict across sizes; and the figure."""
    columns, pct = ladder.columns, f"{report.confidence:.0%}"
    base = ladder.rungs[0].baseline
    designs = {s.key(columns): s for rung in ladder.rungs for s in rung.settings}
    means = []
    for key in designs:
        cells = []
        for rung in ladder.rungs:
            s = next((s for s in rung.settings if s.key(columns) == key), None)
            cells.append(
                "—" if s is None or s.estimate is None else f"{fmt_number(s.estimate.mean)} ({rates_cell(s)})"
            )
        means.append([*key, *cells])
    differences = []
    for trend in ladder.trends:
        key = tuple(trend.design[c] for c in columns)
        cells = []
        for rung in ladder.rungs:
            s = next((s for s in rung.settings if s.key(columns) == key), None)
            c = s.comparison if s is not None else None
            d = c.difference if c is not None else None
            cells.append("—" if d is None else f"{fmt_number(d.mean, signed=True)} {fmt_interval(d, signed=True)}, "
                         f"p {fmt_p(c.p_adjusted)}: {c.verdict}")  # fmt: skip
        differences.append([*key, *cells, trend.verdict])
    sizes = [_size_label(rung) for rung in ladder.rungs]
    family = sum(
        (s.comparison.p_value is not None) + (s.comparison.divergence is not None)
        for rung in ladder.rungs for s in rung.settings if s.comparison is not None
    )  # fmt: skip
    return [
        "## Across sizes",
        "",
        f"Each design against the baseline `{base.label(columns)}` of its own size, each at its own cross-fitted "
        f"rate per size. Mean final loss (rates chosen):",
        "",
        *md_table([*columns, *sizes], means),
        "",
        f"Difference from the baseline (< 0: lower loss), its {pct} interval, p (Holm) and verdict at each size, "
        "and the verdict across sizes:",
        "",
        *md_table([*columns, *sizes, "across sizes"], differences),
        "",
        f"Every size's comparisons are one family ({family} tests, Holm, α = {report.alpha:g}, δ = "
        f"{report.min_effect:g}). `grows / shrinks with size`: resolved in the same direction at the smallest and "
        "largest sizes, and Welch's t test of the difference at the largest size against that at the smallest, "
        "Holm over the designs, finds a change; `holds at every size`: the same resolved verdict at every size "
        "and no change shown; `flips`: resolved in opposite directions; `changes sign, not resolved`: opposite "
        "signs at the two ends, not both resolved. Loss against "
        f"parameters: {SCALE_PNG}.",
        "",
    ]


def draw_ladder(report: SweepReport, ladder: Ladder, path: Path) -> Path:
    """scale.png: each design's mean loss (and interval) at each size against the size's parameters."""
    points: dict[str, list[tuple[float, Estimate]]] = {}
    for rung in ladder.rungs:
        for s in rung.settings:
            if s.estimate is not None and rung.params is not None:
                points.setdefault(s.label(ladder.columns), []).append((float(rung.params), s.estimate))
    return plot_scale(points, path, report, f"{report.sweep_dir.name}: final loss against model size")
