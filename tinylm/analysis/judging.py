"""A family judged: each row against its baseline (on a ladder, its level's), all rows one Holm family, and
the rows the sweep's own seeds left open judged again on the seeds a sequential design added (docs/sweeps.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tinylm.analysis.estimates import PairedTests
from tinylm.analysis.grouping import Rules, Setting, pick_baseline, tests_against
from tinylm.analysis.ladder import Ladder, Level, Rung, ladder_levels, trends
from tinylm.analysis.sequential_design import Design, judge_added, own_seeds
from tinylm.analysis.verdicts import Comparison, Judgement, Outcome, Verdict, judge
from tinylm.overrides import shown


@dataclass(frozen=True)
class JudgedFamily:
    """A family judged against its baseline: its rows (each with its comparison), its one baseline (None on a
    ladder, where each level has its own), the ladder, and each compared row with the baseline it was judged
    against (in the rows' order, level by level)."""

    rows: list[Setting]
    baseline: Setting | None
    ladder: Ladder | None
    pairs: list[tuple[Setting, Setting]]


def judge_family(
    family: Sequence[Setting],
    wanted: dict[str, Any],
    columns: Sequence[str],
    rules: Rules,
    axis: Sequence[str],
    design: Design | None,
    settings: list[Setting],
) -> JudgedFamily:
    """The family judged against the baseline `wanted` names, level by level along `axis`, on a design's first
    look; rows left open, on the seeds added since."""
    levels = ladder_levels(family, axis) if axis else [Level("", None, None, list(family))]
    design_columns = [c for c in columns if c not in axis]
    groups = [(level.settings, pick_baseline(level.settings, wanted, design_columns)) for level in levels]
    rows = [(s, base) for group, base in groups for s in group if s is not base]
    if rules.lr_varies:  # the sweep's own seeds chose each rate and judge nothing: each row says so
        compared = []
        for s, base in rows:
            seeds = f"seed{'s' if len(s.tuned_on) != 1 else ''} {', '.join(s.tuned_on)}"
            rates = f"rates {shown(s.rate)} against {shown(base.rate)}, chosen on {seeds}"
            verdict = Verdict(f"not yet judged ({rates})", Outcome.NOT_RESOLVED)
            compared.append(Comparison(PairedTests(()), Judgement(verdict=verdict)))
    else:
        tests = [tests_against(s, base, rules, own_seeds(design)) for s, base in rows]
        compared = judge(tests, rules.min_effect, rules.alpha)
    own = {s.key(columns): (c, base.key(columns)) for (s, base), c in zip(rows, compared, strict=True)}
    keys = [s.key(columns) for s in family]
    still = {key: own[key][1] for key in keys if key in own and not own[key][0].resolved}
    added = judge_added(still, settings, columns, rules, design) if design and len(design.looks) > 1 else {}
    # The one rebuild: a row's comparisons are known only once its whole family is judged, after grouping.
    judged = {
        key: replace(s, comparison=own[key][0], added=added.get(key)) if key in own else s
        for s, key in zip(family, keys, strict=True)
    }
    pairs = [(judged[s.key(columns)], base) for s, base in rows]
    if not axis:
        return JudgedFamily(list(judged.values()), groups[0][1], None, pairs)
    rungs = [
        Rung(level.name, level.params, level.steps, base, [judged[s.key(columns)] for s in level.settings])
        for level, (_, base) in zip(levels, groups, strict=True)
    ]
    ladder = Ladder(list(axis), design_columns, rungs, trends(rungs, design_columns, rules.alpha, axis))
    return JudgedFamily(list(judged.values()), None, ladder, pairs)
