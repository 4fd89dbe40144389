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
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import ttest_ind_from_stats

from tinylm.analysis.settings import Rules, Setting, judge_families, pick_baseline
from tinylm.analysis.stats import Outcome, Verdict, holm

# The choice a scale ladder varies (conf/size/): the baseline is then judged size by size, not once.
SCALE_KEY = "size"


@dataclass(frozen=True)
class Rung:
    """One size of the ladder: its runs' parameter count and steps, its baseline, and every design at it
    (the family's settings of that size, baseline included, each judged against that baseline)."""

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


@dataclass(frozen=True)
class Ladder:
    columns: list[str]  # the design columns: the family's, less the size
    rungs: list[Rung]  # smallest first
    trends: list[Trend]


def judge_ladder(
    family: Sequence[Setting], wanted: dict[str, str], columns: Sequence[str], rules: Rules
) -> Ladder:
    """The family judged size by size: each design against the baseline `wanted` names at its size, all
    sizes' comparisons one Holm family, then each design's verdict across sizes. `columns`: the family's."""
    columns = [c for c in columns if c != SCALE_KEY]
    by_size: dict[str, list[Setting]] = {}
    for setting in family:
        by_size.setdefault(setting.choices[SCALE_KEY], []).append(setting)
    sizes = [
        (
            size,
            _median([r.params for s in group for r in s.runs]),
            _median([r.max_steps for s in group for r in s.runs]),
        )
        for size, group in by_size.items()
    ]
    sizes.sort(key=lambda size: (size[1] is None, size[1] or 0, size[0]))
    groups = [(by_size[size], pick_baseline(by_size[size], wanted, columns)) for size, *_ in sizes]
    judged = judge_families(groups, rules)
    rungs = [
        Rung(size, params, steps, base, settings)
        for (size, params, steps), (_, base), settings in zip(sizes, groups, judged, strict=True)
    ]
    return Ladder(columns, rungs, trends(rungs, columns, rules.alpha))


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
        return TrendWord.HOLDS, f"holds at every size: {said[0][1].outcome}" + (
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
