"""A ladder: a sweep judged level by level along some of its choices (the axis), each design against its
level's baseline, all levels one Holm family (tinylm.analysis.judging judges them), and each design's
`TrendWord` across levels (docs/sweeps.md)."""

from __future__ import annotations

import enum
import itertools
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from scipy.stats import ttest_ind_from_stats

from tinylm.analysis.grouping import Setting, groups_of, varying
from tinylm.analysis.runs import shared_reference
from tinylm.analysis.verdicts import Family, Outcome, failure_words, holm
from tinylm.overrides import shown

# The choice a scale ladder varies (conf/size/): a sweep over it is a ladder unless its baseline names it.
SCALE_KEY = "size"


class Level(NamedTuple):
    """One level of a ladder's axis before it is judged: its name, its runs' median parameters and steps (None
    where none logged them), and the settings at it."""

    name: str
    params: int | None
    steps: int | None
    settings: list[Setting]

    def by_size(self) -> tuple[bool, int, str]:
        """Sizes in order of their parameters (unknown last), then by name."""
        return self.params is None, self.params or 0, self.name


@dataclass(frozen=True)
class Rung:
    """One level: its name (the axis's values), its runs' median parameters and steps, and its designs."""

    level: str
    params: int | None
    steps: int | None
    baseline: Setting
    settings: list[Setting]

    @property
    def reference(self) -> dict[str, float] | None:
        """The reference levels every run at this level shares (a corpus ladder: each its own)."""
        return shared_reference([run for s in self.settings for run in s.runs])


class LadderKind(enum.StrEnum):
    """What a ladder's levels are, and so how the report names one: model sizes (the scale ladder, along
    SCALE_KEY alone, drawn against parameters), or the values of any other choices."""

    SIZE = "size"
    LEVEL = "level"

    @classmethod
    def of(cls, axis: Sequence[str]) -> LadderKind:
        """The kind of a ladder along `axis`."""
        return cls.SIZE if list(axis) == [SCALE_KEY] else cls.LEVEL


class TrendWord(enum.StrEnum):
    """What a design's difference did across a ladder's levels: the word after `across …`."""

    FLIPS = "flips"
    GROWS = "grows"
    SHRINKS = "shrinks"
    HOLDS = "holds"
    CHANGES = "changes"  # the difference changed (the change test); its sign and direction not shown
    UNRESOLVED = "not resolved"


@dataclass(frozen=True)
class Trend:
    """One design across levels: its difference's change from first level to last, and that change's test."""

    design: dict[str, Any]
    change: float | None
    p_value: float | None
    p_adjusted: float | None
    verdict: str
    word: TrendWord = TrendWord.UNRESOLVED


@dataclass(frozen=True)
class Ladder:
    """A family judged level by level along `axis`: each level's rung, and each design's trend."""

    axis: list[str]  # the choices whose values make a level
    columns: list[str]  # the design columns: the family's, less the axis
    rungs: list[Rung]  # in the axis's order (smallest first, for sizes)
    trends: list[Trend]

    @property
    def ordered(self) -> bool:
        """Whether the levels have an order (numbers), so that a word compares the ends."""
        return ordered(self.axis, [rung.settings for rung in self.rungs])

    @property
    def kind(self) -> LadderKind:
        """Sizes or levels: how the report names a rung (`at each size`)."""
        return LadderKind.of(self.axis)

    @property
    def in_bits(self) -> bool:
        """Read in bits/char and gain over unigram: the levels have different reference levels (corpora)."""
        references = [rung.reference for rung in self.rungs]
        return None not in references and any(r != references[0] for r in references)

    @property
    def shown_columns(self) -> list[str]:
        """The design columns that tell the ladder's designs apart (all, if none varies)."""
        designs = [s.choices for rung in self.rungs for s in rung.settings]
        return varying(self.columns, designs) or self.columns


def ordered(axis: Sequence[str], levels: Sequence[Sequence[Setting]]) -> bool:
    """Whether `grows` and `shrinks` mean something: the levels (each its settings) are sizes, or values of
    one numeric choice."""
    if LadderKind.of(axis) is LadderKind.SIZE:
        return True
    values = [settings[0].choices[axis[0]] for settings in levels] if len(axis) == 1 else []
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def ladder_levels(family: Sequence[Setting], axis: Sequence[str]) -> list[Level]:
    """Each level of `axis` as a `Rung` has it; by parameters for sizes, by value for one numeric choice."""
    levels: list[Level] = []
    for value, group in groups_of(family, axis).items():
        runs = [run for s in group for run in s.runs]
        params = [r.params for r in runs if r.params is not None]
        steps = [r.max_steps for r in runs if r.max_steps is not None]
        medians = [int(statistics.median(known)) if known else None for known in (params, steps)]
        levels.append(Level("/".join(shown(v) for v in value), *medians, group))
    if LadderKind.of(axis) is LadderKind.SIZE:
        levels.sort(key=Level.by_size)
    elif ordered(axis, [level.settings for level in levels]):

        def value(level: Level) -> float:  # the one choice's, as a number
            return float(level.settings[0].choices[axis[0]])

        levels.sort(key=value)
    return levels


