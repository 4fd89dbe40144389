"""A design's compute multiplier (docs/sweeps.md): how much training it needs to reach the baseline's loss,
as a ratio of the baseline's own. A loss gap at one budget shrinks as every curve flattens; the multiplier
says what a design is worth near that budget ("the same loss in 0.85× the steps").

Per seed, the level is the baseline's final validation loss (the last point of its `loss/val` curve), or
the design's where the design never came down to the baseline's within its budget: the loss both reached.
Each side's cost to reach it is the step (or the training time) at which its validation curve first comes
down to it, interpolated linearly between the two validations around the crossing. The seeds are paired: the
ratio is taken seed by seed, and the interval is a Student-t interval of the mean log ratio, back on the
ratio scale (a geometric mean). The seeds whose design never reached the baseline's final loss are counted
apart as well: a ratio taken only over the seeds that reached it would be flattered by the ones that did not
(benchmarks/multiplier_rates.py measured that: 62% coverage at a true multiplier of 1).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import ttest_ind_from_stats

from tinylm.analysis.estimates import Estimate, estimate
from tinylm.analysis.grouping import LR, Setting
from tinylm.analysis.ladder import Ladder, TrendWord
from tinylm.analysis.runs import RunSummary
from tinylm.analysis.verdicts import holm

Point = tuple[float, float]  # (cost so far: steps or training seconds, validation loss)


class Cost(enum.StrEnum):
    """What a multiplier counts: optimizer steps, or training seconds (validation left out)."""

    STEPS = "steps"
    TIME = "time"


class Reading(enum.StrEnum):
    """What a multiplier's interval says, and the only words the report may state about it."""

    LESS = "less"  # the interval lies below 1: the design needs less to reach the loss both reached
    MORE = "more"  # above 1: it needs more
    NOT_RESOLVED = "not resolved"  # the interval holds 1, or there is none (fewer than 2 seeds)


def first_reached(curve: Sequence[Point], level: float) -> float | None:
    """The cost at which `curve` first comes down to `level`, linear between the validations around the
    crossing (at the first point if it starts there); None where it never does."""
    for i, (cost, loss) in enumerate(curve):
        if not math.isfinite(loss) or loss > level:
            continue
        if i == 0:
            return float(cost)
        before_cost, before_loss = curve[i - 1]
        if not math.isfinite(before_loss):
            return float(cost)
        share = (before_loss - level) / (before_loss - loss)  # loss < before_loss: the curve came down here
        return float(before_cost + share * (cost - before_cost))
    return None


@dataclass(frozen=True)
class SeedReach:
    """One seed: the level both sides reached, and each side's cost to reach it."""

    level: float
    design: float
    baseline: float
    reached_baseline: bool  # the design came down to the baseline's final loss (else `level` is its own)

    @property
    def ratio(self) -> float:
        """The design's cost over the baseline's for this seed (< 1: the design got there sooner)."""
        return self.design / self.baseline


@dataclass(frozen=True)
class Multiplier:
    """A design's cost to reach the baseline's final loss over the baseline's own, over its paired seeds."""

    cost: Cost
    reaches: dict[str, SeedReach]  # by seed: every paired seed whose two curves both trained to the end
    ratio: Estimate | None  # the geometric mean and its interval (`sd`: of the log ratios); None: no seed
    reading: Reading

    @property
    def never_reached(self) -> tuple[str, ...]:
        """The seeds whose design never came down to the baseline's final loss within its budget."""
        return tuple(seed for seed, r in self.reaches.items() if not r.reached_baseline)


