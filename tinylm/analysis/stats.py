"""The statistics behind a comparison (docs/sweeps.md): a mean over seeds with its Student-t interval; a
setting against a baseline, paired seed by seed, with a test of difference, a test of equivalence within ±δ
and an exact test of how often each side diverged; verdicts over a table of comparisons that keep the
family-wise error at α (Holm); the power each comparison has; a learning rate chosen on other seeds than
those it is judged on (cross-fitting); and the levels of a sequential design that adds seeds in rounds.

Lower is better (validation losses); a diverged run counts as +inf, so a comparison whose sides diverge on
unequal numbers of seeds is resolved only once that difference is (never `better` for the side that diverges
more, whatever its finished seeds reach). The tests themselves come from scipy and
statsmodels.
"""

from __future__ import annotations

import enum
import functools
import gc
import math
import statistics
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NoReturn

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binomtest, norm, ttest_rel
from scipy.stats import t as student_t
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

ALPHA = 0.05  # the family-wise error rate of a table's verdicts
MIN_EFFECT = 0.01  # nats/char: δ, the smallest difference worth a claim (report.py --min-effect)
POWER = 0.8  # the power the "resolves" and "seeds for ±δ" columns are computed at
# A loss near 2 nats is a float32 with a resolution of 2.4e-7: differences below this are rounding, not design.
IDENTICAL = 1e-6

BETTER = "better"
WORSE = "worse"
UNRESOLVED = "not resolved"
IDENTICAL_VERDICT = "identical on every seed"
ONE_SEED = "one seed: no interval"
DIVERGENCE_OPEN = "the sides diverge unequally"
NO_SEEDS = "no seeds in common with the baseline"


# Each side's per-window losses of the final evaluation, by seed.
WindowLosses = tuple[Mapping[Hashable, Sequence[float]], Mapping[Hashable, Sequence[float]]]


def equivalent(min_effect: float) -> str:
    return f"equivalent within ±{min_effect:g}"


class Outcome(enum.StrEnum):
    """What a comparison found: the part of a verdict the rest of the analysis reads."""

    BETTER = BETTER
    WORSE = WORSE
    EQUIVALENT = "equivalent"
    IDENTICAL = IDENTICAL_VERDICT
    NOT_RESOLVED = UNRESOLVED

    @property
    def resolved(self) -> bool:
        return self is not Outcome.NOT_RESOLVED


class Verdict(str):
    """A verdict's words as the report prints them, carrying the `outcome` they state: code reads the outcome,
    never the words (tests/test_verdict_type.py fails where a verdict's text is parsed)."""

    outcome: Outcome

    def __new__(cls, text: str, outcome: Outcome) -> Verdict:
        verdict = super().__new__(cls, text)
        verdict.outcome = outcome
        return verdict

    def __reduce__(self) -> tuple:  # copies and pickles keep the outcome
        return (Verdict, (str(self), self.outcome))

    def noted(self, note: str) -> Verdict:
        """The same outcome with `note` after the words."""
        return Verdict(f"{self}{note}", self.outcome)

    def _read_back(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "a verdict's words are for people: code reads its outcome (str(verdict) to print them)"
        )

    # Reading the words back would break the day they are reworded (the ladder once parsed them).
    startswith = endswith = split = rsplit = partition = rpartition = _read_back
    find = rfind = index = rindex = count = removeprefix = removesuffix = __contains__ = _read_back


NOT_YET_JUDGED = Verdict(UNRESOLVED, Outcome.NOT_RESOLVED)


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
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return Estimate(mean, n, sd, mean - half, mean + half, confidence)


@dataclass(frozen=True)
class Divergence:
    """How many of the `n` seeds both sides ran diverged on each side, and McNemar's exact test of the
    difference: a binomial test on the seeds where exactly one side diverged."""

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
class Comparison:
    """A setting against the baseline over the seeds both have. `difference` is the mean of (setting -
    baseline) over the seeds both finished (< 0: the setting reaches a lower loss); the p-values are the
    paired t test of no difference and the paired two one-sided tests (TOST) of a difference inside ±δ.
    `judge` fills in the Holm-adjusted p-values, the family's decisions, the power and the verdict."""

    seeds: tuple[Hashable, ...]
    unmatched: tuple[Hashable, ...] = ()  # seeds only one side has: said, not used
    difference: Estimate | None = None
    p_value: float | None = None
    p_equivalence: float | None = None
    constant: bool = False  # the same difference on every seed: no test needed, none possible
    untested: str | None = None  # why there is no test (one seed, ...)
    divergence: Divergence | None = None
    eval_se: float | None = None  # the evaluation set's standard error of `difference.mean`
    p_adjusted: float | None = None
    p_equivalence_adjusted: float | None = None
    p_divergence_adjusted: float | None = None
    # The family's decisions (`judge`): Holm's step-down at the levels of the look that judged it.
    differs: bool = False
    within_min_effect: bool = False
    diverges_differently: bool = False
    power: Power | None = None
    verdict: Verdict = NOT_YET_JUDGED

    @property
    def resolved(self) -> bool:
        """The verdict answers the question: better, worse, equivalent or identical."""
        return self.verdict.outcome.resolved


