"""A family's verdicts (docs/sweeps.md): a table of comparisons is one family, its tests of difference (the
loss tests and the failure tests) and its tests of equivalence each Holm-adjusted so that the family-wise
error stays at α; each row's verdict follows from the family's decisions.

The losses are compared over the seeds both sides trained; how often each side failed (diverged or collapsed)
is tested apart, in the same family, and said beside them.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace

from statsmodels.stats.multitest import multipletests

from tinylm.analysis.estimates import (
    IDENTICAL,
    MIN_EFFECT,
    Comparison,
    WindowLosses,
    paired_tests,
    power,
)
from tinylm.analysis.outcome import (
    IDENTICAL_VERDICT,
    ONE_SEED,
    UNRESOLVED,
    Outcome,
    Verdict,
    equivalent,
)

ALPHA = 0.05  # the family-wise error rate of a table's verdicts


def compare(
    values: Mapping[Hashable, float],
    baseline: Mapping[Hashable, float],
    min_effect: float = MIN_EFFECT,
    confidence: float = 0.95,
    window_losses: WindowLosses | None = None,
) -> Comparison:
    """`paired_tests` judged as a family of one; `judge` gives the verdicts of a whole table."""
    tested = paired_tests(values, baseline, min_effect, confidence, window_losses)
    return judge([tested], min_effect)[0] if tested.seeds else tested


def judge(
    comparisons: Sequence[Comparison],
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    level: Callable[[float], float] | None = None,
    with_power: bool = True,
) -> list[Comparison]:
    """Verdicts for one table, a family: Holm's step-down over its tests of difference (the loss tests and the
    failure tests), and separately over its tests of equivalence. A fixed design compares the k-th
    smallest p-value of m with α / (m - k + 1); a look of a sequential design with `level` of that share of α,
    the level its boundary gives (`sequential.Look.level`). The power of each row is computed at α / the
    number of tests of difference (`with_power=False` skips it: it is slow)."""
    family = tests_of_difference(comparisons)
    equivalence = [(i, c.p_equivalence) for i, c in enumerate(comparisons) if c.p_equivalence is not None]
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
    for i, c in enumerate(comparisons):
        c = replace(
            c,
            p_adjusted=adjusted.get((i, "loss")),
            p_equivalence_adjusted=adjusted_eq.get(i),
            p_failures_adjusted=adjusted.get((i, "failures")),
            differs=(i, "loss") in rejected,
            within_min_effect=i in rejected_eq,
            fails_differently=(i, "failures") in rejected,
        )
        if with_power:
            c = replace(c, power=power(c, min_effect, alpha / size))
        judged.append(replace(c, verdict=verdict(c, min_effect)))
    return judged


def tests_of_difference(comparisons: Sequence[Comparison]) -> list[tuple[int, str, float]]:
    """A family's tests of difference, Holm-adjusted together: each row's loss test and failure test."""
    family = [(i, "loss", c.p_value) for i, c in enumerate(comparisons) if c.p_value is not None]
    return family + [(i, "failures", c.failures.p_value) for i, c in enumerate(comparisons) if c.failures]


def family_size(comparisons: Sequence[Comparison]) -> int:
    """The number of tests of difference in a family: what Holm divides α by, and what the report states."""
    return len(tests_of_difference(comparisons))


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


def verdict(c: Comparison, min_effect: float) -> Verdict:
    """The words of a judged comparison: the family's decisions and the comparison's own tests. The losses are
    judged over the seeds both sides trained; how often each side failed is a finding of its own, said
    beside them, and the verdict where the losses leave the row open."""
    if not c.seeds:
        return c.verdict
    failures, words = c.failures, failure_words(c)
    losses = loss_verdict(c, min_effect)
    if failures is None or words is None:
        return losses
    trained = " when trained" if losses.outcome.resolved else ""
    if c.fails_differently and not losses.outcome.resolved:
        found = Outcome.WORSE if failures.mine > failures.theirs else Outcome.BETTER
        return Verdict(f"{found}: {words}", found)
    return Verdict(f"{losses}{trained}; {words}", losses.outcome)


def failure_words(c: Comparison) -> str | None:
    """How often each side failed, as a verdict says it beside the losses (`fails 0/8 vs 2/8 (exact p = 0.5)`,
    or `fails more often, …` where the family's test found a difference); None where no seed failed."""
    failures = c.failures
    if failures is None:
        return None
    if c.fails_differently:
        return f"fails {'more' if failures.mine > failures.theirs else 'less'} often, {failures.describe()}"
    return f"fails {failures.describe()}"


def decided_by_failures(c: Comparison) -> bool:
    """Whether the verdict's better/worse is how often each side failed, the losses having left the row open
    (`verdict`): it says nothing of the losses' sign."""
    losses_resolved = c.differs or c.within_min_effect or (c.constant and c.difference is not None)
    return c.fails_differently and c.verdict.outcome.resolved and not losses_resolved


def loss_verdict(c: Comparison, min_effect: float) -> Verdict:
    """The verdict on the losses of the seeds both sides trained."""
    d = c.difference
    better, worse, open_ = Outcome.BETTER, Outcome.WORSE, Outcome.NOT_RESOLVED
    if d is None and c.untested:
        return Verdict(c.untested, open_)
    if d is None:
        return Verdict(f"{UNRESOLVED}: every seed failed on one side or both", open_)
    if c.p_adjusted is None and not c.constant:
        return Verdict(c.untested or ONE_SEED, open_)
    if c.constant:
        if abs(d.mean) <= IDENTICAL:
            return Verdict(IDENTICAL_VERDICT, Outcome.IDENTICAL)
        if abs(d.mean) < min_effect:
            return Verdict(
                f"{equivalent(min_effect)} (the same difference on every seed)", Outcome.EQUIVALENT
            )
        found = better if d.mean < 0 else worse
        return Verdict(f"{found} (the same difference on every seed)", found)
    equivalent_too = c.within_min_effect
    if c.differs:
        found = better if d.mean < 0 else worse
        return Verdict(found + (f", but by less than {min_effect:g}" if equivalent_too else ""), found)
    if equivalent_too:
        return Verdict(equivalent(min_effect), Outcome.EQUIVALENT)
    return Verdict(UNRESOLVED, open_)
