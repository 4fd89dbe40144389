"""A family's Holm-adjusted verdicts (docs/sweeps.md): a `Verdict`'s words, and its `Outcome` for code."""

from __future__ import annotations

import enum
import gc
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import NoReturn, TypeVar

from statsmodels.stats.multitest import multipletests

from tinylm.analysis.estimates import IDENTICAL, MIN_EFFECT, Failures, PairedTests, Power, paired_tests, power

ALPHA = 0.05  # the family-wise error rate of a table's verdicts
HOLM = "holm"  # the adjustment of every family (statsmodels' multipletests method by that name)
BETTER = "better"
WORSE = "worse"
UNRESOLVED = "not resolved"
IDENTICAL_VERDICT = "identical on every seed"
ONE_SEED = "one seed: no interval"
Key = TypeVar("Key", bound=Hashable)


class Outcome(enum.StrEnum):
    """What a verdict states, whatever its words: better, worse, equivalent, identical, not resolved."""

    BETTER = BETTER
    WORSE = WORSE
    EQUIVALENT = "equivalent"
    IDENTICAL = IDENTICAL_VERDICT
    NOT_RESOLVED = UNRESOLVED


class Verdict(str):
    """A verdict's words as the report prints them, carrying the `outcome` they state: code reads the outcome,
    never the words (tests/test_verdict_type.py fails where a verdict's text is parsed)."""

    outcome: Outcome

    def __new__(cls, text: str, outcome: Outcome) -> Verdict:
        verdict = super().__new__(cls, text)
        verdict.outcome = outcome  # set as the str is made: a str subclass has no __init__ to take it
        return verdict

    def __reduce__(self) -> tuple:  # copies and pickles keep the outcome
        return (Verdict, (str(self), self.outcome))

    def noted(self, note: str) -> Verdict:
        """This verdict with `note` after its words, the same outcome."""
        return Verdict(f"{self}{note}", self.outcome)

    def _read_back(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "a verdict's words are for people: code reads its outcome (str(verdict) to print them)"
        )

    # Code that read the words back would break the day they are reworded.
    startswith = endswith = split = rsplit = partition = rpartition = _read_back
    find = rfind = index = rindex = count = removeprefix = removesuffix = __contains__ = _read_back


NOT_YET_JUDGED = Verdict(UNRESOLVED, Outcome.NOT_RESOLVED)


@dataclass(frozen=True)
class Judgement:
    """A family's judgement of a row: Holm-adjusted p-values, decisions at its look's levels, the verdict."""

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
        """Whether its verdict resolved (anything but `not resolved`)."""
        return self.judgement.verdict.outcome is not Outcome.NOT_RESOLVED


def compare(
    values: Mapping[Hashable, float], baseline: Mapping[Hashable, float], min_effect: float = MIN_EFFECT
) -> Comparison:
    """`paired_tests` judged as a family of one."""
    return judge([paired_tests(values, baseline, min_effect)], min_effect)[0]


def judge(
    rows: Sequence[PairedTests],
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    level: Callable[[float], float] = float,
    with_power: bool = True,
    note: Callable[[PairedTests], str] | None = None,
) -> list[Comparison]:
    """One table's verdicts: Holm over its tests of difference and, apart, of equivalence, at `level` of each
    share of α (a look's boundary); power at α / family size unless `with_power=False`; `note` after each."""
    difference = tests_of_difference(rows)
    equivalence = {i: t.p_equivalence for i, t in enumerate(rows) if t.p_equivalence is not None}
    rejected, rejected_eq = step_down(difference, alpha, level), step_down(equivalence, alpha, level)
    adjusted, adjusted_eq = holm(difference), holm(equivalence)
    size = max(1, len(difference))  # as `family_size` counts it
    judged = []
    for i, t in enumerate(rows):
        differs, fails, within = (i, "loss") in rejected, (i, "failures") in rejected, i in rejected_eq
        words = verdict(t, differs, within, fails, min_effect)
        judgement = Judgement(
            p_adjusted=adjusted.get((i, "loss")),
            p_equivalence_adjusted=adjusted_eq.get(i),
            p_failures_adjusted=adjusted.get((i, "failures")),
            differs=differs,
            within_min_effect=within,
            fails_differently=fails,
            power=power(t, min_effect, alpha / size) if with_power else None,
            verdict=words.noted(note(t)) if note is not None else words,
        )
        judged.append(Comparison(t, judgement))
    return judged


