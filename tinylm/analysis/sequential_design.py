"""A sequential extension of a finished sweep (scripts/add_seeds.py, docs/sweeps.md): its design as
sequential.json holds it, and the verdicts of the seeds it added, judged apart from the sweep's own by the
group-sequential design's looks (tinylm/analysis/sequential.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tinylm.analysis.estimates import Comparison
from tinylm.analysis.grouping import Rules, Setting, only, tests_against, tuned_settings
from tinylm.analysis.ladder import Ladder, with_added
from tinylm.analysis.outcome import UNRESOLVED, Outcome, Verdict
from tinylm.analysis.runs import ReportError
from tinylm.analysis.sequential import Look, first_verdicts, sequential_plan
from tinylm.analysis.verdicts import judge, tests_of_difference
from tinylm.files import write_json
from tinylm.layout import DESIGN_FILE
from tinylm.overrides import typed_choice


@dataclass(frozen=True)
class Round:
    """A round add_seeds has started: the seeds it adds, to the settings with these choices."""

    seeds: tuple[str, ...]
    settings: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Design:
    """A sequential extension of a finished sweep (scripts/add_seeds.py). Its first look is the sweep as it
    was: those seeds were judged by the sweep's own report, at α, and keep those verdicts (and, when the rate
    varies, choose each setting's rate). Every later look judges only the seeds added since the first, by a
    group-sequential design over at most `max_seeds - len(looks[0])` of them (`added_plan`)."""

    alpha: float
    min_effect: float
    max_seeds: int
    baseline: str
    looks: tuple[tuple[str, ...], ...]  # the baseline's seeds at each look
    baseline_source: str = DESIGN_FILE  # who named the baseline for add_seeds: --baseline or the experiment
    # add_seeds' progress: the round it started (its seeds and the settings' choices) and rounds since a look.
    round: Round | None = None
    rounds_since_look: int = 0
    spending: str = "Lan-DeMets O'Brien-Fleming-type, group-sequential boundaries over the added seeds"
    # The ladder's axis its rounds judged level by level (() for none); None in a design written before it was
    # recorded. Another axis would regroup the family the looks were judged in.
    ladder: tuple[str, ...] | None = None

    @property
    def first_seeds(self) -> tuple[str, ...]:
        return self.looks[0] if self.looks else ()

    def added_seeds(self, look: int) -> list[str]:
        return [seed for seed in self.looks[look] if seed not in self.first_seeds]

    @property
    def horizon(self) -> int:
        """The most seeds the design may add to the first look's."""
        return self.max_seeds - len(self.first_seeds)

    def added_plan(self) -> list[Look | None]:
        """How each look after the first is judged (None: it has too few added seeds to judge anything)."""
        counts = [len(self.added_seeds(look)) for look in range(1, len(self.looks))]
        return sequential_plan(counts, self.horizon) if self.horizon >= 2 else [None] * len(counts)


def with_added_seeds(
    family: list[Setting],
    base: Setting | None,
    ladder: Ladder | None,
    settings: list[Setting],
    columns: list[str],
    rules: Rules,
    design: Design,
) -> tuple[list[Setting], Ladder | None]:
    """The family's open rows with the sequential design's verdicts on the seeds added since its first look
    (`judge_added`), and a ladder's words across levels read again from them."""
    added = judge_added(
        family, baseline_keys(family, base, ladder, columns), settings, columns, rules, design
    )
    family = [replace(s, added=added[s.key(columns)]) if s.key(columns) in added else s for s in family]
    if ladder is None:
        return family, None
    by_key = {s.key(columns): s for s in family if s.added is not None}
    return family, with_added(ladder, by_key, columns, rules.alpha)


def baseline_keys(
    family: list[Setting], base: Setting | None, ladder: Ladder | None, columns: list[str]
) -> dict[tuple[Any, ...], tuple[Any, ...] | None]:
    """Each family row's baseline, key to key (over the family's columns): its level's on a ladder."""
    if ladder is not None:
        return {s.key(columns): rung.baseline.key(columns) for rung in ladder.rungs for s in rung.settings}
    return {s.key(columns): base.key(columns) if base is not None else None for s in family}


