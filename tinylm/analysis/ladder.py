"""Does a ranking hold along an axis? A ladder is a sweep judged level by level along one or more of its
choices (the axis: `size` for `experiment=scale_ladder`, or any other, e.g. `optim.lr`, or `norm,model.n_layer`):
each design against the baseline *of its level*, every level's comparisons one Holm family, and per design a
verdict across levels (docs/sweeps.md). Along an ordered axis (`size`, by parameters, or one numeric choice):

- `flips at <level>`: the losses resolved in opposite directions at two levels (a `better`/`worse` decided
  by how often each side failed has no sign of the losses: it never makes a flip);
- `grows / shrinks with <axis>`: resolved in the same direction at the first and the last level, and the
  difference at the last differs from that at the first (Welch's t on the two levels' paired differences,
  Holm over the designs): with one sign at both ends, the change is one of magnitude;
- `holds at every <level>`: the same resolved verdict at every level, and no change shown; with how often
  each side failed at each level where a seed did (`when trained; fails 0/8 vs 2/8 … at post`);
- `changes with <axis>`: the same test finds a change, but the ends' verdicts make it none of the above. It
  claims no sign: a sign is shown only where a level resolves it, and a sign change only by `flips` (the
  sign at an unresolved end is noise);
- otherwise `not resolved across <level>s`, with what each level says.

Along an unordered axis (several choices, or text) there are no ends to compare: `flips`, `holds` or `not
resolved`. Each verdict is a `TrendWord` with its text, so what the ladder says is counted without reading text.
"""

from __future__ import annotations

import enum
import itertools
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from scipy.stats import ttest_ind_from_stats

from tinylm.analysis.grouping import Rules, Setting, compare_families, judged, pick_baseline, varying
from tinylm.analysis.outcome import Outcome
from tinylm.analysis.runs import shared_reference
from tinylm.analysis.sequential_design import Design, judge_added
from tinylm.analysis.verdicts import Comparison, decided_by_failures, failure_words, holm
from tinylm.overrides import shown

# The choice a scale ladder varies (conf/size/): a sweep over it with a baseline that does not name it is a
# ladder even without `ladder:` (the scale ladder's runs predate it); its levels are ordered by parameters.
SCALE_KEY = "size"


@dataclass(frozen=True)
class Rung:
    """One level of the ladder: its name (the axis's values), its runs' parameter count and steps, its
    baseline, and every design at it (the family's settings of that level, baseline included, each judged
    against that baseline)."""

    level: str
    params: int | None
    steps: int | None
    baseline: Setting
    settings: list[Setting]

    @property
    def reference(self) -> dict[str, float] | None:
        """The reference levels of the level's validation split, when its runs share one."""
        return shared_reference([run for s in self.settings for run in s.runs])


class TrendWord(enum.StrEnum):
    """What the ladder says of one design across levels."""

    FLIPS = "flips"
    GROWS = "grows"
    SHRINKS = "shrinks"
    HOLDS = "holds"
    CHANGES = "changes"  # the difference changed (the change test); its sign and direction not shown
    UNRESOLVED = "not resolved"


@dataclass(frozen=True)
class Trend:
    """One design across levels: the change of its difference from the first level to the last, the test
    of that change (raw and Holm over the designs), the verdict's word and its text."""

    design: dict[str, Any]
    change: float | None
    p_value: float | None
    p_adjusted: float | None
    verdict: str
    word: TrendWord = TrendWord.UNRESOLVED


@dataclass(frozen=True)
class Ladder:
    axis: list[str]  # the choices whose values make a level
    columns: list[str]  # the design columns: the family's, less the axis
    rungs: list[Rung]  # in the axis's order (smallest first, for sizes)
    trends: list[Trend]

    @property
    def ordered(self) -> bool:
        return ordered(self.axis, [rung.level for rung in self.rungs])

    @property
    def noun(self) -> str:
        return noun(self.axis)

    @property
    def in_bits(self) -> bool:
        """Whether the levels are read in bits/char and gain over unigram: each has its own reference levels
        (different corpora), whose nats are not comparable between vocabularies."""
        references = [rung.reference for rung in self.rungs]
        return None not in references and any(r != references[0] for r in references)

    @property
    def shown_columns(self) -> list[str]:
        """The design columns that tell the designs apart and name its rows; the others are stated once."""
        designs = [s.choices for rung in self.rungs for s in rung.settings]
        return varying(self.columns, designs) or self.columns


def noun(axis: Sequence[str]) -> str:
    """What a level is called in the report's words: `size` on the scale ladder, else `level`."""
    return "size" if list(axis) == [SCALE_KEY] else "level"


