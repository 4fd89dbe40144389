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
from tinylm.analysis.grouping import LR, Setting


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
    shared by the rows, counted once; with the rate tuned, every rate of a setting at each new seed)."""

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
    every_rate: bool,
    horizon: int | None,
    alpha: float,
) -> Sizing | None:
    """`horizon`: the most added seeds of the report's sequential design (None without one); `every_rate`:
    each new seed is run at every rate (cross-fitting), else once; a row judged only on added seeds is sized
    at α / the open rows."""
    # A tuned row not yet judged has no spread to size it by: its first judging seeds give one.
    open_rows = [
        s
        for s in family
        if s is not baseline and s.answer is not None and not s.answer.resolved and s.answer.seeds
    ]
    if not open_rows or baseline is None:
        return None
    rows, baseline_more = [], 0
    for s in open_rows:
        c, added = s.comparison, horizon is not None and s.added is not None
        design = {k: s.choices.get(k, "—") for k in columns}
        # The added seeds are an experiment of their own: sized on their spread once they have one.
        measured = s.added.difference if added and s.added.difference is not None else c.difference
        sd = measured.sd if measured is not None and measured.sd else (c.power.sd if c.power else None)
        if sd is None or measured is None:
            rows.append(RowSize(design, None, 0, 0, 0, 0.0, added, horizon))
            continue
        level = c.power.level if c.power else alpha / len(open_rows)
        needed = seeds_needed(max(abs(measured.mean), min_effect) / sd, level)
        if needed is None:
            continue
        has = len(s.added.seeds) if added else len(c.seeds)
        more = max(0, needed - has)
        if added and horizon is not None:  # the design stops at its horizon, resolved or not
            more = min(more, max(0, horizon - has))
        baseline_more = max(baseline_more, more)
        runs, seconds = run_cost(s, more, every_rate)
        rows.append(RowSize(design, needed, has, more, runs, seconds, added, horizon))
    runs, seconds = run_cost(baseline, baseline_more, every_rate)
    total_runs = runs + sum(row.runs for row in rows)
    total_seconds = seconds + sum(row.seconds for row in rows)
    return Sizing(tuple(rows), total_runs, total_seconds, every_rate, len(open_rows))


def run_cost(s: Setting, seeds: int, every_rate: bool) -> tuple[int, float]:
    """The runs `seeds` more seeds of `s` take (`every_rate`: one per rate it was run at), and their run time
    at its runs' median wall time."""
    times = [run.wall_time_s for run in s.runs if run.wall_time_s is not None]
    runs = seeds * (max(1, len({run.choices.get(LR) for run in s.runs})) if every_rate else 1)
    return runs, runs * (statistics.median(times) if times else 0.0)