def multiplier(
    design: Mapping[Hashable, Sequence[Point]],
    baseline: Mapping[Hashable, Sequence[Point]],
    cost: Cost = Cost.STEPS,
    confidence: float = 0.95,
) -> Multiplier:
    """The multiplier of `design`'s curves against `baseline`'s, paired on the seeds both have, each curve
    (cost, validation loss) in cost order. A seed where either curve is empty or ends non-finite (a failed
    run: counted by the loss comparison's failures) is left out."""
    reaches = {}
    for seed in sorted(set(design) & set(baseline), key=str):
        mine, theirs = design[seed], baseline[seed]
        if not mine or not theirs or not all(math.isfinite(c[-1][1]) for c in (mine, theirs)):
            continue
        level = max(mine[-1][1], theirs[-1][1])  # each curve ends at or below it: both reach it
        costs = first_reached(mine, level), first_reached(theirs, level)
        if costs[0] is None or costs[1] is None or min(costs) <= 0:
            continue  # a curve whose first validation already reached it has no cost to compare
        reaches[str(seed)] = SeedReach(level, *costs, reached_baseline=mine[-1][1] <= theirs[-1][1])
    logs = [math.log(r.ratio) for r in reaches.values()]
    if not logs:
        return Multiplier(cost, reaches, None, Reading.NOT_RESOLVED)
    on_log = estimate(logs, confidence)
    ratio = Estimate(
        math.exp(on_log.mean),
        on_log.n,
        on_log.sd,
        math.exp(on_log.low) if on_log.low is not None else None,
        math.exp(on_log.high) if on_log.high is not None else None,
    )
    return Multiplier(cost, reaches, ratio, reading(ratio))


def reading(ratio: Estimate) -> Reading:
    """`less` or `more` where the interval excludes 1, else `not resolved`."""
    if not ratio.has_interval:
        return Reading.NOT_RESOLVED
    if ratio.high < 1:
        return Reading.LESS
    if ratio.low > 1:
        return Reading.MORE
    return Reading.NOT_RESOLVED


def seed_curves(setting: Setting, cost: Cost) -> dict[str, list[Point]]:
    """Each judged seed's validation curve as (cost, loss): the seeds it has a finite result for, each at the
    rate it is judged at (a tuned setting's), by steps or by training seconds."""
    curves = {}
    for run in setting.runs:
        result = setting.results.get(run.seed)
        at_rate = not setting.rates or run.choices.get(LR) == setting.rates.get(run.seed)
        if result is None or not math.isfinite(result) or not at_rate or not run.val_curve:
            continue
        points = [(float(step), loss) for step, loss, _ in run.val_curve]
        if cost is Cost.TIME:
            points = [(t, loss) for step, loss in points if (t := _seconds_at(run, step)) is not None]
        curves[run.seed] = points
    return curves


def _seconds_at(run: RunSummary, step: float) -> float | None:
    """The run's training seconds after `step` optimizer steps, linear between the clock's readings."""
    if not run.train_seconds or not run.train_seconds[0][0] <= step <= run.train_seconds[-1][0]:
        return None
    steps, seconds = zip(*run.train_seconds, strict=True)
    return float(np.interp(step, steps, seconds))


def compare_costs(setting: Setting, baseline: Setting, confidence: float = 0.95) -> Multipliers:
    """`setting` against `baseline` by steps and by training time."""
    steps, time = (
        multiplier(seed_curves(setting, cost), seed_curves(baseline, cost), cost, confidence)
        for cost in (Cost.STEPS, Cost.TIME)
    )
    return Multipliers(dict(setting.choices), steps, time)


@dataclass(frozen=True)
class Multipliers:
    """A comparison's two multipliers: by optimizer steps, and by training time (validation left out)."""

    design: dict[str, Any]  # the compared setting's choices (on a ladder, its level's too)
    steps: Multiplier
    time: Multiplier


def compared_costs(rows: Sequence[tuple[Setting, Setting]], confidence: float) -> tuple[Multipliers, ...]:
    """Each (setting, its baseline) of a family by steps and by time (a report read back from json does not
    compute them: they are stored with it, as the curves are not)."""
    return tuple(compare_costs(s, base, confidence) for s, base in rows)


def costs_of(costs: Sequence[Multipliers], setting: Setting) -> Multipliers | None:
    """`setting`'s multipliers among `costs` (None: it was not compared with a baseline)."""
    return next((m for m in costs if m.design == setting.choices), None)


