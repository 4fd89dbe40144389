"""The tests of one comparison (docs/sweeps.md): a mean with its Student-t interval, a setting paired seed by
seed with its baseline, and the power its seeds have. Lower is better; a failed run counts as +inf."""

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

MIN_EFFECT = 0.01  # nats/char: δ, the smallest difference worth a claim (report.py --min-effect)
POWER = 0.8  # the power the "resolves" and "seeds for ±δ" columns are computed at
IDENTICAL = 1e-6  # differences below this are float32 rounding of a loss, not design (docs/sweeps.md)
Windows = Mapping[Hashable, Sequence[float]]  # per-window losses of the final evaluation, by seed


@dataclass(frozen=True)
class Estimate:
    """A mean over `n` values, with their sd and the mean's Student-t interval where there is one."""

    mean: float
    n: int
    sd: float | None = None
    low: float | None = None  # the mean's Student-t interval: none for one value or a non-finite one
    high: float | None = None

    @property
    def has_interval(self) -> bool:
        """Whether the mean has an interval (two or more finite values)."""
        return self.low is not None and self.high is not None


def estimate(values: Sequence[float], confidence: float = 0.95) -> Estimate:
    """The mean of `values` and its Student-t interval at `confidence`; a non-finite value makes the
    mean inf (a diverged run) or nan, with no interval."""
    n = len(values)
    if not all(math.isfinite(v) for v in values):
        return Estimate(math.inf if math.inf in values else math.nan, n)
    mean = statistics.fmean(values)
    if n == 1:
        return Estimate(mean, 1)
    sd = statistics.stdev(values)
    # scipy takes a zero scale for invalid (nan, with a warning): no spread, no width
    low, high = (mean, mean) if sd == 0 else student_t.interval(confidence, n - 1, mean, sd / math.sqrt(n))
    return Estimate(mean, n, sd, float(low), float(high))


@dataclass(frozen=True)
class Failures:
    """How many of the `n` seeds both sides ran failed on each side, and McNemar's exact p of that."""

    mine: int  # of the `n` seeds both sides ran, how many failed on each side
    theirs: int
    n: int
    p_value: float  # McNemar's exact test

    def describe(self) -> str:
        """`2/5 vs 0/5 (exact p = 0.5)`: the failures as the report prints them."""
        return f"{self.mine}/{self.n} vs {self.theirs}/{self.n} (exact p = {self.p_value:.2g})"


@dataclass(frozen=True)
class Power:
    """What the paired seeds can resolve: the smallest difference found with `POWER`, and the seeds δ
    would need."""

    sd: float  # of the paired differences
    level: float  # of the two-sided paired t test
    resolvable: float | None  # the smallest |difference| the seeds find with `POWER` at `level`
    seeds_for_min_effect: int | None  # the seeds δ would need


@dataclass(frozen=True)
class PairedTests:
    """A setting paired by seed with the baseline: the mean difference where both finished, and its tests."""

    seeds: tuple[Hashable, ...]
    unmatched: tuple[Hashable, ...] = ()  # seeds only one side has: said, not used
    difference: Estimate | None = None
    p_value: float | None = None  # the paired t test's
    p_equivalence: float | None = None  # TOST's, of a difference within ±δ
    constant: bool = False  # the same difference on every seed: no test needed, none possible
    failures: Failures | None = None
    eval_se: float | None = None  # the finite evaluation set's standard error of `difference.mean`


def paired_tests(
    values: Mapping[Hashable, float],
    baseline: Mapping[Hashable, float],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: tuple[Windows, Windows] | None = None,
) -> PairedTests:
    """`values` against `baseline`, paired by seed: the mean difference where both finished, its
    paired t test, TOST within ±`min_effect`, McNemar's test of failures, and with `window_losses`
    the evaluation set's own standard error of the difference."""
    seeds = tuple(sorted(set(values) & set(baseline), key=str))
    unmatched = tuple(sorted(set(values) ^ set(baseline), key=str))
    finished = [s for s in seeds if math.isfinite(values[s]) and math.isfinite(baseline[s])]
    failures = None
    if len(finished) < len(seeds):  # McNemar's exact test reads only the seeds where one side failed
        failed = [(not math.isfinite(values[s]), not math.isfinite(baseline[s])) for s in seeds]
        only_mine, only_theirs = sum(a and not b for a, b in failed), sum(b and not a for a, b in failed)
        p_failures = float(mcnemar([[0, only_theirs], [only_mine, 0]], exact=True).pvalue)
        failures = Failures(sum(a for a, _ in failed), sum(b for _, b in failed), len(seeds), p_failures)
    if not finished:
        return PairedTests(seeds, unmatched, failures=failures)
    mine, theirs = np.array([values[s] for s in finished]), np.array([baseline[s] for s in finished])
    constant = len(finished) >= 2 and float(np.std(mine - theirs)) <= IDENTICAL
    tested = len(finished) >= 2 and not constant
    difference = estimate([float(d) for d in mine - theirs], confidence)
    p_value = float(ttest_rel(mine, theirs).pvalue) if tested else None
    p_equivalence = float(ttost_paired(mine, theirs, -min_effect, min_effect)[0]) if tested else None
    eval_se = None
    pairs = [(window_losses[0].get(s), window_losses[1].get(s)) for s in finished] if window_losses else []
    if pairs and all(a is not None and b is not None and len(a) == len(b) >= 2 for a, b in pairs):
        # Per seed, the SE of its mean window-by-window difference (both runs saw the same windows).
        variances = [float(np.var(np.subtract(a, b, dtype=float), ddof=1)) / len(a) for a, b in pairs]
        eval_se = math.sqrt(sum(variances)) / len(variances)
    return PairedTests(
        seeds,
        unmatched,
        difference,
        p_value=p_value,
        p_equivalence=p_equivalence,
        constant=constant,
        failures=failures,
        eval_se=eval_se,
    )


def power(tests: PairedTests, min_effect: float, level: float) -> Power | None:
    """What the seeds of `tests` can resolve at `level`; None with fewer than two differences or none
    spread (no sd to size from)."""
    d = tests.difference
    if d is None or d.sd is None or d.n < 2 or d.sd <= IDENTICAL:
        return None
    effect = _solved(nobs=d.n, alpha=level, power=POWER)
    resolvable = effect * d.sd if effect is not None else None
    return Power(d.sd, level, resolvable, seeds_needed(min_effect / d.sd, level))


def seeds_needed(effect_size: float, level: float) -> int | None:
    """The paired seeds a standardised difference needs to be found with `POWER` at `level` (at least 2)."""
    if TTestPower().power(effect_size=effect_size, nobs=2, alpha=level) >= POWER:
        return 2  # below 2 seeds there is no interval at all
    n = _solved(effect_size=effect_size, alpha=level, power=POWER)
    return max(2, math.ceil(n)) if n is not None else None


def _solved(**known: float) -> float | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels warns, then returns nan, when its root finder fails
        try:
            found = float(np.asarray(TTestPower().solve_power(**known)).reshape(-1)[0])
        except (ValueError, RuntimeError):
            return None
    return found if math.isfinite(found) else None