def compare(
    values: Mapping[Hashable, float],
    baseline: Mapping[Hashable, float],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: WindowLosses | None = None,
) -> Comparison:
    """Pair `values` with `baseline` seed by seed (keys are seeds) and run the tests; `window_losses` (each
    side's per-window losses by seed) adds the evaluation set's standard error. The verdict is that of a
    family of one; `judge` gives those of a whole table."""
    tested = paired_tests(values, baseline, min_effect, confidence, window_losses)
    return judge([tested], min_effect)[0] if tested.seeds else tested


def paired_tests(
    values: Mapping[Hashable, float],
    baseline: Mapping[Hashable, float],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: WindowLosses | None = None,
) -> Comparison:
    """`compare`'s tests, without a verdict: the raw material of `judge`."""
    seeds = tuple(sorted(set(values) & set(baseline), key=str))
    unmatched = tuple(sorted(set(values) ^ set(baseline), key=str))
    if not seeds:
        return Comparison(seeds, unmatched, verdict=Verdict(NO_SEEDS, Outcome.NOT_RESOLVED))
    finished = [s for s in seeds if math.isfinite(values[s]) and math.isfinite(baseline[s])]
    divergence = None
    if len(finished) < len(seeds):
        mine = sum(not math.isfinite(values[s]) for s in seeds)
        theirs = sum(not math.isfinite(baseline[s]) for s in seeds)
        only_mine = sum(not math.isfinite(values[s]) and math.isfinite(baseline[s]) for s in seeds)
        only_theirs = sum(math.isfinite(values[s]) and not math.isfinite(baseline[s]) for s in seeds)
        discordant = only_mine + only_theirs
        p = binomtest(only_mine, discordant, 0.5).pvalue if discordant else 1.0
        divergence = Divergence(mine, theirs, len(seeds), float(p))
    comparison = Comparison(seeds, unmatched, divergence=divergence)
    if not finished:
        return comparison
    mine_values = np.array([values[s] for s in finished])
    theirs_values = np.array([baseline[s] for s in finished])
    differences = mine_values - theirs_values
    difference = estimate([float(d) for d in differences], confidence)
    comparison = replace(comparison, difference=difference)
    if window_losses is not None:
        comparison = replace(comparison, eval_se=evaluation_se(finished, *window_losses))
    if len(finished) < 2:
        return replace(comparison, untested=ONE_SEED)
    if float(np.std(differences)) <= IDENTICAL:
        return replace(comparison, constant=True)
    p = float(ttest_rel(mine_values, theirs_values).pvalue)
    p_equivalence = float(ttost_paired(mine_values, theirs_values, -min_effect, min_effect)[0])
    return replace(comparison, p_value=p, p_equivalence=p_equivalence)


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


def judge(
    comparisons: Sequence[Comparison],
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    look: Look | None = None,
    with_power: bool = True,
) -> list[Comparison]:
    """Verdicts for one table, a family: Holm's step-down over its tests of difference (the loss tests and the
    divergence tests), and separately over its tests of equivalence. A fixed design compares the k-th
    smallest p-value of m with α / (m - k + 1); a sequential design's `look`, with the level its boundary
    gives that share of α at this look. The power of each row is computed at α / the number of tests of
    difference (`with_power=False` skips it: it is slow)."""
    level = look.level if look is not None else float
    family = [(i, "loss", c.p_value) for i, c in enumerate(comparisons) if c.p_value is not None]
    family += [(i, "divergence", c.divergence.p_value) for i, c in enumerate(comparisons) if c.divergence]
    equivalence = [(i, c.p_equivalence) for i, c in enumerate(comparisons) if c.p_equivalence is not None]
    adjusted = dict(zip([(i, kind) for i, kind, _ in family], holm([p for *_, p in family]), strict=True))
    adjusted_eq = dict(zip([i for i, _ in equivalence], holm([p for _, p in equivalence]), strict=True))
    rejected = step_down({(i, kind): p for i, kind, p in family}, alpha, level)
    rejected_eq = step_down(dict(equivalence), alpha, level)
    size = max(1, len(family))
    judged = []
    for i, c in enumerate(comparisons):
        c = replace(
            c,
            p_adjusted=adjusted.get((i, "loss")),
            p_equivalence_adjusted=adjusted_eq.get(i),
            p_divergence_adjusted=adjusted.get((i, "divergence")),
            differs=(i, "loss") in rejected,
            within_min_effect=i in rejected_eq,
            diverges_differently=(i, "divergence") in rejected,
        )
        if with_power:
            c = replace(c, power=power(c, min_effect, alpha / size))
        judged.append(replace(c, verdict=verdict(c, min_effect)))
    return judged