def judge_added(
    family: list[Setting],
    bases: dict[tuple[Any, ...], tuple[Any, ...]],
    settings: list[Setting],
    columns: list[str],
    rules: Rules,
    design: Design,
) -> dict[tuple[Any, ...], Comparison]:
    """The sequential extension's verdicts, on the added seeds alone, by the key of the family's row they
    answer (`bases`: each row's baseline's key): each look judges the seeds added by then at the level its
    boundary gives (Holm over the rows the extension adds seeds to), and a row keeps the first verdict a
    look gives it. The sweep's own verdicts stay as its own seeds gave them."""
    rows = [s.key(columns) for s in family if s.comparison is not None and not s.comparison.resolved]
    looks = []
    for look in range(1, len(design.looks)):
        at_look = {s.key(columns): s for s in added_family(settings, columns, rules, design, look)}
        looks.append([
            tests_against(at_look[key], at_look[bases[key]], rules, judging=True) for key in rows
        ])  # fmt: skip
    plan = design.added_plan()
    first = first_verdicts(looks, plan, rules.min_effect, rules.alpha)
    last = judge(looks[-1], rules.min_effect, rules.alpha, with_power=False)
    number = len(design.looks)  # looks are numbered as add_seeds numbers them: the sweep's own is look 1
    difference = {(i, kind): p for i, kind, p in tests_of_difference(looks[-1])}
    equivalence = {i: c.p_equivalence for i, c in enumerate(looks[-1]) if c.p_equivalence is not None}
    added = {}
    for row, (key, found, latest) in enumerate(zip(rows, first, last, strict=True)):
        if found is None:
            # A p (Holm) within α that left the row open: the look's level did, said in the row (issue 59).
            short = [
                _short_of(tests, at, adjusted, plan[-1], rules.alpha, number, name)
                for tests, at, adjusted, name in (
                    (difference, (row, "loss"), latest.p_adjusted, "p"),
                    (difference, (row, "failures"), latest.p_failures_adjusted, "failures p"),
                    (equivalence, row, latest.p_equivalence_adjusted, "equivalence p"),
                )
            ]
            verdict = f"{UNRESOLVED} at look {number} ({len(latest.seeds)} added seeds{''.join(short)})"
            # How often each side failed is a finding of its own (issue 48), said where the losses leave it open too.
            if latest.failures is not None:
                verdict += f"; fails {latest.failures.describe()}"
            added[key] = replace(latest, verdict=Verdict(verdict, Outcome.NOT_RESOLVED))
        else:
            number, c = found
            added[key] = replace(
                c, verdict=c.verdict.noted(f" (look {number + 2}, {len(c.seeds)} added seeds)")
            )
    return added


def _short_of(
    tests: Mapping[Hashable, float],
    key: Hashable,
    adjusted: float | None,
    look: Look | None,
    alpha: float,
    number: int,
    name: str,
) -> str:
    """Why a test that a fixed design's Holm would pass (p (Holm) within α) left its row open at look
    `number`: the level that look's boundary gives its rank in Holm's order of `tests` (its family at the look,
    `step_down`), below α at a look before the last; '' for any other test."""
    if look is None or adjusted is None or adjusted > alpha or key not in tests:
        return ""
    ordered = [k for k, _ in sorted(tests.items(), key=lambda item: item[1])]
    level = look.level(alpha / (len(ordered) - ordered.index(key)))
    p = tests[key]
    if p > level:
        return f"; {name} {p:.2g} > {level:.2g}, the level look {number} gives it"
    return f"; {name} {p:.2g} within {level:.2g}, the level look {number} gives it, but a smaller p in Holm's order was not"


def added_family(
    settings: list[Setting], columns: list[str], rules: Rules, design: Design, look: int
) -> list[Setting]:
    """The family's settings with only the seeds added by `look` (when the rate varies: at the rate each
    setting's first-look seeds chose)."""
    added = set(design.added_seeds(look))
    if rules.lr_varies:
        return tuned_settings(settings, columns, rules.confidence, design.first_seeds, added)
    return [only(s, added) for s in settings]


def read_design(sweep_dir: Path) -> Design | None:
    """SWEEP_DIR/sequential.json as add_seeds wrote it (`write_design`), or None."""
    path = sweep_dir / DESIGN_FILE
    if not path.is_file():
        return None
    try:
        return design_from(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ReportError(f"{path} is not a sequential design scripts/add_seeds.py wrote: {err}") from None


def design_from(data: dict[str, Any]) -> Design:
    """A design as `dataclasses.asdict` wrote it (sequential.json, report.json)."""
    started = data.get("round")
    return Design(
        float(data["alpha"]), float(data["min_effect"]), int(data["max_seeds"]), str(data["baseline"]),
        tuple(tuple(str(s) for s in look) for look in data["looks"]),
        str(data.get("baseline_source", DESIGN_FILE)),
        Round(
            tuple(str(s) for s in started["seeds"]),
            tuple({str(k): typed_choice(v) for k, v in choices.items()} for choices in started["settings"]),
        ) if started else None,
        int(data.get("rounds_since_look", 0)),
        ladder=tuple(str(k) for k in data["ladder"]) if data.get("ladder") is not None else None,
    )  # fmt: skip


def write_design(sweep_dir: Path, design: Design) -> None:
    write_json(sweep_dir / DESIGN_FILE, dataclasses.asdict(design))
