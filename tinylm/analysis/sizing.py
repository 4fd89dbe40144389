"""What resolving a report's open rows would take: the seeds each needs at its family's level (from the
spread its seeds showed), and the runs and run time to add them (docs/sweeps.md)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from tinylm.analysis.estimates import seeds_needed
from tinylm.analysis.grouping import Rules, Setting


@dataclass(frozen=True)
class RowSize:
    """One open row's size: the seeds it needs and has, and the runs and run time to add."""

    design: dict[str, Any]
    needed: int | None  # the seeds it needs (None: too few finished to size it), of which it `has` some
    has: int
    more: int  # the seeds to add, as `runs` and `seconds`
    runs: int
    seconds: float
    added: bool = False  # counted in the sequential design's added seeds, up to `horizon`
    horizon: int | None = None

    @property
    def spent(self) -> bool:
        """Whether its added seeds reached the sequential design's horizon (add_seeds adds no more)."""
        return self.added and self.horizon is not None and self.has >= self.horizon


@dataclass(frozen=True)
class Sizing:
    """Every open row's size, and the runs and run time of all of them."""

    rows: tuple[RowSize, ...]
    runs: int  # the runs (and `seconds` the run time) of all rows, the baseline's counted once
    seconds: float
    every_rate: bool  # each new seed run at every rate, as reports of the cross-fitted rule sized them
    open: int  # the open rows, sized or not


def size_open_rows(
    family: list[Setting], baseline: Setting | None, columns: list[str], rules: Rules, horizon: int | None
) -> Sizing | None:
    """`horizon`: the most added seeds of the sequential design (None without one); a row judged only on added
    seeds is sized at α / the open rows."""
    # A tuned row not yet judged has no spread to size it by: its first judging seeds give one.
    answers = [(s, s.answer) for s in family if s is not baseline]
    open_rows = [s for s, c in answers if c and not c.resolved and c.tests.seeds]
    if not open_rows or baseline is None:
        return None
    rows = []
    for s in open_rows:
        c, design = s.comparison, {k: s.choices.get(k, "—") for k in columns}
        added = s.added if horizon is not None else None  # counted in the sequential design's added seeds
        # The added seeds are an experiment of their own: sized on their spread once they have one.
        measured = (added if added and added.tests.difference is not None else c).tests.difference
        power = c.judgement.power
        sd = measured.sd if measured is not None and measured.sd else (power.sd if power else None)
        if sd is None or measured is None:
            rows.append(RowSize(design, None, 0, 0, 0, 0.0, added is not None, horizon))
            continue
        level = power.level if power else rules.alpha / len(open_rows)
        needed = seeds_needed(max(abs(measured.mean), rules.min_effect) / sd, level)
        if needed is None:
            continue
        has = len((added or c).tests.seeds)
        cap = needed if added is None else min(needed, horizon)  # a design ends at its horizon
        more = max(0, cap - has)
        rows.append(RowSize(design, needed, has, more, more, _seconds(s, more), added is not None, horizon))
    more = max((row.more for row in rows), default=0)  # the baseline's new seeds, shared by the rows
    runs, seconds = more + sum(r.runs for r in rows), _seconds(baseline, more) + sum(r.seconds for r in rows)
    return Sizing(tuple(rows), runs, seconds, False, len(open_rows))


def _seconds(s: Setting, seeds: int) -> float:
    times = [run.wall_time_s for run in s.runs if run.wall_time_s is not None]
    return seeds * (statistics.median(times) if times else 0.0)
