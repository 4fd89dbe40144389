"""The sequential design that adds seeds to a finished sweep (docs/sweeps.md): its sequential.json, each
look's level, and the verdicts of the seeds it added, judged apart from the sweep's own."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cattrs import Converter
from scipy.stats import norm
from scipy.stats import t as student_t

from tinylm.analysis.estimates import PairedTests
from tinylm.analysis.grouping import Rules, Setting, tests_against, tuned_settings
from tinylm.analysis.runs import ReportError
from tinylm.analysis.verdicts import (
    Comparison,
    Family,
    Judgement,
    Outcome,
    Verdict,
    judge,
    judged_families,
    tests_of_difference,
)
from tinylm.files import write_json
from tinylm.layout import DESIGN_FILE
from tinylm.overrides import typed_choice

T_PATHS = 400_000  # the null paths the t statistics' boundaries are calibrated on


def spent(information: float, alpha: float) -> float:
    """Lan & DeMets' O'Brien-Fleming-type spending: the α spent at `information` (seeds / the most)."""
    if information <= 0:
        return 0.0
    return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(min(1.0, information))))


@dataclass(frozen=True)
class Look:
    """A look: the seeds of every look that judges, up to this one, of at most `horizon`."""

    counts: tuple[int, ...]
    horizon: int

    def level(self, alpha: float) -> float:
        """This look's level for its paired t test: the last of `t_levels` over its seed counts."""
        return t_levels(self.counts, self.horizon, alpha)[-1]


def sequential_plan(seed_counts: Sequence[int], max_seeds: int) -> list[Look | None]:
    """The looks of a design with `seed_counts` seeds (None: fewer than 2, or no more than before)."""
    plan: list[Look | None] = []
    counts: tuple[int, ...] = ()
    for count in seed_counts:
        count = min(count, max_seeds)
        judges = count >= 2 and not (counts and count <= counts[-1])
        counts += (count,) if judges else ()
        plan.append(Look(counts, max_seeds) if judges else None)
    return plan


@dataclass(frozen=True)
class Round:
    """A round add_seeds started: the seeds it adds to the settings with these choices."""

    seeds: tuple[str, ...]
    settings: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Design:
    """A sequential extension of a finished sweep: its first look is the sweep as its report judged it; every
    later look judges only the seeds added since, over at most `horizon` of them (`added_plan`)."""

    alpha: float
    min_effect: float
    max_seeds: int
    baseline: str
    looks: tuple[tuple[str, ...], ...]  # the baseline's seeds at each look
    baseline_source: str = DESIGN_FILE  # who named the baseline for add_seeds: --baseline or the experiment
    round: Round | None = None  # add_seeds' progress: the round it started, and rounds since a look
    rounds_since_look: int = 0
    spending: str = "Lan-DeMets O'Brien-Fleming-type, group-sequential boundaries over the added seeds"
    ladder: tuple[str, ...] | None = None  # the axis its rounds judged along (): none; None: not recorded

    @property
    def first_seeds(self) -> tuple[str, ...]:
        """The sweep's own seeds: the first look's."""
        return self.looks[0] if self.looks else ()

    def added_seeds(self, look: int) -> list[str]:
        """The seeds added by look `look` (its seeds less the sweep's own)."""
        return [seed for seed in self.looks[look] if seed not in self.first_seeds]

    @property
    def horizon(self) -> int:
        """The most seeds the design may add to the first look's."""
        return self.max_seeds - len(self.first_seeds)

    def added_plan(self) -> list[Look | None]:
        """Each later look on the added seeds (None: a look that judges nothing; every one, where
        the horizon is under two seeds)."""
        counts = [len(self.added_seeds(look)) for look in range(1, len(self.looks))]
        return sequential_plan(counts, self.horizon) if self.horizon >= 2 else [None] * len(counts)

    def look_levels(self, alpha: float) -> tuple[float | None, ...]:
        """Each later look's judging level at family-wise `alpha` (None: a look that judges nothing)."""
        return tuple(None if look is None else look.level(alpha) for look in self.added_plan())


def own_seeds(design: Design | None) -> tuple[str, ...] | None:
    """The sweep's own seeds (the first look), the only ones its verdicts use; None without a design."""
    return design.first_seeds if design is not None and design.looks else None


def judge_added(
    bases: dict[tuple, tuple], settings: list[Setting], columns: Sequence[str], rules: Rules, design: Design
) -> dict[tuple, Comparison]:
    """The verdicts on the added seeds alone of the rows the sweep's own seeds left open (`bases`: key to its
    baseline's key), regrouped from `settings` at each look; a row keeps the first verdict a look gives it."""
    looks, alpha, number = look_tests(bases, settings, columns, rules, design), rules.alpha, len(design.looks)
    plan = design.added_plan()
    first = first_verdicts(looks, plan, rules.min_effect, alpha)
    last = judge(looks[-1], rules.min_effect, alpha, with_power=False)
    difference = tests_of_difference(looks[-1])
    equivalence = {i: t.p_equivalence for i, t in enumerate(looks[-1]) if t.p_equivalence is not None}

    def short_of(family: Mapping[Any, float], key: Any, adjusted: float | None, name: str) -> str:
        if plan[-1] is None or adjusted is None or adjusted > alpha or key not in family:
            return ""
        ordered = sorted(family, key=family.__getitem__)
        level, p = plan[-1].level(alpha / (len(ordered) - ordered.index(key))), family[key]
        compared = ">" if p > level else "within"
        said = f"; {name} {p:.2g} {compared} {level:.2g}, the level look {number} gives it"
        return said if p > level else said + ", but a smaller p in Holm's order was not"

    verdicts = {}
    for row, (key, found) in enumerate(zip(bases, first, strict=True)):
        if found is not None:
            verdicts[key] = found[1]
            continue
        tests, j = last[row].tests, last[row].judgement
        short = (
            short_of(difference, (row, "loss"), j.p_adjusted, "p")
            + short_of(difference, (row, "failures"), j.p_failures_adjusted, "failures p")
            + short_of(equivalence, row, j.p_equivalence_adjusted, "equivalence p")
        )
        text = f"{Outcome.NOT_RESOLVED} at look {number} ({len(tests.seeds)} added seeds{short})"
        if tests.failures is not None:  # how often each side failed is a finding of its own, said here too
            text += f"; fails {tests.failures.describe()}"
        adjusted = (j.p_adjusted, j.p_equivalence_adjusted, j.p_failures_adjusted)
        verdicts[key] = Comparison(tests, Judgement(*adjusted, verdict=Verdict(text, Outcome.NOT_RESOLVED)))
    return verdicts


