"""Does a ranking hold as the model grows? A scale ladder (`experiment=scale_ladder`: the same designs at
several `size=` rungs) judged size by size: each design against the baseline *of its size*, every size's
comparisons one Holm family, and per design a verdict across sizes (docs/sweeps.md):

- `flips at <size>`: resolved in opposite directions at two sizes;
- `grows / shrinks with size`: resolved in the same direction at the smallest and the largest size, and the
  difference at the largest differs from that at the smallest (Welch's t on the two sizes' paired
  differences, Holm over the designs): with one sign at both ends, the change is one of magnitude;
- `changes sign, not resolved`: the smallest and largest sizes' differences have opposite signs, not both
  resolved (a `flips` needs both);
- `holds at every size`: the same resolved verdict at every size, and no change shown;
- otherwise `not resolved at every size`, with what each size says.

Each verdict is a `TrendWord` with its text, so that what the ladder says is counted without reading text.
"""

from __future__ import annotations

import enum
import itertools
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import ttest_ind_from_stats

from tinylm.analysis.plots import plot_scale
from tinylm.analysis.report import (
    SCALE_KEY,
    Setting,
    SweepReport,
    fmt_interval,
    fmt_number,
    fmt_p,
    md_table,
    pick_baseline,
    rates_cell,
    tests_against,
)
from tinylm.analysis.stats import Estimate, Outcome, Verdict, holm, judge

SCALE_PNG = "scale.png"


@dataclass
class Rung:
    """One size of the ladder: its runs' parameter count and steps, its baseline, and every design at it
    (the family's settings of that size, baseline included)."""

    size: str
    params: int | None
    steps: int | None
    baseline: Setting
    settings: list[Setting]


class TrendWord(enum.StrEnum):
    """What the ladder says of one design across sizes."""

    FLIPS = "flips"
    GROWS = "grows with size"
    SHRINKS = "shrinks with size"
    HOLDS = "holds at every size"
    SIGN_CHANGE = "changes sign, not resolved"
    UNRESOLVED = "not resolved at every size"


@dataclass(frozen=True)
class Trend:
    """One design across sizes: the change of its difference from the smallest size to the largest, the
    test of that change (raw and Holm over the designs), the verdict's word and its text."""

    design: dict[str, str]
    change: float | None
    p_value: float | None
    p_adjusted: float | None
    verdict: str
    word: TrendWord = TrendWord.UNRESOLVED


@dataclass
class Ladder:
    columns: list[str]  # the design columns: the family's, less the size
    rungs: list[Rung]  # smallest first
    trends: list[Trend]


def judge_ladder(report: SweepReport) -> Ladder | None:
    """The ladder of a report whose baseline is judged size by size (`report.scale_baseline`); None for any
    other report. Fills in each setting's comparison: all sizes' rows are one family."""
    wanted = report.scale_baseline
    if wanted is None:
        return None
    columns = [c for c in report.family_columns if c != SCALE_KEY]
    by_size: dict[str, list[Setting]] = {}
    for setting in report.family:
        by_size.setdefault(setting.choices[SCALE_KEY], []).append(setting)
    rungs = [
        Rung(size, _median([r.params for s in group for r in s.runs]),
             _median([r.max_steps for s in group for r in s.runs]), pick_baseline(group, wanted, columns), group)
        for size, group in by_size.items()
    ]  # fmt: skip
    rungs.sort(key=lambda rung: (rung.params is None, rung.params or 0, rung.size))
    rows = [(s, rung) for rung in rungs for s in rung.settings if s is not rung.baseline]
    compared = [tests_against(s, rung.baseline, report) for s, rung in rows]
    for (setting, _), comparison in zip(rows, judge(compared, report.min_effect, report.alpha), strict=True):
        setting.comparison = comparison
    return Ladder(columns, rungs, trends(rungs, columns, report.alpha))


