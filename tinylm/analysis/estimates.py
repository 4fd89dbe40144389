"""The tests of one comparison (docs/sweeps.md): a mean over seeds with its Student-t interval; a setting
against a baseline, paired seed by seed, with a test of difference and a test of equivalence within ±δ over
the seeds both sides trained, and McNemar's exact test of how often each side failed; the power its seeds have.

Lower is better (validation losses); a failed run (diverged or collapsed) counts as +inf. The tests come from
scipy and statsmodels; a family's verdicts are tinylm/analysis/verdicts.py's.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t
from scipy.stats import ttest_rel
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from tinylm.analysis.outcome import ONE_SEED

MIN_EFFECT = 0.01  # nats/char: δ, the smallest difference worth a claim (report.py --min-effect)
POWER = 0.8  # the power the "resolves" and "seeds for ±δ" columns are computed at
IDENTICAL = 1e-6  # differences below this are float32 rounding of a loss, not design (docs/sweeps.md)

# Each side's per-window losses of the final evaluation, by seed.
WindowLosses = tuple[Mapping[Hashable, Sequence[float]], Mapping[Hashable, Sequence[float]]]


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
    if sd == 0:  # scipy takes a zero scale for invalid (nan, with a warning): no spread, no width
        return Estimate(mean, n, sd, mean, mean, confidence)
    low, high = student_t.interval(confidence, n - 1, loc=mean, scale=sd / math.sqrt(n))
    return Estimate(mean, n, sd, float(low), float(high), confidence)


@dataclass(frozen=True)
class Failures:
    """How many of the `n` seeds both sides ran failed on each side, and McNemar's exact test of the
    difference (a binomial test on the seeds where exactly one side failed)."""

    mine: int
    theirs: int
    n: int
    p_value: float

    def describe(self) -> str:
        return f"{self.mine}/{self.n} vs {self.theirs}/{self.n} (exact p = {self.p_value:.2g})"


@dataclass(frozen=True)
class Power:
    """What the seeds of a comparison can resolve: the smallest |difference| they find with `POWER` at the
    level the row is judged at, and the seeds a difference of δ would need."""

    sd: float
    level: float
    resolvable: float | None
    seeds_for_min_effect: int | None


@dataclass(frozen=True)
class PairedTests:
    """A setting against the baseline over the seeds both have. `difference` is the mean of (setting -
    baseline) over the seeds both finished (< 0: the setting reaches a lower loss); the p-values are the
    paired t test of no difference and the paired two one-sided tests (TOST) of a difference inside ±δ."""

    seeds: tuple[Hashable, ...]
    unmatched: tuple[Hashable, ...] = ()  # seeds only one side has: said, not used
    difference: Estimate | None = None
    p_value: float | None = None
    p_equivalence: float | None = None
    constant: bool = False  # the same difference on every seed: no test needed, none possible
    untested: str | None = None  # why there is no test (one seed, ...)
    failures: Failures | None = None
    eval_se: float | None = None  # the evaluation set's standard error of `difference.mean`


def paired_tests(
    values: Mapping[Hashable, float],
    baseline: Mapping[Hashable, float],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: WindowLosses | None = None,
) -> PairedTests:
    """Pair `values` with `baseline` seed by seed (keys are seeds) and run the tests (a family's judgement of
    them is `verdicts.judge`'s); `window_losses` (each side's per-window losses by seed) adds the evaluation
    set's standard error."""
    seeds = tuple(sorted(set(values) & set(baseline), key=str))
    unmatched = tuple(sorted(set(values) ^ set(baseline), key=str))
    finished = [s for s in seeds if math.isfinite(values[s]) and math.isfinite(baseline[s])]
    failures = failure_test(values, baseline, seeds) if len(finished) < len(seeds) else None
    if not finished:
        return PairedTests(seeds, unmatched, failures=failures)
    mine, theirs = np.array([values[s] for s in finished]), np.array([baseline[s] for s in finished])
    constant = len(finished) >= 2 and float(np.std(mine - theirs)) <= IDENTICAL
    tested = len(finished) >= 2 and not constant
    return PairedTests(
        seeds, unmatched, estimate([float(d) for d in mine - theirs], confidence),
        float(ttest_rel(mine, theirs).pvalue) if tested else None,
        float(ttost_paired(mine, theirs, -min_effect, min_effect)[0]) if tested else None,
        constant, ONE_SEED if len(finished) < 2 else None, failures,
        evaluation_se(finished, *window_losses) if window_losses is not None else None,
    )  # fmt: skip


def failure_test(
    values: Mapping[Hashable, float], baseline: Mapping[Hashable, float], seeds: Sequence[Hashable]
) -> Failures:
    """How often each side failed (+inf) on `seeds`, and McNemar's exact test of the difference."""
    mine = [not math.isfinite(values[s]) for s in seeds]
    theirs = [not math.isfinite(baseline[s]) for s in seeds]
    only_mine = sum(a and not b for a, b in zip(mine, theirs, strict=True))
    only_theirs = sum(b and not a for a, b in zip(mine, theirs, strict=True))
    both = sum(a and b for a, b in zip(mine, theirs, strict=True))
    # McNemar's table (rows: mine trained, failed; columns: theirs); only its discordant cells count.
    table = [[len(seeds) - only_mine - only_theirs - both, only_theirs], [only_mine, both]]
    return Failures(sum(mine), sum(theirs), len(seeds), float(mcnemar(table, exact=True).pvalue))


def evaluation_se(
    seeds: Sequence[Hashable],
    mine: Mapping[Hashable, Sequence[float]],
    theirs: Mapping[Hashable, Sequence[float]],
) -> float | None:
    """The standard error the finite evaluation set adds to a mean paired difference: per seed, that of the
    mean of the window-by-window differences (both runs saw the same windows), combined over seeds."""
    variances = []
    for seed in seeds:
        a, b = mine.get(seed), theirs.get(seed)
        if a is None or b is None or len(a) != len(b) or len(a) < 2:
            return None
        d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
        variances.append(float(np.var(d, ddof=1)) / len(d))
    return math.sqrt(sum(variances)) / len(variances) if variances else None


def power(tests: PairedTests, min_effect: float, level: float) -> Power | None:
    """The paired sd of the comparison and what its seeds can resolve at `level` (two-sided paired t)."""
    d = tests.difference
    if d is None or d.sd is None or d.n < 2 or d.sd <= IDENTICAL:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # as in seeds_needed
        try:
            resolvable = float(TTestPower().solve_power(nobs=d.n, alpha=level, power=POWER)) * d.sd
        except (ValueError, RuntimeError):
            resolvable = None
    resolvable = resolvable if resolvable is not None and math.isfinite(resolvable) else None
    return Power(d.sd, level, resolvable, seeds_needed(min_effect / d.sd, level))


def seeds_needed(effect_size: float, level: float, power: float = POWER) -> int | None:
    """The paired seeds a standardised difference needs to be found with `power` at `level` (at least 2)."""
    analysis = TTestPower()
    if analysis.power(effect_size=effect_size, nobs=2, alpha=level) >= power:
        return 2  # below 2 seeds there is no interval at all
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels warns, then returns nan, when its root finder fails
        try:
            n = analysis.solve_power(effect_size=effect_size, alpha=level, power=power)
        except (ValueError, RuntimeError):
            return None
    n = float(np.asarray(n).reshape(-1)[0])
    return max(2, math.ceil(n)) if math.isfinite(n) else None
