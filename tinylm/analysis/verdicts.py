"""A family's verdicts (docs/sweeps.md): a table of comparisons is one family, its tests of difference (the
loss tests and the failure tests) and its tests of equivalence each Holm-adjusted so that the family-wise
error stays at α; each row's verdict follows from the family's decisions.

The losses are compared over the seeds both sides trained; how often each side failed (diverged or collapsed)
is tested apart, in the same family, and said beside them.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

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
    NO_SEEDS,
    NOT_YET_JUDGED,
    ONE_SEED,
    UNRESOLVED,
    Outcome,
    Verdict,
    equivalent,
)

ALPHA = 0.05  # the family-wise error rate of a table's verdicts


@dataclass(frozen=True)
class Judgement:
    """A family's judgement of one row's tests: the Holm-adjusted p-values, the decisions of Holm's step-down
    at the levels of the look that judged it, the power its seeds have at the family's level, and the verdict."""

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
        """The verdict answers the question: better, worse, equivalent or identical."""
        return self.judgement.verdict.outcome.resolved


def compare(
    values: Mapping[Hashable, float],
    baseline: Mapping[Hashable, float],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: WindowLosses | None = None,
) -> Comparison:
    """`paired_tests` judged as a family of one; `judge` gives the verdicts of a whole table."""
    return judge([paired_tests(values, baseline, min_effect, confidence, window_losses)], min_effect)[0]


def judge(
    rows: Sequence[PairedTests],
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    level: Callable[[float], float] | None = None,
    with_power: bool = True,
    note: Callable[[PairedTests], str] | None = None,
) -> list[Comparison]:
    """Verdicts for one table, a family: Holm's step-down over its tests of difference (the loss tests and the
    failure tests), and separately over its tests of equivalence. A fixed design compares the k-th
    smallest p-value of m with α / (m - k + 1); a look of a sequential design with `level` of that share of α,
    the level its boundary gives (`sequential.Look.level`). The power of each row is computed at α / the
    number of tests of difference (`with_power=False` skips it: it is slow); `note(tests)` follows a verdict
    with something the family does not know (a sequential look's number)."""
    family = tests_of_difference(rows)
    equivalence = [(i, t.p_equivalence) for i, t in enumerate(rows) if t.p_equivalence is not None]
    keys, keys_eq = [(i, kind) for i, kind, _ in family], [i for i, _ in equivalence]
    rejects, adjusted = _holm([p for *_, p in family], alpha)
    rejects_eq, adjusted_eq = _holm([p for _, p in equivalence], alpha)
    if level is None:
        rejected = {key for key, reject in zip(keys, rejects, strict=True) if reject}
        rejected_eq = {key for key, reject in zip(keys_eq, rejects_eq, strict=True) if reject}
    else:
        rejected = step_down({(i, kind): p for i, kind, p in family}, alpha, level)
        rejected_eq = step_down(dict(equivalence), alpha, level)
    adjusted = dict(zip(keys, adjusted, strict=True))
    adjusted_eq = dict(zip(keys_eq, adjusted_eq, strict=True))
    size = max(1, len(family))  # as `family_size` counts it
    judged = []
    for i, t in enumerate(rows):
        differs, fails = (i, "loss") in rejected, (i, "failures") in rejected
        words = verdict(t, differs, i in rejected_eq, fails, min_effect)
        judgement = Judgement(
            adjusted.get((i, "loss")), adjusted_eq.get(i), adjusted.get((i, "failures")), differs,
            i in rejected_eq, fails, power(t, min_effect, alpha / size) if with_power else None,
            words.noted(note(t)) if note is not None else words,
        )  # fmt: skip
        judged.append(Comparison(t, judgement))
    return judged


def tests_of_difference(rows: Sequence[PairedTests]) -> list[tuple[int, str, float]]:
    """A family's tests of difference, Holm-adjusted together: each row's loss test and failure test."""
    family = [(i, "loss", t.p_value) for i, t in enumerate(rows) if t.p_value is not None]
    return family + [(i, "failures", t.failures.p_value) for i, t in enumerate(rows) if t.failures]


def family_size(comparisons: Sequence[Comparison]) -> int:
    """The number of tests of difference in a family: what Holm divides α by, and what the report states."""
    return len(tests_of_difference([c.tests for c in comparisons]))