@dataclass(frozen=True)
class Family:
    """Tests adjusted together: `method` over its `size` tests holds the chance of any false rejection among
    them to `alpha`. `adjusts`: where report.json holds their adjusted p-values (docs/sweeps.md)."""

    tests: str  # what they test: "difference", "equivalence", "change across levels"
    adjusts: tuple[str, ...]
    size: int
    alpha: float
    method: str = HOLM
    look: int | None = None  # a sequential design's (2 on) whose added seeds it judges; None: the sweep's


def judged_families(rows: Sequence[PairedTests], alpha: float, look: int | None = None) -> tuple[Family, ...]:
    """The two families `judge` adjusts apart over `rows`: the tests of difference (losses and failures
    together), and of equivalence; `look`: a sequential design's, whose rows are in each setting's `added`."""
    judged = "comparison" if look is None else "added"
    difference = (f"{judged}.judgement.p_adjusted", f"{judged}.judgement.p_failures_adjusted")
    equivalence = sum(t.p_equivalence is not None for t in rows)
    return (
        Family("difference", difference, len(tests_of_difference(rows)), alpha, look=look),
        Family("equivalence", (f"{judged}.judgement.p_equivalence_adjusted",), equivalence, alpha, look=look),
    )


def tests_of_difference(rows: Sequence[PairedTests]) -> dict[tuple[int, str], float]:
    """A family's tests of difference, Holm-adjusted together: each row's loss test and failure test."""
    losses = {(i, "loss"): t.p_value for i, t in enumerate(rows) if t.p_value is not None}
    return losses | {(i, "failures"): t.failures.p_value for i, t in enumerate(rows) if t.failures}


def family_size(comparisons: Sequence[Comparison]) -> int:
    """The number of tests of difference in a family: what Holm divides α by, and what the report states."""
    return len(tests_of_difference([c.tests for c in comparisons]))


def step_down(p_values: Mapping[Key, float], alpha: float, level: Callable[[float], float]) -> set[Key]:
    """Holm's step-down at `level(α / (m - k + 1))`: ours, as `multipletests` compares with the share."""
    rejected: set[Key] = set()
    ordered = sorted(p_values.items(), key=itemgetter(1))
    for rank, (key, p) in enumerate(ordered):
        if p > level(alpha / (len(ordered) - rank)):
            break
        rejected.add(key)
    return rejected


def holm(p_values: Mapping[Key, float]) -> dict[Key, float]:
    """Each p-value of `p_values` adjusted by Holm's step-down over all of them, by the same key."""
    if not p_values:
        return {}
    # multipletests' closing gc.collect(), slow with torch loaded, skips frozen objects (docs/performance.md).
    gc.freeze()
    try:
        adjusted = multipletests(list(p_values.values()), method=HOLM)[1]
    finally:
        gc.unfreeze()
    return {key: float(p) for key, p in zip(p_values, adjusted, strict=True)}


def verdict(
    t: PairedTests, differs: bool, within_min_effect: bool, fails_differently: bool, min_effect: float
) -> Verdict:
    """The trained seeds' verdict, each side's failures beside it (the verdict, where only they differ)."""
    if not t.seeds:
        return Verdict("no seeds in common with the baseline", Outcome.NOT_RESOLVED)
    losses = loss_verdict(t, differs, within_min_effect, min_effect)
    words = failure_words(t.failures, fails_differently)
    if t.failures is None or words is None:
        return losses
    if fails_differently and losses.outcome is Outcome.NOT_RESOLVED:
        found = Outcome.WORSE if t.failures.mine > t.failures.theirs else Outcome.BETTER
        return Verdict(f"{found}: {words}", found)
    trained = "" if losses.outcome is Outcome.NOT_RESOLVED else " when trained"
    return Verdict(f"{losses}{trained}; {words}", losses.outcome)


def failure_words(failures: Failures | None, fails_differently: bool) -> str | None:
    """`fails 0/8 vs 2/8 (exact p = 0.5)`, or `fails more often, …` where the family found a difference."""
    if failures is None:
        return None
    if fails_differently:
        return f"fails {'more' if failures.mine > failures.theirs else 'less'} often, {failures.describe()}"
    return f"fails {failures.describe()}"


def loss_verdict(t: PairedTests, differs: bool, within_min_effect: bool, min_effect: float) -> Verdict:
    """The verdict on a difference: better/worse where the t test `differs`, equivalent where TOST
    finds it `within_min_effect`, identical where every seed gave the same difference, else
    not resolved with the reason (one seed, every seed failed)."""
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
