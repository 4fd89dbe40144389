"""The group-sequential design that adds seeds in rounds (docs/sweeps.md, tinylm/analysis/add_seeds.py): the α
each look may spend, the nominal level each look's boundary gives its paired t test, and the first verdict a
look gives each row of a family."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from tinylm.analysis.estimates import MIN_EFFECT, Comparison
from tinylm.analysis.verdicts import ALPHA, judge

# Null paths the t statistics' boundaries are calibrated on: the design's error is α within ±0.035 points
# (one binomial sd at α = 0.05); docs/sweeps.md.
T_PATHS = 400_000


def spent(information: float, alpha: float = ALPHA) -> float:
    """Lan & DeMets' (1983) O'Brien-Fleming-type spending function: the α spent once a fraction
    `information` (seeds so far / the most seeds the design allows) of the data is in."""
    if information <= 0:
        return 0.0
    information = min(1.0, information)
    return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(information)))


@dataclass(frozen=True)
class Look:
    """One look of a sequential design: `counts` are the seeds of every look that judges, up to and including
    this one, of at most `horizon`."""

    counts: tuple[int, ...]
    horizon: int

    def level(self, alpha: float) -> float:
        """The two-sided level a paired t test's p-value is compared with at this look, in a design of overall
        level α (`t_levels`)."""
        return t_levels(self.counts, self.horizon, alpha)[-1]


def sequential_plan(seed_counts: Sequence[int], max_seeds: int) -> list[Look | None]:
    """The looks of a design that had `seed_counts` seeds at its looks: a look with fewer than 2 seeds, or
    none more than the look before, judges nothing (a paired t test needs 2) and spends no α."""
    plan: list[Look | None] = []
    counts: tuple[int, ...] = ()
    for count in seed_counts:
        count = min(count, max_seeds)
        if count < 2 or (counts and count <= counts[-1]):
            plan.append(None)
            continue
        counts += (count,)
        plan.append(Look(counts, max_seeds))
    return plan


def first_verdicts(
    looks: Sequence[Sequence[Comparison]],
    plan: Sequence[Look | None],
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
) -> list[tuple[int, Comparison] | None]:
    """A sequential design's verdicts: `looks[k]` holds the tests (`paired_tests`) of every row of one family
    on the seeds look k had, in the same row order at every look; each look is judged as `plan[k]` says
    (None: a look that judges nothing), and a row keeps the first verdict a look gives it, with that look's
    index."""
    first: list[tuple[int, Comparison] | None] = [None] * (len(looks[0]) if looks else 0)
    for number, (family, look) in enumerate(zip(looks, plan, strict=True)):
        if look is None:
            continue
        for row, c in enumerate(judge(family, min_effect, alpha, look.level, with_power=False)):
            if first[row] is None and c.resolved:
                first[row] = (number, c)
    return first


@functools.cache
def t_levels(counts: tuple[int, ...], horizon: int, alpha: float = ALPHA) -> tuple[float, ...]:
    """The nominal two-sided level of each look's paired t test in a design with `counts` seeds at its looks (of
    at most `horizon`), spending α by `spent`: look k's boundary on |t| is set so that, under no difference,
    the chance of crossing it and no boundary before is the α spent between look k - 1 and k.

    Boundaries for z statistics (Jennison & Turnbull 2000, ch. 19) assume a known variance; applied to t
    tests with 1-15 degrees of freedom (each look's own estimate of it) they err by about 10% of α, because
    the looks' t statistics are less correlated than their z statistics. The looks' t statistics under no difference do not
    depend on the variance, so their joint law is that of `T_PATHS` paths of standard normal differences (a
    fixed seed: the same levels every time), and each boundary is the quantile of the paths still running
    that spends the increment (the first look's level is exact: it is its t test's alone). A look whose
    increment is under one path's share judges nothing (level 0).
    No library we depend on computes group-sequential boundaries for t statistics."""
    rng = np.random.default_rng(20261204)
    differences = rng.standard_normal((T_PATHS, counts[-1]))
    sums, squares = differences.cumsum(axis=1), (differences**2).cumsum(axis=1)
    running = np.ones(T_PATHS, dtype=bool)
    levels: list[float] = []
    crossed = 0
    for count in counts:
        mean = sums[:, count - 1] / count
        sd = np.sqrt((squares[:, count - 1] - count * mean**2) / (count - 1))
        t = np.abs(mean) / (sd / math.sqrt(count))
        if not levels:  # the first look's t statistic alone: its level is exactly the α it may spend
            level = spent(count / horizon, alpha)
            bound = float(student_t.isf(level / 2, count - 1)) if level > 0 else math.inf
        else:
            target = round(spent(count / horizon, alpha) * T_PATHS) - crossed  # paths this look may stop
            ordered = np.sort(t[running])[::-1]
            if target <= 0:
                bound = math.inf
            elif target < len(ordered):
                bound = float(ordered[target - 1] + ordered[target]) / 2
            else:
                bound = 0.0
            level = float(2 * student_t.sf(bound, count - 1))
        running &= t <= bound
        crossed = int(T_PATHS - running.sum())
        levels.append(level)
    return tuple(levels)