def step_down(
    p_values: Mapping[Hashable, float], alpha: float, level: Callable[[float], float]
) -> set[Hashable]:
    """Holm's step-down: the k-th smallest of m p-values is rejected, while every smaller one was, when it is
    at most `level(α / (m - k + 1))` (`level` the identity: Holm's own procedure)."""
    rejected: set[Hashable] = set()
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    for rank, (key, p) in enumerate(ordered):
        if p > level(alpha / (len(ordered) - rank)):
            break
        rejected.add(key)
    return rejected


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (statsmodels), in the order given."""
    if not p_values:
        return []
    # statsmodels' Holm ends with gc.collect(), a scan of every live object: 0.1-0.3 s per call with torch
    # loaded, paid per family, look and jackknife replicate. Frozen objects are not scanned; freeze and
    # unfreeze only move them between the collector's lists.
    gc.freeze()
    try:
        adjusted = multipletests(list(p_values), method="holm")[1]
    finally:
        gc.unfreeze()
    return [float(p) for p in adjusted]


def verdict(c: Comparison, min_effect: float) -> Verdict:
    if not c.seeds:
        return c.verdict
    d = c.difference
    divergence = c.divergence
    better, worse, open_ = Outcome.BETTER, Outcome.WORSE, Outcome.NOT_RESOLVED
    if divergence is not None and c.diverges_differently:
        if divergence.mine > divergence.theirs:
            return Verdict(f"{WORSE}: diverges more often", worse)
        return Verdict(f"{BETTER}: diverges less often", better)
    note = f"; diverged {divergence.describe()}" if divergence else ""
    if d is None and c.untested:
        return Verdict(c.untested + note, open_)
    if d is None:
        return Verdict(f"{UNRESOLVED}: every seed diverged on one side or both{note}", open_)
    if c.p_adjusted is None and not c.constant:
        return Verdict((c.untested or ONE_SEED) + note, open_)
    if divergence is not None and divergence.mine != divergence.theirs:
        # A diverged run is the worst result: while how often each side diverges is open, the finished seeds'
        # losses cannot settle the comparison (a setting that diverges more is never `better`).
        return Verdict(f"{UNRESOLVED}: {DIVERGENCE_OPEN}, {divergence.describe()}", open_)
    if c.constant:
        if abs(d.mean) <= IDENTICAL:
            return Verdict(IDENTICAL_VERDICT + note, Outcome.IDENTICAL)
        if abs(d.mean) < min_effect:
            return Verdict(
                f"{equivalent(min_effect)} (the same difference on every seed){note}", Outcome.EQUIVALENT
            )
        found = better if d.mean < 0 else worse
        return Verdict(f"{found} (the same difference on every seed){note}", found)
    equivalent_too = c.within_min_effect
    if c.differs:
        found = better if d.mean < 0 else worse
        return Verdict(found + (f", but by less than {min_effect:g}" if equivalent_too else "") + note, found)
    if equivalent_too:
        return Verdict(equivalent(min_effect) + note, Outcome.EQUIVALENT)
    return Verdict(UNRESOLVED + note, open_)


def power(c: Comparison, min_effect: float, level: float) -> Power | None:
    """The paired sd of the comparison and what its seeds can resolve at `level` (two-sided paired t)."""
    d = c.difference
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


@dataclass(frozen=True)
class CrossFit:
    """A setting at a learning rate chosen on other seeds than each one it is judged on: for every seed, its
    result at the rate whose mean over the *other* seeds is lowest (leave one seed out)."""

    values: dict[Hashable, float]
    rates: dict[Hashable, Hashable]  # seed -> the rate chosen for it
    missing: tuple[Hashable, ...] = ()  # seeds with no run at the rate the other seeds chose


def cross_fit(by_rate: Mapping[Hashable, Mapping[Hashable, float]]) -> CrossFit | None:
    """Leave-one-seed-out tuning over `by_rate` (rate -> seed -> result); None with fewer than two seeds."""
    seeds = sorted({s for runs in by_rate.values() for s in runs}, key=str)
    if len(seeds) < 2:
        return None
    values, rates, missing = {}, {}, []
    for seed in seeds:
        means = {
            rate: mean_or_inf([v for s, v in runs.items() if s != seed])
            for rate, runs in by_rate.items()
            if any(s != seed for s in runs)
        }
        rate = min(means, key=lambda r: means[r])
        if seed in by_rate[rate]:
            values[seed], rates[seed] = by_rate[rate][seed], rate
        else:
            missing.append(seed)
    return CrossFit(values, rates, tuple(missing))


TWO_SEEDS_TUNED = "two finished seeds: too few to both choose a rate and test"


def tuned_tests(
    mine: Mapping[Hashable, Mapping[Hashable, float]],
    theirs: Mapping[Hashable, Mapping[Hashable, float]],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: WindowLosses | None = None,
) -> Comparison:
    """Two settings, each at a rate chosen by cross-fitting (rate -> seed -> result), compared over the seeds
    both have: the mean paired difference of the cross-fitted results, and its standard error from the
    jackknife over seeds of the whole choose-then-compare procedure. A plain paired t test would be too
    liberal: a seed that helps choose the others' rates is not independent of their results. The
    jackknife errs the other way (the Efron-Stein inequality), so the tests keep their level."""
    common = set(_seeds(mine)) & set(_seeds(theirs))
    unmatched = tuple(sorted(set(_seeds(mine)) ^ set(_seeds(theirs)), key=str))

    def fitted(keep: set[Hashable]) -> tuple[CrossFit, CrossFit] | None:
        a, b = cross_fit(_only(mine, keep)), cross_fit(_only(theirs, keep))
        return (a, b) if a is not None and b is not None else None

    fit = fitted(common)
    if fit is None:
        return Comparison(
            tuple(sorted(common, key=str)), unmatched,
            verdict=Verdict(NO_SEEDS if not common else ONE_SEED, Outcome.NOT_RESOLVED),
            untested=None if not common else ONE_SEED,
        )  # fmt: skip
    c = replace(
        paired_tests(fit[0].values, fit[1].values, min_effect, confidence, window_losses), unmatched=unmatched
    )
    if c.difference is None or c.constant or c.p_value is None:
        return c
    n = c.difference.n
    if n < 3:
        return replace(c, p_value=None, p_equivalence=None, untested=TWO_SEEDS_TUNED)
    leave_one_out = []
    for seed in sorted(common, key=str):  # a set of strings: its order, and so the sums', varies by process
        sub = fitted(common - {seed})
        pairs = (
            [sub[0].values[s] - sub[1].values[s] for s in sub[0].values if s in sub[1].values] if sub else []
        )
        pairs = [d for d in pairs if math.isfinite(d)]
        if not pairs:
            return replace(c, p_value=None, p_equivalence=None, untested="too few finished seeds to test")
        leave_one_out.append(statistics.fmean(pairs))
    k = len(leave_one_out)
    se = math.sqrt((k - 1) / k * sum((d - statistics.fmean(leave_one_out)) ** 2 for d in leave_one_out))
    mean, df = c.difference.mean, n - 1
    if se <= IDENTICAL:
        return replace(c, constant=True, p_value=None, p_equivalence=None)
    half = float(student_t.ppf(0.5 + confidence / 2, df)) * se
    difference = Estimate(mean, n, se * math.sqrt(n), mean - half, mean + half, confidence)
    p = float(2 * student_t.sf(abs(mean) / se, df))
    p_equivalence = float(
        max(student_t.sf((mean + min_effect) / se, df), student_t.cdf((mean - min_effect) / se, df))
    )
    return replace(c, difference=difference, p_value=p, p_equivalence=p_equivalence)


def _seeds(by_rate: Mapping[Hashable, Mapping[Hashable, float]]) -> list[Hashable]:
    return sorted({s for runs in by_rate.values() for s in runs}, key=str)


def _only(
    by_rate: Mapping[Hashable, Mapping[Hashable, float]], keep: set[Hashable]
) -> dict[Hashable, dict[Hashable, float]]:
    return {rate: {s: v for s, v in runs.items() if s in keep} for rate, runs in by_rate.items()}


def best_key(groups: Mapping[Hashable, Sequence[float]]) -> Hashable:
    """The key whose values have the lowest mean; a group with a diverged (+inf) value never wins unless
    every group has one."""
    return min(groups, key=lambda key: mean_or_inf(groups[key]))


def mean_or_inf(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values and all(math.isfinite(v) for v in values) else math.inf


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
        for row, c in enumerate(judge(family, min_effect, alpha, look, with_power=False)):
            if first[row] is None and c.resolved:
                first[row] = (number, c)
    return first


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


# Points of the grid each look's density is carried on: the boundaries agree with 1,601 points to 1e-8 in z.
GRID_POINTS = 401


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