def ordered(axis: Sequence[str], levels: Sequence[str]) -> bool:
    """Whether the levels have an order that makes `grows` and `shrinks` mean something: sizes, or the
    values of one numeric choice."""
    return list(axis) == [SCALE_KEY] or (
        len(axis) == 1 and all(_number(level) is not None for level in levels)
    )


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def judge_family(
    family: Sequence[Setting],
    wanted: dict[str, Any],
    columns: Sequence[str],
    rules: Rules,
    axis: Sequence[str] = (),
    design: Design | None = None,
    settings: list[Setting] | None = None,
) -> tuple[list[Setting], Setting | None, Ladder | None]:
    """The family judged against the baseline `wanted` names, or along `axis` level by level (each design
    against its level's baseline, all levels' comparisons one Holm family), on a sequential design's first
    look only when there is one; then the rows that left open judged on the seeds `design` added since
    (`judge_added`, regrouping `settings`); each row built once with both, and each design's verdict across
    levels read from them. Returns the rows in the family's order, the baseline (none on a ladder), the ladder.
    `columns`: the family's."""
    levels = ladder_levels(family, axis) if axis else [("", None, None, list(family))]
    design_columns = [c for c in columns if c not in axis]
    groups = [(group, pick_baseline(group, wanted, design_columns)) for *_, group in levels]
    seeds = design.first_seeds if design is not None and design.looks else None
    own = {
        s.key(columns): c
        for (group, _), found in zip(groups, compare_families(groups, rules, seeds), strict=True)
        for s, c in zip(group, found, strict=True)
    }
    bases = {s.key(columns): base.key(columns) for group, base in groups for s in group}
    keys = [s.key(columns) for s in family]
    still = {key: bases[key] for key in keys if own[key] is not None and not own[key].resolved}
    added = {}
    if design is not None and len(design.looks) >= 2:
        added = judge_added(still, settings or [], list(columns), rules, design)
    rows = {key: judged(s, own[key], added.get(key)) for s, key in zip(family, keys, strict=True)}
    if not axis:
        return list(rows.values()), groups[0][1], None
    rungs = [
        Rung(level, params, steps, base, [rows[s.key(columns)] for s in group])
        for (level, params, steps, group), (_, base) in zip(levels, groups, strict=True)
    ]
    return (
        list(rows.values()),
        None,
        Ladder(list(axis), design_columns, rungs, trends(rungs, design_columns, rules.alpha, axis)),
    )


def ladder_levels(
    family: Sequence[Setting], axis: Sequence[str]
) -> list[tuple[str, int | None, int | None, list[Setting]]]:
    """The family's settings by level of `axis`: each level's name, its runs' median parameters and steps,
    and its settings; in the axis's order (by parameters for sizes, by value for one numeric choice)."""
    by_level: dict[tuple[Any, ...], list[Setting]] = {}
    for setting in family:
        by_level.setdefault(tuple(setting.choices[key] for key in axis), []).append(setting)
    levels = [
        (
            value,
            _median([r.params for s in group for r in s.runs]),
            _median([r.max_steps for s in group for r in s.runs]),
        )
        for value, group in by_level.items()
    ]
    if list(axis) == [SCALE_KEY]:
        levels.sort(key=lambda level: (level[1] is None, level[1] or 0, level_name(level[0])))
    elif ordered(axis, [level_name(value) for value in by_level]):
        levels.sort(key=lambda level: float(level[0][0]))
    return [(level_name(value), params, steps, by_level[value]) for value, params, steps in levels]


def baseline_keys(
    family: list[Setting], base: Setting | None, ladder: Ladder | None, columns: list[str]
) -> dict[tuple[Any, ...], tuple[Any, ...] | None]:
    """Each family row's baseline, key to key (over the family's columns): its level's on a ladder."""
    if ladder is not None:
        return {s.key(columns): rung.baseline.key(columns) for rung in ladder.rungs for s in rung.settings}
    return {s.key(columns): base.key(columns) if base is not None else None for s in family}


def trends(
    rungs: list[Rung], columns: list[str], alpha: float, axis: Sequence[str] = (SCALE_KEY,)
) -> list[Trend]:
    along, called = ordered(axis, [rung.level for rung in rungs]), noun(axis)
    designs: dict[tuple[str, ...], list[tuple[Rung, Setting]]] = {}
    for rung in rungs:
        for setting in rung.settings:
            if setting is not rung.baseline and setting.answer is not None:
                designs.setdefault(setting.key(columns), []).append((rung, setting))
    tests = {key: _change(found) if along else (None, None) for key, found in designs.items()}
    tested = [key for key, (_, p) in tests.items() if p is not None]
    adjusted = dict(zip(tested, holm([tests[key][1] for key in tested]), strict=True))
    said = []
    for key, found in designs.items():
        (change, p), p_adjusted = tests[key], adjusted.get(key)
        word, text = _verdict(
            found, change, p_adjusted, alpha, called, ", ".join(axis) if called == "level" else called, along
        )
        said.append(Trend(dict(zip(columns, key, strict=True)), change, p, p_adjusted, text, word))
    return said


