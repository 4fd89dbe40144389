"""What resolving the open rows would take: per row, the seeds that find its observed difference (or δ, when
that is smaller: below δ the answer sought is equivalence, which needs about as many) with 80% power at the
level the row is judged at; the runs and run time that adds, at the runs' own median wall times. Computed
once into the report; where a sequential design judges the row on its added seeds, sized on those and held
against the design's horizon (the most added seeds it allows)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from tinylm.analysis.estimates import seeds_needed
from tinylm.analysis.grouping import Setting


@dataclass(frozen=True)
class RowSize:
    """One open row: `needed` seeds (None: too few finished seeds to size it), of which it `has` some; the
    `more` that adds with the baseline's, as `runs` and `seconds`. `added`: counted in the sequential design's
    added seeds, whose `horizon` is the most it allows."""

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
    """Every open row's size, and the runs and run time all of them take together (the baseline's new seeds,
    shared by the rows, counted once). `every_rate`: each new seed at every rate of a setting, as a report of
    the cross-fitted rule sized them (a report.json of that rule holds it; the report now runs each once)."""

    rows: tuple[RowSize, ...]
    runs: int
    seconds: float
    every_rate: bool
    open: int  # the open rows, sized or not


def size_open_rows(
    family: list[Setting], baseline: Setting | None, columns: list[str], min_effect: float, horizon: int | None,
    alpha: float,
) -> Sizing | None:  # fmt: skip
    """`horizon`: the most added seeds of the report's sequential design (None without one); a row judged only
    on added seeds is sized at α / the open rows."""
    # A tuned row not yet judged has no spread to size it by: its first judging seeds give one.
    open_rows = [
        s for s in family if s is not baseline and s.answer and not s.answer.resolved and s.answer.tests.seeds
    ]
    if not open_rows or baseline is None:
        return None
    sized = [_size(s, columns, min_effect, horizon, alpha / len(open_rows)) for s in open_rows]
    rows = tuple(row for row in sized if row is not None)
    # The baseline's new seeds are shared by the rows: the most any row needs, counted once.
    runs, seconds = run_cost(baseline, max((row.more for row in rows), default=0))
    return Sizing(
        rows, runs + sum(r.runs for r in rows), seconds + sum(r.seconds for r in rows), False, len(open_rows)
    )


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
    if added is not None and horizon is not None:  # the design stops at its horizon, resolved or not
        more = min(more, max(0, horizon - has))
    runs, seconds = run_cost(s, more)
    return RowSize(design, needed, has, more, runs, seconds, added is not None, horizon)


def run_cost(s: Setting, seeds: int) -> tuple[int, float]:
    """The runs `seeds` more seeds of `s` take (one each), and their run time at its runs' median wall time."""
    times = [run.wall_time_s for run in s.runs if run.wall_time_s is not None]
    return seeds, seeds * (statistics.median(times) if times else 0.0)