def look_tests(
    bases: dict[tuple, tuple], settings: list[Setting], columns: Sequence[str], rules: Rules, design: Design
) -> list[list[PairedTests]]:
    """Each later look's family: every row of `bases` against its baseline on the seeds added by that look."""
    looks = []
    for look in range(1, len(design.looks)):
        added = set(design.added_seeds(look))
        grouped = settings
        if rules.lr_varies:  # at the rate each setting's first-look seeds chose
            grouped = tuned_settings(settings, columns, rules.confidence, design.first_seeds, added)
        by_key = {s.key(columns): s for s in grouped}
        looks.append([tests_against(by_key[key], by_key[base], rules, added) for key, base in bases.items()])
    return looks


def look_families(looks: Sequence[Sequence[PairedTests]], alpha: float) -> tuple[Family, ...]:
    """The families `judge_added` adjusts at each later look (`look_tests`), numbered as the report numbers
    them (the sweep's own seeds are look 1); each is held to its look's level (`SweepReport.look_levels`)."""
    return tuple(
        family for number, rows in enumerate(looks) for family in judged_families(rows, alpha, number + 2)
    )


def first_verdicts(
    looks: Sequence[Sequence[PairedTests]], plan: Sequence[Look | None], min_effect: float, alpha: float
) -> list[tuple[int, Comparison] | None]:
    """Each row's first verdict and its look's index; `looks[k]`: the tests at look k, judged as `plan[k]`."""
    first: list[tuple[int, Comparison] | None] = [None] * (len(looks[0]) if looks else 0)
    for number, (family, look) in enumerate(zip(looks, plan, strict=True)):
        if look is None:
            continue

        def note(tests: PairedTests, shown: int = number + 2) -> str:  # add_seeds' number: the sweep's is 1
            return f" (look {shown}, {len(tests.seeds)} added seeds)"

        for row, c in enumerate(judge(family, min_effect, alpha, look.level, with_power=False, note=note)):
            if first[row] is None and c.resolved:
                first[row] = (number, c)
    return first


@functools.cache
def t_levels(counts: tuple[int, ...], horizon: int, alpha: float) -> tuple[float, ...]:
    """Each look's level for its paired t test (`counts` seeds, of at most `horizon`): docs/sweeps.md."""
    differences = np.random.default_rng(20261204).standard_normal((T_PATHS, counts[-1]))
    sums, squares = differences.cumsum(axis=1), (differences**2).cumsum(axis=1)
    running = np.ones(T_PATHS, dtype=bool)
    levels: list[float] = []
    for count in counts:
        mean = sums[:, count - 1] / count
        sd = np.sqrt((squares[:, count - 1] - count * mean**2) / (count - 1))
        t = np.abs(mean) / (sd / math.sqrt(count))
        if not levels:  # the first look's t statistic alone: its level is exactly the α it may spend
            level = spent(count / horizon, alpha)
            bound = float(student_t.isf(level / 2, count - 1)) if level > 0 else math.inf
        else:
            # The paths this look may stop: its share of α less the paths an earlier look stopped.
            target = round(spent(count / horizon, alpha) * T_PATHS) - int((~running).sum())
            ordered = np.sort(t[running])[::-1]
            if target <= 0:
                bound = math.inf
            elif target < len(ordered):
                bound = float(ordered[target - 1] + ordered[target]) / 2
            else:
                bound = 0.0
            level = float(2 * student_t.sf(bound, count - 1))
        running &= t <= bound
        levels.append(level)
    return tuple(levels)


def read_design(sweep_dir: Path) -> Design | None:
    """SWEEP_DIR/sequential.json as add_seeds wrote it (`write_design`), or None."""
    path = sweep_dir / DESIGN_FILE
    if not path.is_file():
        return None
    try:
        return _DESIGN.structure(json.loads(path.read_text(encoding="utf-8")), Design)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ReportError(f"{path} is not a sequential design scripts/add_seeds.py wrote: {err}") from None


def _is_any(kind: object) -> bool:
    return kind is Any


def _typed(value: Any, _kind: object) -> Any:
    return typed_choice(value)


_DESIGN = Converter(detailed_validation=False)
# A round's choices written as text, before choices kept their type, are typed as Hydra would.
_DESIGN.register_structure_hook_func(_is_any, _typed)


def write_design(sweep_dir: Path, design: Design) -> None:
    """The sequential design written to the sweep's DESIGN_FILE."""
    write_json(sweep_dir / DESIGN_FILE, design)
