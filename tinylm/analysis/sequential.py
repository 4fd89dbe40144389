"""The group-sequential design that adds seeds in rounds (docs/sweeps.md, tinylm/analysis/add_seeds.py): the α
each look may spend, the nominal level each look's boundary gives, and the first verdict a look gives each
row of a family."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from tinylm.analysis.estimates import MIN_EFFECT, Comparison
from tinylm.analysis.verdicts import ALPHA, judge

# Points of the grid each look's density is carried on (checked against a finer grid: docs/sweeps.md).
GRID_POINTS = 401


def spent(information: float, alpha: float = ALPHA) -> float:
    """Lan & DeMets' (1983) O'Brien-Fleming-type spending function: the α spent once a fraction
    `information` (seeds so far / the most seeds the design allows) of the data is in."""
    if information <= 0:
        return 0.0
    information = min(1.0, information)
    return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(information)))


@dataclass(frozen=True)
class Look:
    """One look of a sequential design: `fractions` are the information (seeds / the design's most seeds) of
    every look that judges, up to and including this one."""

    fractions: tuple[float, ...]

    def level(self, alpha: float) -> float:
        """The two-sided level a p-value is compared with at this look, in a design of overall level α."""
        return group_sequential_levels(self.fractions, alpha)[-1]


def sequential_plan(seed_counts: Sequence[int], max_seeds: int) -> list[Look | None]:
    """The looks of a design that had `seed_counts` seeds at its looks: a look with fewer than 2 seeds, or
    none more than the look before, judges nothing (a paired t test needs 2) and spends no α."""
    plan: list[Look | None] = []
    fractions: tuple[float, ...] = ()
    for count in seed_counts:
        fraction = min(count, max_seeds) / max_seeds
        if count < 2 or (fractions and fraction <= fractions[-1]):
            plan.append(None)
            continue
        fractions += (fraction,)
        plan.append(Look(fractions))
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
def group_sequential_levels(fractions: tuple[float, ...], alpha: float = ALPHA) -> tuple[float, ...]:
    """The nominal two-sided level of each look of a group-sequential design at information `fractions`
    (increasing, in (0, 1]), spending α by `spent`: look k's boundary is set so that the chance, under no
    difference, of crossing it and no boundary before is exactly the α spent between look k - 1 and k.

    The looks' z statistics are correlated (sqrt(t_i / t_j)), so each look gets more than that increment as its
    own level. Computed by the recursive numerical integration of the score process (Armitage, McPherson &
    Rowe 1969; Jennison & Turnbull 2000, ch. 19), as R's gsDesign and ldbounds do: scipy's multivariate normal
    integrates by quasi-Monte Carlo to about 1e-5, coarser than the first looks' increments."""
    levels, before = [], 0.0
    grid, density = np.zeros(1), np.ones(1)  # the score at information 0: a point mass at 0
    weights, previous = np.ones(1), 0.0
    for fraction in fractions:
        increment = spent(fraction, alpha) - before
        before += increment
        sd = math.sqrt(fraction - previous)
        if increment <= 0:
            levels.append(0.0)
            bound = math.inf
        else:
            paths = (grid, weights * density, sd)
            high = 8 * math.sqrt(fraction)
            while crossing(high, *paths) > increment:
                high *= 2
            bound = brentq(
                lambda b, p=paths, i=increment: crossing(b, *p) - i, 0.0, high, xtol=1e-12, rtol=1e-12
            )
            levels.append(float(2 * norm.sf(bound / math.sqrt(fraction))))
        # The density of the score at this look among the paths that crossed no boundary so far.
        reach = min(bound, 8 * math.sqrt(fraction))
        new_grid = np.linspace(-reach, reach, GRID_POINTS)
        kernel = norm.pdf((new_grid[:, None] - grid[None, :]) / sd) / sd
        density = kernel @ (weights * density)
        grid, weights, previous = new_grid, simpson_weights(new_grid), fraction
    return tuple(levels)


def crossing(bound: float, grid: np.ndarray, mass: np.ndarray, sd: float) -> float:
    """The chance of a score beyond ±bound at the next look, from `mass` on `grid` moved by N(0, sd²)."""
    return float(np.sum(mass * (norm.sf((bound - grid) / sd) + norm.sf((bound + grid) / sd))))


def simpson_weights(grid: np.ndarray) -> np.ndarray:
    """Simpson's rule on an evenly spaced grid of an odd number of points."""
    weights = np.ones(len(grid))
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return weights * (grid[1] - grid[0]) / 3
