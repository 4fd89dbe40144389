"""A ladder rendered: its section, scale.png and ladder.png (docs/sweeps.md says what each word needs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinylm.analysis.estimates import Estimate
from tinylm.analysis.formats import Column, blocks, fmt_interval, fmt_number, fmt_p, md_table
from tinylm.analysis.grouping import CROSS_FITTED, Setting, gain_over_unigram, setting_label
from tinylm.analysis.ladder import Ladder, Rung
from tinylm.analysis.plots import ForestRow, plot_ladder, plot_scale
from tinylm.analysis.render import ladder_title, rates_cell
from tinylm.analysis.report import SweepReport

SCALE_PNG = "scale.png"
# Each design's difference from its level's baseline, a panel per level, with the verdicts.
LADDER_PNG = "ladder.png"
# What `flips` needs (tinylm/analysis/ladder.py), as each ladder section's legend says it.
FLIPS_WORDS = "the losses resolved in opposite directions (not a `better`/`worse` that failures decided)"


def _level_label(ladder: Ladder, rung: Rung) -> str:
    if ladder.noun != "size":
        return rung.level
    params = f"{rung.params / 1e6:.2f}M" if rung.params is not None else "?"
    return f"{rung.level} ({params}, {rung.steps} steps)"


def _in_bits(report: SweepReport, ladder: Ladder) -> bool:
    return ladder.in_bits and report.metric.is_loss


def _level_table(
    report: SweepReport,
    rows: list[Any],
    design: Callable[[Any], dict[str, Any]],
    cell: Callable[[SweepReport, Setting, Rung, float | None], str],
    *last: Column,
) -> list[str]:
    """A row per design (its choices: `design(row)`), a column per level with `cell` of the design there."""
    ladder, columns = report.ladder, report.ladder.columns

    def at(rung: Rung) -> Callable[[Any], str]:
        unigram = rung.reference["unigram"] if _in_bits(report, ladder) else None

        def of(row: Any) -> str:
            key = tuple(design(row).get(c, "—") for c in columns)
            s = next((s for s in rung.settings if s.key(columns) == key), None)
            return "—" if s is None else cell(report, s, rung, unigram)

        return of

    leading = [Column(c, lambda row, c=c: design(row).get(c, "—")) for c in ladder.shown_columns]
    return md_table(
        [*leading, *(Column(_level_label(ladder, rung), at(rung)) for rung in ladder.rungs), *last], rows
    )


def _mean_at(report: SweepReport, s: Setting, _: Rung, unigram: float | None) -> str:
    """A mean in nats; across corpora, in bits/char with its gain over the level's unigram."""
    if s.estimate is None:
        return "—"
    mean, bits = s.estimate.mean, 1 / math.log(2)
    text = (
        f"{fmt_number(mean * bits)} ({fmt_number(gain_over_unigram(mean, unigram) * bits, signed=True)})"
        if unigram is not None and math.isfinite(mean)
        else fmt_number(mean, report.metric.digits)
    )
    return text + (f" ({rates_cell(s)})" if report.lr_varies else "")


def _difference_at(report: SweepReport, s: Setting, rung: Rung, unigram: float | None) -> str:
    """A difference, its interval, p and verdict; across corpora, also as a share of the baseline's gain."""
    c, added, digits = report.shown_comparison(s), s.added, report.metric.digits
    if c is None or c.tests.difference is None:
        return "—"
    d, e = c.tests.difference, rung.baseline.estimate
    text = f"{fmt_number(d.mean, digits, signed=True)} {fmt_interval(d, signed=True, digits=digits)}"
    gain = gain_over_unigram(e.mean, unigram) if unigram is not None and e is not None else math.nan
    if gain > 0 and math.isfinite(d.mean):
        text += f" ({d.mean / gain:+.1%} of the baseline's gain)"
    also = f"; added seeds: {added.judgement.verdict}" if added is not None and added is not c else ""
    return f"{text}, p {fmt_p(c.judgement.p_adjusted)}: {c.judgement.verdict}{also}"