def step_down(
    p_values: Mapping[Hashable, float], alpha: float, level: Callable[[float], float]
) -> set[Hashable]:
    """Holm's step-down with the k-th smallest of m p-values rejected, while every smaller one was, when it is
    at most `level(α / (m - k + 1))`. Ours because a sequential look's level is a function of that share of α
    (its boundary), and statsmodels' `multipletests` compares with the share itself."""
    rejected: set[Hashable] = set()
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    for rank, (key, p) in enumerate(ordered):
        if p > level(alpha / (len(ordered) - rank)):
            break
        rejected.add(key)
    return rejected


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (statsmodels), in the order given."""
    return _holm(p_values, ALPHA)[1]


def _holm(p_values: Sequence[float], alpha: float) -> tuple[list[bool], list[float]]:
    """statsmodels' Holm at `alpha`: which p-values it rejects, and the adjusted p-values, in the order given."""
    if not p_values:
        return [], []
    # multipletests' closing gc.collect() is slow with torch loaded; it skips frozen objects (docs/performance.md).
    gc.freeze()
    try:
        reject, adjusted = multipletests(list(p_values), alpha=alpha, method="holm")[:2]
    finally:
        gc.unfreeze()
    return [bool(r) for r in reject], [float(p) for p in adjusted]


def verdict(
    t: PairedTests, differs: bool, within_min_effect: bool, fails_differently: bool, min_effect: float
) -> Verdict:
    """The words of a judged row: the family's decisions and the row's own tests. The losses are judged over
    the seeds both sides trained; how often each side failed is a finding of its own, said beside them, and
    the verdict where the losses leave the row open."""
    if not t.seeds:
        return Verdict(NO_SEEDS, Outcome.NOT_RESOLVED)
    failures, words = t.failures, failure_words(t.failures, fails_differently)
    losses = loss_verdict(t, differs, within_min_effect, min_effect)
    if failures is None or words is None:
        return losses
    trained = " when trained" if losses.outcome.resolved else ""
    if fails_differently and not losses.outcome.resolved:
        found = Outcome.WORSE if failures.mine > failures.theirs else Outcome.BETTER
        return Verdict(f"{found}: {words}", found)
    return Verdict(f"{losses}{trained}; {words}", losses.outcome)


def failure_words(failures: Failures | None, fails_differently: bool) -> str | None:
    """How often each side failed, as a verdict says it beside the losses (`fails 0/8 vs 2/8 (exact p = 0.5)`,
    or `fails more often, …` where the family's test found a difference); None where no seed failed."""
    if failures is None:
        return None
    if fails_differently:
        return f"fails {'more' if failures.mine > failures.theirs else 'less'} often, {failures.describe()}"
    return f"fails {failures.describe()}"


def decided_by_failures(c: Comparison) -> bool:
    """Whether the verdict's better/worse is how often each side failed, the losses having left the row open
    (`verdict`): it says nothing of the losses' sign."""
    t, j = c.tests, c.judgement
    losses_resolved = j.differs or j.within_min_effect or (t.constant and t.difference is not None)
    return j.fails_differently and c.resolved and not losses_resolved


def loss_verdict(t: PairedTests, differs: bool, within_min_effect: bool, min_effect: float) -> Verdict:
    """The verdict on the losses of the seeds both sides trained."""
    d = t.difference
    better, worse, open_ = Outcome.BETTER, Outcome.WORSE, Outcome.NOT_RESOLVED
    if d is None and t.untested:
        return Verdict(t.untested, open_)
    if d is None:
        return Verdict(f"{UNRESOLVED}: every seed failed on one side or both", open_)
    if t.p_value is None and not t.constant:
        return Verdict(t.untested or ONE_SEED, open_)
    if t.constant:
        if abs(d.mean) <= IDENTICAL:
            return Verdict(IDENTICAL_VERDICT, Outcome.IDENTICAL)
        if abs(d.mean) < min_effect:
            return Verdict(
                f"{equivalent(min_effect)} (the same difference on every seed)", Outcome.EQUIVALENT
            )
        found = better if d.mean < 0 else worse
        return Verdict(f"{found} (the same difference on every seed)", found)
    if differs:
        found = better if d.mean < 0 else worse
        return Verdict(found + (f", but by less than {min_effect:g}" if within_min_effect else ""), found)
    if within_min_effect:
        return Verdict(equivalent(min_effect), Outcome.EQUIVALENT)
    return Verdict(UNRESOLVED, open_)