def trends(rungs: list[Rung], columns: list[str], alpha: float) -> list[Trend]:
    designs: dict[tuple[str, ...], list[tuple[Rung, Setting]]] = {}
    for rung in rungs:
        for setting in rung.settings:
            if setting is not rung.baseline and setting.comparison is not None:
                designs.setdefault(setting.key(columns), []).append((rung, setting))
    tests = {key: _change(found) for key, found in designs.items()}
    tested = [key for key, (_, p) in tests.items() if p is not None]
    adjusted = dict(zip(tested, holm([tests[key][1] for key in tested]), strict=True))
    said = []
    for key, found in designs.items():
        (change, p), p_adjusted = tests[key], adjusted.get(key)
        word, text = _verdict(found, change, p_adjusted, alpha)
        said.append(Trend(dict(zip(columns, key, strict=True)), change, p, p_adjusted, text, word))
    return said


def _change(found: list[tuple[Rung, Setting]]) -> tuple[float | None, float | None]:
    """The difference at the largest size minus that at the smallest, and Welch's t test of it (scipy): the
    sizes' runs are independent, each difference's sd and seed count as its comparison estimated them."""
    ends = [s.comparison.difference for _, s in (found[0], found[-1])]
    if len(found) < 2 or any(d is None or not math.isfinite(d.mean) for d in ends):
        return None, None
    small, large = ends
    change = large.mean - small.mean
    if small.sd is None or large.sd is None or small.n < 2 or large.n < 2 or small.sd + large.sd == 0:
        return change, None
    test = ttest_ind_from_stats(large.mean, large.sd, large.n, small.mean, small.sd, small.n, equal_var=False)
    return change, float(test.pvalue)


def _direction(verdict: Verdict) -> int | None:
    """+1 worse, -1 better, 0 equivalent or identical, None unresolved."""
    return {Outcome.WORSE: 1, Outcome.BETTER: -1, Outcome.EQUIVALENT: 0, Outcome.IDENTICAL: 0}.get(
        verdict.outcome
    )


def _verdict(
    found: list[tuple[Rung, Setting]], change: float | None, p: float | None, alpha: float
) -> tuple[TrendWord, str]:
    said = [(rung.size, s.comparison.verdict, _direction(s.comparison.verdict)) for rung, s in found]
    resolved = [(size, verdict, d) for size, verdict, d in said if d is not None]
    directed = [found for found in resolved if found[2]]  # better or worse
    for (size_a, verdict_a, a), (size_b, verdict_b, b) in itertools.pairwise(directed):
        if a != b:
            return TrendWord.FLIPS, f"flips at {size_b}: {verdict_a} at {size_a}, {verdict_b} at {size_b}"
    every = ", ".join(f"{verdict} at {size}" for size, verdict, _ in said)
    ends = [s.comparison.difference for _, s in (found[0], found[-1])]
    small, large = (d.mean if d is not None else math.nan for d in ends)
    at_ends = f"{small:+.3f} at {found[0][0].size}, {large:+.3f} at {found[-1][0].size}"
    tested = f" (change p (Holm) = {p:.2g})" if p is not None else ""
    if p is not None and p <= alpha and change is not None and said[0][2] == said[-1][2] and said[0][2]:
        # One resolved sign at both ends: the change of the difference is one of its magnitude.
        word = TrendWord.GROWS if abs(large) > abs(small) else TrendWord.SHRINKS
        return word, f"{word.value}: {at_ends}{tested}; {every}"
    if len(resolved) == len(said) and len({d for *_, d in resolved}) == 1:
        return TrendWord.HOLDS, f"holds at every size: {said[0][1].split(' (')[0]}" + (
            f" (no change with size shown, p (Holm) = {p:.2g})" if p is not None else ""
        )
    if small * large < 0:  # opposite signs, not both resolved (that would have been a flip)
        return TrendWord.SIGN_CHANGE, f"{TrendWord.SIGN_CHANGE.value}: {at_ends}{tested}; {every}"
    changed = (
        f"changes with size{tested}, not resolved at both ends; " if p is not None and p <= alpha else ""
    )
    return TrendWord.UNRESOLVED, f"not resolved at every size: {changed}{every}"


def _median(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return int(statistics.median(known)) if known else None


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