def trends(
    rungs: list[Rung], columns: list[str], alpha: float, axis: Sequence[str] = (SCALE_KEY,)
) -> list[Trend]:
    """Each design's verdict across `rungs`; the change tests (ordered levels only) Holm over the designs."""
    along = ordered(axis, [rung.settings for rung in rungs])
    designs: dict[tuple[Any, ...], list[tuple[Rung, Setting]]] = {}
    for rung in rungs:
        for setting in rung.settings:
            if setting is not rung.baseline and setting.answer is not None:
                designs.setdefault(setting.key(columns), []).append((rung, setting))
    tests = {key: _change(found) if along else (None, None) for key, found in designs.items()}
    adjusted = holm({key: p for key, (_, p) in tests.items() if p is not None})
    said = []
    for key, found in designs.items():
        (change, p), p_adjusted = tests[key], adjusted.get(key)
        text, word = _verdict(found, p_adjusted, alpha, LadderKind.of(axis), ", ".join(axis))
        said.append(Trend(dict(zip(columns, key, strict=True)), change, p, p_adjusted, text, word))
    return said


def change_family(ladder: Ladder, alpha: float) -> Family | None:
    """The change tests `trends` adjusts together over the designs; None on unordered levels (no such
    test)."""
    if not ladder.ordered:
        return None
    tested = sum(t.p_value is not None for t in ladder.trends)
    return Family("change across levels", ("ladder.trends.p_adjusted",), tested, alpha)


def _change(found: list[tuple[Rung, Setting]]) -> tuple[float | None, float | None]:
    small, large = (s.answer.tests.difference for _, s in (found[0], found[-1]))
    if len(found) < 2 or any(d is None or not math.isfinite(d.mean) for d in (small, large)):
        return None, None
    change = large.mean - small.mean
    if small.sd is None or large.sd is None or small.n < 2 or large.n < 2 or small.sd + large.sd == 0:
        return change, None
    test = ttest_ind_from_stats(large.mean, large.sd, large.n, small.mean, small.sd, small.n, equal_var=False)
    return change, float(test.pvalue)


def _failures_at(found: list[tuple[Rung, Setting]], stated: Collection[str] = ()) -> str:
    """`; fails 0/8 vs 2/8 (exact p = 0.5) at post`, at each level a seed failed less those in `stated`."""
    clauses = [
        f"{words} at {rung.level}"
        for rung, s in found
        if rung.level not in stated
        and (words := failure_words(s.answer.tests.failures, s.answer.judgement.fails_differently))
        is not None
    ]
    return "; " + ", ".join(clauses) if clauses else ""


def _verdict(
    found: list[tuple[Rung, Setting]], p: float | None, alpha: float, kind: LadderKind, axis: str
) -> tuple[str, TrendWord]:
    """The text and word across levels; `p`: the change test's, Holm-adjusted (None on an unordered axis)."""
    signs = {Outcome.WORSE: 1, Outcome.BETTER: -1, Outcome.EQUIVALENT: 0, Outcome.IDENTICAL: 0}
    said = []  # each level's verdict and the losses' sign (None: unresolved)
    for rung, s in found:
        t, j = s.answer.tests, s.answer.judgement
        # Resolved by how often each side failed, the losses left open: no sign of the losses, so no flip.
        losses_open = not (j.differs or j.within_min_effect or (t.constant and t.difference))
        sign = None if j.fails_differently and losses_open else signs.get(j.verdict.outcome)
        said.append((rung.level, j.verdict, sign))
    directed = [level for level in said if level[2]]  # the losses better or worse
    for (level_a, verdict_a, a), (level_b, verdict_b, b) in itertools.pairwise(directed):
        if a != b:
            flip = f"flips at {level_b}: {verdict_a} at {level_a}, {verdict_b} at {level_b}"
            return flip + _failures_at(found, (level_a, level_b)), TrendWord.FLIPS
    every = ", ".join(f"{verdict} at {level}" for level, verdict, _ in said)
    ends = [s.answer.tests.difference for _, s in (found[0], found[-1])]
    small, large = (d.mean if d is not None else math.nan for d in ends)
    at_ends = f"{small:+.3f} at {found[0][0].level}, {large:+.3f} at {found[-1][0].level}"
    tested = f" (change p (Holm) = {p:.2g})" if p is not None else ""
    changed = p is not None and p <= alpha
    if changed and said[0][2] == said[-1][2] and said[0][2]:
        # One resolved sign at both ends: the change of the difference is one of its magnitude.
        word = TrendWord.GROWS if abs(large) > abs(small) else TrendWord.SHRINKS
        return f"{word.value} with {axis}: {at_ends}{tested}; {every}", word
    if len({d for *_, d in said}) == 1 and said[0][2] is not None:
        # Equivalent everywhere can hold while the change test rejects (a change within ±δ): say which.
        failures = _failures_at(found)  # the outcome alone would drop them
        text = f"holds at every {kind}: {said[0][1].outcome}" + (" when trained" if failures else "")
        if p is not None:
            shown_change = "a change within the margin" if changed else "no change"
            text += f" ({shown_change} with {axis} shown, p (Holm) = {p:.2g})"
        return text + failures, TrendWord.HOLDS
    if changed:
        # A change of the difference is shown, not its sign: an end's sign is known only where it is resolved.
        return f"{TrendWord.CHANGES.value} with {axis}: {at_ends}{tested}; {every}", TrendWord.CHANGES
    return f"not resolved across {kind}s: {every}", TrendWord.UNRESOLVED