def _words(report: SweepReport, ladder: Ladder) -> tuple[str, str, str, str]:
    """The section's words for its levels: across, along, how each design was run, and the legend."""
    axis = ", ".join(ladder.axis)
    loss = ("Mean final loss" if report.metric.is_loss else f"Mean {report.metric.noun}") + (
        " in bits/char (gain over its corpus's unigram level)" if _in_bits(report, ladder) else ""
    )
    chosen = "cross-fitted rate" if report.rule == CROSS_FITTED else "rate its tuning seeds chose"
    if ladder.noun == "size":
        words = (
            "`grows / shrinks with size`: resolved in the same direction at the smallest and largest sizes, "
            "and Welch's t test of the difference at the largest size against that at the smallest, Holm "
            "over the designs, finds a change; `holds at every size`: the same resolved verdict at every "
            f"size and no change shown; `flips`: {FLIPS_WORDS}; `changes with size`: that test finds a "
            "change, but the ends' verdicts show neither its direction nor a sign change. Loss against "
            f"parameters: {SCALE_PNG}."
        )
        return "across sizes", "size", f", each at its own {chosen} per size. {loss} (rates chosen):", words
    rates = (
        f", each at its own {chosen} per level. {loss} (rates chosen):" if report.lr_varies else f". {loss}:"
    )
    ends = (
        f"`grows / shrinks with {axis}`: resolved in the same direction at the first and last levels, and "
        "Welch's t test of the difference at the last level against that at the first, Holm over the "
        f"designs, finds a change; `changes with {axis}`: that test finds a change, but the ends' verdicts "
        "show neither its direction nor a sign change; "
        if ladder.ordered
        else "The levels have no order, so no word compares the ends; "
    )
    holds = "`holds at every level`: the same resolved verdict at every level" + (
        " and no change shown" if ladder.ordered else ""
    )
    return "across levels", f"level (`{axis}`)", rates, f"{ends}{holds}; `flips`: {FLIPS_WORDS}."


def ladder_section(report: SweepReport, ladder: Ladder) -> list[str]:
    """*Across sizes* (or *Across levels of …*): each design's mean and difference at each level."""
    pct, noun, metric = f"{report.confidence:.0%}", ladder.noun, report.metric
    across, along, rates, words = _words(report, ladder)
    base = ladder.rungs[0].baseline.label(ladder.shown_columns)
    lower, units = ("lower loss", "") if metric.is_loss else (metric.lower, f" {metric.units}")
    gain = " and its share of the baseline's gain over unigram (which compares across corpora)"
    designs = {s.key(ladder.columns): s for rung in ladder.rungs for s in rung.settings}
    last = Column(across, lambda t: t.verdict)
    return blocks(
        f"## {ladder_title(ladder)}",
        f"Each design against the baseline `{base}` of its own {along}{rates}",
        _level_table(report, list(designs.values()), lambda s: s.choices, _mean_at),
        f"Difference from the baseline in {metric.units} (< 0: {lower}), its {pct} interval"
        f"{gain if _in_bits(report, ladder) else ''}, p (Holm) and verdict at each {noun}, and the verdict "
        f"{across} ({LADDER_PNG} draws it):",
        _level_table(report, ladder.trends, lambda t: t.design, _difference_at, last),
        f"Every {noun}'s comparisons are one family ({report.family_tests} tests, Holm, "
        f"α = {report.alpha:g}, δ = {report.min_effect:g}{units}). {words}",
    )


def draw_ladder(report: SweepReport, ladder: Ladder, path: Path) -> Path:
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
    shown, named = ladder.shown_columns, ladder.noun if ladder.noun == "size" else ", ".join(ladder.axis)
    order = [tuple(t.design[c] for c in ladder.columns) for t in ladder.trends]  # the same rows in each panel
    panels = []
    for rung in ladder.rungs:
        designs = {
            s.key(ladder.columns): ForestRow.of(s.label(shown), c.tests.difference, c.judgement.verdict)
            for s in rung.settings
            if s is not rung.baseline and (c := report.shown_comparison(s)) is not None
        }
        rows = [
            ForestRow.of_baseline(rung.baseline.label(shown)),
            *(designs[k] for k in order if k in designs),
        ]
        panels.append((f"{named} = {_level_label(ladder, rung)}", rows))
    across = [f"{setting_label(t.design, shown)}: {t.verdict}" for t in ladder.trends]
    base = ladder.rungs[0].baseline.label(shown)
    title = f"{report.sweep_dir.name}: each design against {base} at each {ladder.noun}"
    heading = f"{ladder_title(ladder)} (the difference at each in the plots above):"
    return plot_ladder(panels, [heading, *across], path, report, title)
