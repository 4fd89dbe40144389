"""The statistics behind a comparison: a mean over seeds with its Student-t confidence interval, a paired
difference against a baseline with a verdict, and the best learning rate of a setting (docs/sweeps.md).
Lower is better (validation losses); a diverged run counts as +inf: a result, and the worst one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from scipy.stats import t as student_t

BETTER = "better"
WORSE = "worse"
UNRESOLVED = "not resolved at this budget"
ONE_SEED = "one seed: no interval"


@dataclass(frozen=True)
class Estimate:
    """The mean of `n` values, their standard deviation (n - 1) and a two-sided confidence interval for the
    mean (Student t with n - 1 degrees of freedom). With one value, or a non-finite one, only the mean."""

    mean: float
    n: int
    sd: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = 0.95

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None


def estimate(values: Sequence[float], confidence: float = 0.95) -> Estimate:
    if not values:
        raise ValueError("no values to estimate from")
    n = len(values)
    if not all(math.isfinite(v) for v in values):
        return Estimate(
            math.inf if any(v == math.inf for v in values) else math.nan, n, confidence=confidence
        )
    mean = statistics.fmean(values)
    if n == 1:
        return Estimate(mean, 1, confidence=confidence)
    sd = statistics.stdev(values)
    half = student_t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return Estimate(mean, n, sd, mean - half, mean + half, confidence)


@dataclass(frozen=True)
class Comparison:
    """A setting against the baseline: the mean over matching seeds of (setting - baseline), its interval,
    and what that says. Negative differences mean the setting reaches a lower loss."""

    difference: Estimate | None
    seeds: tuple[Hashable, ...]
    verdict: str


def compare(
    values: Mapping[Hashable, float], baseline: Mapping[Hashable, float], confidence: float = 0.95
) -> Comparison:
    """Pair `values` with `baseline` seed by seed (keys are seeds) and judge the mean difference by where its
    interval lies against 0. Where one side diverged (+inf), size decides nothing: the verdict says which."""
    seeds = tuple(sorted(set(values) & set(baseline), key=str))
    if not seeds:
        return Comparison(None, seeds, "no seeds in common with the baseline")
    mine_diverged = [s for s in seeds if not math.isfinite(values[s])]
    theirs_diverged = [s for s in seeds if not math.isfinite(baseline[s])]
    if mine_diverged or theirs_diverged:
        if set(mine_diverged) == set(theirs_diverged) == set(seeds):
            return Comparison(None, seeds, "both diverged")
        if len(mine_diverged) > len(theirs_diverged):
            return Comparison(None, seeds, f"{WORSE}: diverged on {len(mine_diverged)} of {len(seeds)} seeds")
        if len(theirs_diverged) > len(mine_diverged):
            return Comparison(
                None,
                seeds,
                f"{BETTER}: the baseline diverged on {len(theirs_diverged)} of {len(seeds)} seeds",
            )
        return Comparison(None, seeds, "both diverged on some seeds")
    difference = estimate([values[s] - baseline[s] for s in seeds], confidence)
    return Comparison(difference, seeds, verdict(difference))


def verdict(difference: Estimate) -> str:
    if not difference.has_interval:
        return ONE_SEED
    assert difference.low is not None and difference.high is not None
    if difference.high < 0:
        return BETTER
    if difference.low > 0:
        return WORSE
    return UNRESOLVED


def best_key(groups: Mapping[Hashable, Sequence[float]]) -> Hashable:
    """The key whose values have the lowest mean; a group with a diverged (+inf) value never wins unless
    every group has one."""
    return min(groups, key=lambda key: _mean_or_inf(groups[key]))


def _mean_or_inf(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values and all(math.isfinite(v) for v in values) else math.inf