def costs_across(ladder: Ladder, costs: Sequence[Multipliers], alpha: float) -> list[MultiplierTrend]:
    """Each design's step multiplier across a ladder's levels (budgets, or any choices' values); on unordered
    levels without the change test, which compares the first level with the last."""
    designs: dict[tuple[Any, ...], tuple[dict[str, Any], list[tuple[str, Multiplier]]]] = {}
    for rung in ladder.rungs:
        for s in rung.settings:
            found = costs_of(costs, s)
            if s is rung.baseline or found is None:
                continue
            named = {c: s.choices.get(c) for c in ladder.columns}
            designs.setdefault(s.key(ladder.columns), (named, []))[1].append((rung.level, found.steps))
    return multiplier_trends(list(designs.values()), alpha, ladder.ordered)


@dataclass(frozen=True)
class MultiplierTrend:
    """One design's multiplier across a ladder's ordered levels (budgets): the change of its log from the
    first level to the last, that change's Welch test, Holm-adjusted over the designs, and the word."""

    design: dict[str, Any]  # its choices, less the ladder's axis
    levels: tuple[str, ...]
    at_levels: tuple[Multiplier, ...]  # its step multiplier at each of `levels`
    change: float | None  # log multiplier at the last level less that at the first
    p_value: float | None
    p_adjusted: float | None
    word: TrendWord

    @property
    def readings(self) -> tuple[Reading, ...]:
        """What its multiplier reads at each level."""
        return tuple(m.reading for m in self.at_levels)


def multiplier_trends(
    designs: Sequence[tuple[dict[str, Any], Sequence[tuple[str, Multiplier]]]],
    alpha: float,
    ordered: bool = True,
) -> list[MultiplierTrend]:
    """Each design's (level, multiplier) in the levels' order, judged as `ladder.trends` judges the loss:
    `flips` where two levels read opposite ways; `grows` or `shrinks` where both ends read the same way and
    the change test rejects (the multiplier moves away from 1, or towards it); `holds` where every level
    reads the same way and the test does not reject; `changes` where it rejects otherwise. On levels without
    an `ordered` first and last there is no change test: `flips`, `holds` or `not resolved`."""
    tests = [
        _log_change(levels[0][1], levels[-1][1]) if len(levels) >= 2 and ordered else (None, None)
        for _, levels in designs
    ]
    adjusted = holm({i: p for i, (_, p) in enumerate(tests) if p is not None})
    trends = []
    for i, (design, levels) in enumerate(designs):
        readings = tuple(m.reading for _, m in levels)
        change, p = tests[i]
        p_adjusted = adjusted.get(i)
        changed = p_adjusted is not None and p_adjusted <= alpha
        resolved = {r for r in readings if r is not Reading.NOT_RESOLVED}
        if resolved == {Reading.LESS, Reading.MORE}:
            word = TrendWord.FLIPS
        elif changed and readings[0] == readings[-1] != Reading.NOT_RESOLVED:
            word = (
                TrendWord.GROWS
                if change * (1 if readings[0] is Reading.MORE else -1) > 0
                else TrendWord.SHRINKS
            )
        elif not changed and len(set(readings)) == 1 and readings[0] is not Reading.NOT_RESOLVED:
            word = TrendWord.HOLDS
        elif changed:
            word = TrendWord.CHANGES
        else:
            word = TrendWord.UNRESOLVED
        named, at_levels = (tuple(column) for column in zip(*levels, strict=True))
        trends.append(MultiplierTrend(design, named, at_levels, change, p, p_adjusted, word))
    return trends


def _log_change(first: Multiplier, last: Multiplier) -> tuple[float | None, float | None]:
    """The log multiplier's change from `first` to `last` and its Welch test (None: too few seeds)."""
    a, b = first.ratio, last.ratio
    if a is None or b is None:
        return None, None
    change = math.log(b.mean) - math.log(a.mean)
    if a.n < 2 or b.n < 2 or a.sd is None or b.sd is None or a.sd + b.sd == 0:
        return change, None
    test = ttest_ind_from_stats(math.log(b.mean), b.sd, b.n, math.log(a.mean), a.sd, a.n, equal_var=False)
    return change, float(test.pvalue)
