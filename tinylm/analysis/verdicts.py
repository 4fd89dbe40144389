"""A family's verdicts (docs/sweeps.md): a table of comparisons is one family; its tests of difference (losses
and failures) and its tests of equivalence are each Holm-adjusted, and each row's verdict follows."""

from __future__ import annotations

import gc
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from statsmodels.stats.multitest import multipletests

from tinylm.analysis.estimates import (
    IDENTICAL,
    MIN_EFFECT,
    Failures,
    PairedTests,
    Power,
    WindowLosses,
    paired_tests,
    power,
)
from tinylm.analysis.outcome import (
    IDENTICAL_VERDICT,
    NOT_YET_JUDGED,
    ONE_SEED,
    UNRESOLVED,
    Outcome,
    Verdict,
)

ALPHA = 0.05  # the family-wise error rate of a table's verdicts
Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Judgement:
    """A family's judgement of one row's tests: Holm-adjusted p-values, the decisions at the levels of the
    look that judged it, the power its seeds have at the family's level, and the verdict."""

    p_adjusted: float | None = None
    p_equivalence_adjusted: float | None = None
    p_failures_adjusted: float | None = None
    differs: bool = False
    within_min_effect: bool = False
    fails_differently: bool = False
    power: Power | None = None
    verdict: Verdict = NOT_YET_JUDGED


@dataclass(frozen=True)
class Comparison:
    """A row of a family: the tests of a setting against its baseline and the family's judgement of them."""

    tests: PairedTests
    judgement: Judgement = Judgement()

    @property
    def resolved(self) -> bool:
        return self.judgement.verdict.outcome.resolved


def compare(
    values: Mapping[Hashable, float],
    baseline: Mapping[Hashable, float],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: WindowLosses | None = None,
) -> Comparison:
    """`paired_tests` judged as a family of one."""
    return judge([paired_tests(values, baseline, min_effect, confidence, window_losses)], min_effect)[0]


def judge(
    rows: Sequence[PairedTests],
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    level: Callable[[float], float] = float,
    with_power: bool = True,
    note: Callable[[PairedTests], str] | None = None,
) -> list[Comparison]:
    """Verdicts for one table, a family: Holm's step-down over its tests of difference and, apart, over its
    tests of equivalence, each share of α taken at `level` (a sequential look's boundary; a fixed design's:
    the share itself). Power at α / the tests of difference (`with_power=False`: none, it is slow);
    `note(tests)` follows each verdict (a look's number)."""
    difference = tests_of_difference(rows)
    equivalence = {i: t.p_equivalence for i, t in enumerate(rows) if t.p_equivalence is not None}
    rejected, rejected_eq = step_down(difference, alpha, level), step_down(equivalence, alpha, level)
    adjusted, adjusted_eq = holm(difference), holm(equivalence)
    size = max(1, len(difference))  # as `family_size` counts it
    judged = []
    for i, t in enumerate(rows):
        differs, fails, within = (i, "loss") in rejected, (i, "failures") in rejected, i in rejected_eq
        p_values = adjusted.get((i, "loss")), adjusted_eq.get(i), adjusted.get((i, "failures"))
        found = power(t, min_effect, alpha / size) if with_power else None
        words = verdict(t, differs, within, fails, min_effect)
        words = words.noted(note(t)) if note is not None else words
        judged.append(Comparison(t, Judgement(*p_values, differs, within, fails, found, words)))
    return judged


def tests_of_difference(rows: Sequence[PairedTests]) -> dict[tuple[int, str], float]:
    """A family's tests of difference, Holm-adjusted together: each row's loss test and failure test."""
    losses = {(i, "loss"): t.p_value for i, t in enumerate(rows) if t.p_value is not None}
    return losses | {(i, "failures"): t.failures.p_value for i, t in enumerate(rows) if t.failures}


def family_size(comparisons: Sequence[Comparison]) -> int:
    """The number of tests of difference in a family: what Holm divides α by, and what the report states."""
    return len(tests_of_difference([c.tests for c in comparisons]))


def step_down(p_values: Mapping[Key, float], alpha: float, level: Callable[[float], float]) -> set[Key]:
    """Holm's step-down, the k-th smallest of m p-values compared with `level(α / (m - k + 1))`: ours, because
    statsmodels' `multipletests` compares with the share itself."""
    rejected: set[Key] = set()
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    for rank, (key, p) in enumerate(ordered):
        if p > level(alpha / (len(ordered) - rank)):
            break
        rejected.add(key)
    return rejected


def holm(p_values: Mapping[Key, float]) -> dict[Key, float]:
    """Holm-adjusted p-values (statsmodels), by the same keys."""
    if not p_values:
        return {}
    # multipletests' closing gc.collect(), slow with torch loaded, skips frozen objects (docs/performance.md).
    gc.freeze()
    try:
        adjusted = multipletests(list(p_values.values()), method="holm")[1]
    finally:
        gc.unfreeze()
    return {key: float(p) for key, p in zip(p_values, adjusted, strict=True)}


def verdict(
    t: PairedTests, differs: bool, within_min_effect: bool, fails_differently: bool, min_effect: float
) -> Verdict:
    """The words of a judged row: the losses' verdict, and how often each side failed said beside it (the
    verdict itself where the losses leave the row open and the failures differ)."""
    if not t.seeds:
        return Verdict("no seeds in common with the baseline", Outcome.NOT_RESOLVED)
    losses = loss_verdict(t, differs, within_min_effect, min_effect)
    words = failure_words(t.failures, fails_differently)
    if t.failures is None or words is None:
        return losses
    if fails_differently and not losses.outcome.resolved:
        found = Outcome.WORSE if t.failures.mine > t.failures.theirs else Outcome.BETTER
        return Verdict(f"{found}: {words}", found)
    trained = " when trained" if losses.outcome.resolved else ""
    return Verdict(f"{losses}{trained}; {words}", losses.outcome)


def failure_words(failures: Failures | None, fails_differently: bool) -> str | None:
    """`fails 0/8 vs 2/8 (exact p = 0.5)`, or `fails more often, …` where the family's test found a
    difference; None where no seed failed."""
    if failures is None:
        return None
    if fails_differently:
        return f"fails {'more' if failures.mine > failures.theirs else 'less'} often, {failures.describe()}"
    return f"fails {failures.describe()}"


def loss_verdict(t: PairedTests, differs: bool, within_min_effect: bool, min_effect: float) -> Verdict:
    """The verdict on the losses of the seeds both sides trained."""
    d, open_, equivalent = t.difference, Outcome.NOT_RESOLVED, f"equivalent within ±{min_effect:g}"
    if d is None:
        return Verdict(f"{UNRESOLVED}: every seed failed on one side or both", open_)
    if t.p_value is None and not t.constant:  # one seed both trained
        return Verdict(ONE_SEED, open_)
    found = Outcome.BETTER if d.mean < 0 else Outcome.WORSE
    if t.constant:
        same = " (the same difference on every seed)"
        if abs(d.mean) <= IDENTICAL:
            return Verdict(IDENTICAL_VERDICT, Outcome.IDENTICAL)
        if abs(d.mean) < min_effect:
            return Verdict(equivalent + same, Outcome.EQUIVALENT)
        return Verdict(found + same, found)
    if differs:
        return Verdict(found + (f", but by less than {min_effect:g}" if within_min_effect else ""), found)
    if within_min_effect:
        return Verdict(equivalent, Outcome.EQUIVALENT)
    return Verdict(UNRESOLVED, open_)
