"""What resolving the open rows would take: per row, the seeds that find its difference (or δ, if smaller)
with 80% power at its level, and the runs and run time they add (added seeds: up to a design's horizon)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from tinylm.analysis.estimates import seeds_needed
from tinylm.analysis.grouping import Setting


@dataclass(frozen=True)
class RowSize:
    """One open row: `needed` seeds (None: too few finished to size it), of which it `has` some, and the
    `more` that adds as `runs` and `seconds`; `added`: counted in the sequential design's, up to `horizon`."""

    design: dict[str, Any]
    needed: int | None
    has: int
    more: int
    runs: int
    seconds: float
    added: bool = False
    horizon: int | None = None

    @property
    def spent(self) -> bool:
        """Judged on a sequential design's added seeds, and has as many as the design allows."""
        return self.added and self.horizon is not None and self.has >= self.horizon


@dataclass(frozen=True)
class Sizing:
    """Every open row's size, and the runs and run time of all of them (the baseline's counted once).
    `every_rate`: each new seed run at every rate, as reports of the cross-fitted rule sized them."""

    rows: tuple[RowSize, ...]
    runs: int
    seconds: float
    every_rate: bool
    open: int  # the open rows, sized or not


def size_open_rows(
    family: list[Setting],
    baseline: Setting | None,
    columns: list[str],
    min_effect: float,
    horizon: int | None,
    alpha: float,
) -> Sizing | None:
    """`horizon`: the most added seeds of the sequential design (None without one); a row judged only on added
    seeds is sized at α / the open rows."""
    # A tuned row not yet judged has no spread to size it by: its first judging seeds give one.
    answers = [(s, s.answer) for s in family if s is not baseline]
    open_rows = [s for s, c in answers if c and not c.resolved and c.tests.seeds]
    if not open_rows or baseline is None:
        return None
    sized = [_size(s, columns, min_effect, horizon, alpha / len(open_rows)) for s in open_rows]
    rows = tuple(row for row in sized if row is not None)
    more = max((row.more for row in rows), default=0)  # the baseline's new seeds, shared by the rows
    runs, seconds = more + sum(r.runs for r in rows), _seconds(baseline, more) + sum(r.seconds for r in rows)
    return Sizing(rows, runs, seconds, False, len(open_rows))


def _size(
    s: Setting, columns: list[str], min_effect: float, horizon: int | None, level: float
) -> RowSize | None:
    """One open row's size (None: no number of seeds finds it); `level`: where its comparison has no power."""
    c, design = s.comparison, {k: s.choices.get(k, "—") for k in columns}
    added = s.added if horizon is not None else None  # counted in the sequential design's added seeds
    # The added seeds are an experiment of their own: sized on their spread once they have one.
    measured = added.tests.difference if added and added.tests.difference is not None else c.tests.difference
    power = c.judgement.power
    sd = measured.sd if measured is not None and measured.sd else (power.sd if power else None)
    if sd is None or measured is None:
        return RowSize(design, None, 0, 0, 0, 0.0, added is not None, horizon)
    needed = seeds_needed(max(abs(measured.mean), min_effect) / sd, power.level if power else level)
    if needed is None:
        return None
    has = len((added or c).tests.seeds)
    more = max(0, needed - has)
    if added is not None:  # the design stops at its horizon, resolved or not
        more = min(more, max(0, horizon - has))
    return RowSize(design, needed, has, more, more, _seconds(s, more), added is not None, horizon)


def _seconds(s: Setting, seeds: int) -> float:
    """The run time of `seeds` more runs of `s`, at its runs' median wall time."""
    times = [run.wall_time_s for run in s.runs if run.wall_time_s is not None]
    return seeds * (statistics.median(times) if times else 0.0)
