"""A ladder rendered: the report's *Across sizes* section and scale.png, from the `Ladder` that
`tinylm.analysis.ladder` judged (docs/sweeps.md says what each word across sizes needs)."""

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
from tinylm.analysis.render import rates_cell
from tinylm.analysis.render_answer import ladder_title
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


def _mean_cell(mean: float, unigram: float | None, digits: int) -> str:
    """A mean: in nats, or (levels on different corpora) in bits/char with its gain over the level's unigram."""
    if unigram is None or not math.isfinite(mean):
        return fmt_number(mean, digits)
    bits = 1 / math.log(2)
    return f"{fmt_number(mean * bits)} ({fmt_number(gain_over_unigram(mean, unigram) * bits, signed=True)})"


def _difference_cell(d: Estimate, base: Setting, unigram: float | None, digits: int) -> str:
    """A difference and its interval in nats; with `unigram` (levels on different corpora), also as a share of
    the baseline's gain over that unigram level, which compares across corpora (only where it got below it)."""
    text = f"{fmt_number(d.mean, digits, signed=True)} {fmt_interval(d, signed=True, digits=digits)}"
    e = base.estimate
    if unigram is None or e is None or not math.isfinite(e.mean) or not math.isfinite(d.mean):
        return text
    gain = gain_over_unigram(e.mean, unigram)
    return text + (f" ({d.mean / gain:+.1%} of the baseline's gain)" if gain > 0 else "")


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
    if s.estimate is None:
        return "—"
    rates = f" ({rates_cell(s)})" if report.lr_varies else ""
    return f"{_mean_cell(s.estimate.mean, unigram, report.metric.digits)}{rates}"


def _difference_at(report: SweepReport, s: Setting, rung: Rung, unigram: float | None) -> str:
    c, added = report.shown_comparison(s), s.added
    if c is None or c.tests.difference is None:
        return "—"
    also = f"; added seeds: {added.judgement.verdict}" if added is not None and added is not c else ""
    text = _difference_cell(c.tests.difference, rung.baseline, unigram, report.metric.digits)
    return f"{text}, p {fmt_p(c.judgement.p_adjusted)}: {c.judgement.verdict}{also}"


def _words(report: SweepReport, ladder: Ladder) -> tuple[str, str, str, str]:
    """How the section names the levels (across, along), how each design was run at them, and the legend of
    the words across levels."""
    axis = ", ".join(ladder.axis)
    loss = ("Mean final loss" if report.metric.is_loss else f"Mean {report.metric.noun}") + (
        " in bits/char (gain over its corpus's unigram level)" if _in_bits(report, ladder) else ""
    )
    chosen = "cross-fitted rate" if report.rule == CROSS_FITTED else "rate its tuning seeds chose"
    if ladder.noun == "size":
        words = (
            "`grows / shrinks with size`: resolved in the same direction at the smallest and largest sizes, and "
            "Welch's t test of the difference at the largest size against that at the smallest, Holm over the "
            "designs, finds a change; `holds at every size`: the same resolved verdict at every size and no "
            f"change shown; `flips`: {FLIPS_WORDS}; `changes with size`: that test finds a change, but the ends' "
            f"verdicts show neither its direction nor a sign change. Loss against parameters: {SCALE_PNG}."
        )
        return "across sizes", "size", f", each at its own {chosen} per size. {loss} (rates chosen):", words
    rates = (
        f", each at its own {chosen} per level. {loss} (rates chosen):" if report.lr_varies else f". {loss}:"
    )
    ends = (
        f"`grows / shrinks with {axis}`: resolved in the same direction at the first and last levels, and "
        "Welch's t test of the difference at the last level against that at the first, Holm over the designs, "
        f"finds a change; `changes with {axis}`: that test finds a change, but the ends' verdicts show neither "
        "its direction nor a sign change; "
        if ladder.ordered
        else "The levels have no order, so no word compares the ends; "
    )
    words = (
        f"{ends}`holds at every level`: the same resolved verdict at every level"
        f"{' and no change shown' if ladder.ordered else ''}; `flips`: {FLIPS_WORDS}."
    )
    return "across levels", f"level (`{axis}`)", rates, words


def ladder_section(report: SweepReport, ladder: Ladder) -> list[str]:
    """The report's *Across sizes* (or *Across levels of …*) section: per design and level, the mean and the
    paired difference with its interval and verdict, then the verdict across levels."""
    pct, noun, metric, shown = f"{report.confidence:.0%}", ladder.noun, report.metric, ladder.shown_columns
    across, along, rates, words = _words(report, ladder)
    gain = " and its share of the baseline's gain over unigram (which compares across corpora)"
    designs = {s.key(ladder.columns): s for rung in ladder.rungs for s in rung.settings}
    return blocks(
        f"## {ladder_title(ladder)}",
        f"Each design against the baseline `{ladder.rungs[0].baseline.label(shown)}` of its own {along}{rates}",
        _level_table(report, list(designs.values()), lambda s: s.choices, _mean_at),
        f"Difference from the baseline in {metric.units} (< 0: {'lower loss' if metric.is_loss else metric.lower}"
        f"), its {pct} interval{gain if _in_bits(report, ladder) else ''}, p (Holm) and verdict at each {noun}, "
        f"and the verdict {across} ({LADDER_PNG} draws it):",
        _level_table(
            report, ladder.trends, lambda t: t.design, _difference_at, Column(across, lambda t: t.verdict)
        ),
        f"Every {noun}'s comparisons are one family ({report.family_tests} tests, Holm, α = {report.alpha:g}, δ = "
        f"{report.min_effect:g}{'' if metric.is_loss else ' ' + metric.units}). {words}",
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
    """ladder.png: each design's difference from its level's baseline with its interval and verdict, a panel
    per level, and each design's verdict across levels."""
    shown, named = ladder.shown_columns, ladder.noun if ladder.noun == "size" else ", ".join(ladder.axis)
    order = [
        tuple(t.design[c] for c in ladder.columns) for t in ladder.trends
    ]  # the same rows in every panel
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
    title = f"{report.sweep_dir.name}: each design against {ladder.rungs[0].baseline.label(shown)} at each {ladder.noun}"
    heading = f"{ladder_title(ladder)} (the difference at each in the plots above):"
    return plot_ladder(panels, [heading, *across], path, report, title)