def _change(found: list[tuple[Rung, Setting]]) -> tuple[float | None, float | None]:
    """The difference at the last level minus that at the first, and Welch's t test of it (scipy): the
    levels' runs are independent, each difference's sd and seed count as its comparison estimated them."""
    ends = [s.answer.tests.difference for _, s in (found[0], found[-1])]
    if len(found) < 2 or any(d is None or not math.isfinite(d.mean) for d in ends):
        return None, None
    small, large = ends
    change = large.mean - small.mean
    if small.sd is None or large.sd is None or small.n < 2 or large.n < 2 or small.sd + large.sd == 0:
        return change, None
    test = ttest_ind_from_stats(large.mean, large.sd, large.n, small.mean, small.sd, small.n, equal_var=False)
    return change, float(test.pvalue)


def _direction(c: Comparison) -> int | None:
    """The losses' verdict: +1 worse, -1 better, 0 equivalent or identical, None unresolved. A `better` or
    `worse` that how often each side failed decided, the losses left open, has no sign of the losses: no word
    across levels reads one from it (a failure-decided `worse` meeting a loss `better` is no flip)."""
    if decided_by_failures(c):
        return None
    return {Outcome.WORSE: 1, Outcome.BETTER: -1, Outcome.EQUIVALENT: 0, Outcome.IDENTICAL: 0}.get(
        c.judgement.verdict.outcome
    )


def _failures_at(found: list[tuple[Rung, Setting]], stated: Collection[str] = ()) -> str:
    """`; fails 0/8 vs 2/8 (exact p = 0.5) at post`: how often each side failed at each level where a seed did,
    less the levels in `stated` (whose whole verdict the word already quotes), so that a word across levels
    keeps the clause its levels' verdicts carry."""
    clauses = [
        f"{words} at {rung.level}"
        for rung, s in found
        if rung.level not in stated
        and (words := failure_words(s.answer.tests.failures, s.answer.judgement.fails_differently))
        is not None
    ]
    return "; " + ", ".join(clauses) if clauses else ""


def _verdict(
    found: list[tuple[Rung, Setting]],
    change: float | None,
    p: float | None,
    alpha: float,
    noun: str = "size",
    axis: str = "size",
    along: bool = True,
) -> tuple[TrendWord, str]:
    said = [(rung.level, s.answer.judgement.verdict, _direction(s.answer)) for rung, s in found]
    resolved = [(level, verdict, d) for level, verdict, d in said if d is not None]
    directed = [found for found in resolved if found[2]]  # the losses better or worse
    for (level_a, verdict_a, a), (level_b, verdict_b, b) in itertools.pairwise(directed):
        if a != b:
            return TrendWord.FLIPS, (
                f"flips at {level_b}: {verdict_a} at {level_a}, {verdict_b} at {level_b}"
                + _failures_at(found, (level_a, level_b))
            )
    every = ", ".join(f"{verdict} at {level}" for level, verdict, _ in said)
    ends = [s.answer.tests.difference for _, s in (found[0], found[-1])]
    small, large = (d.mean if d is not None else math.nan for d in ends)
    at_ends = f"{small:+.3f} at {found[0][0].level}, {large:+.3f} at {found[-1][0].level}"
    tested = f" (change p (Holm) = {p:.2g})" if p is not None else ""
    if p is not None and p <= alpha and change is not None and said[0][2] == said[-1][2] and said[0][2]:
        # One resolved sign at both ends: the change of the difference is one of its magnitude.
        word = TrendWord.GROWS if abs(large) > abs(small) else TrendWord.SHRINKS
        return word, f"{word.value} with {axis}: {at_ends}{tested}; {every}"
    if len(resolved) == len(said) and len({d for *_, d in resolved}) == 1:
        # Equivalent everywhere can hold while the change test rejects (a change within ±δ): say which.
        shown = "a change within the margin" if p is not None and p <= alpha else "no change"
        failures = _failures_at(found)  # the outcome alone would drop them
        return TrendWord.HOLDS, (
            f"holds at every {noun}: {said[0][1].outcome}"
            + (" when trained" if failures else "")
            + (f" ({shown} with {axis} shown, p (Holm) = {p:.2g})" if p is not None else "")
            + failures
        )
    if along and p is not None and p <= alpha:
        # A change of the difference is shown, not its sign: an end's sign is known only where it is resolved.
        return TrendWord.CHANGES, f"{TrendWord.CHANGES.value} with {axis}: {at_ends}{tested}; {every}"
    return TrendWord.UNRESOLVED, f"not resolved across {noun}s: {every}"


def level_name(values: tuple[Any, ...]) -> str:
    """A level as the report names it: its axis's values, `/`-joined."""
    return "/".join(shown(value) for value in values)


def _median(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return int(statistics.median(known)) if known else None
