"""How the report prints numbers and tables: every renderer formats through these, and computes nothing."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from operator import attrgetter
from typing import Any, NamedTuple

from tinylm.analysis.estimates import Estimate
from tinylm.analysis.ladder import Ladder, LadderKind, Rung
from tinylm.overrides import shown


def fmt_number(value: float | Estimate | None, digits: int = 4, signed: bool = False) -> str:
    """`value` (an Estimate: its mean) to `digits` decimals, `+` with `signed`; `—` for None and
    `diverged` for inf."""
    value = value.mean if isinstance(value, Estimate) else value
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "diverged" if value == math.inf else str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


BITS_PER_NAT = 1 / math.log(2)  # a loss in nats/char times this is in bits/char


def fmt_gain(unigram: float, mean: float, scale: float = 1.0) -> str:
    """`+0.8123`: how far `mean` got below its corpus's unigram level, in nats (in bits with `scale`
    BITS_PER_NAT). The unigram level is what a model learns of the characters' frequencies alone, so the
    gain over it compares settings across corpora."""
    return fmt_number((unigram - mean) * scale, signed=True)


def fmt_duration(seconds: float | None) -> str:
    """A run's wall time: `12m05s`, `41.3s` under a minute, `—` for none."""
    minutes, secs = divmod(round(seconds or 0), 60)
    return "—" if seconds is None else f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def fmt_interval(e: Estimate | None, signed: bool = False, digits: int = 4) -> str:
    """`[low, high]` of `e`'s interval, as `fmt_number` prints them; `—` without one."""
    if e is None or not e.has_interval:
        return "—"
    return f"[{fmt_number(e.low, digits, signed)}, {fmt_number(e.high, digits, signed)}]"


def fmt_multiplier(ratio: Estimate | None) -> str:
    """`0.81× [0.76, 0.87]`: a multiplier with its interval (`—` for none)."""
    if ratio is None:
        return "—"
    interval = f" [{ratio.low:.2f}, {ratio.high:.2f}]" if ratio.has_interval else ""
    return f"{ratio.mean:.2f}×{interval}"


def fmt_p(value: float | None) -> str:
    """A p-value to two significant digits; `—` for none (no test)."""
    return "—" if value is None else f"{value:.2g}"


def plural(count: int, noun: str) -> str:
    """`1 seed`, `2 seeds`: the count and its noun."""
    return f"{count} {noun}{'s' if count != 1 else ''}"


class Column(NamedTuple):
    """One column of a markdown table: its header and the function giving a row's cell."""

    header: str
    cell: Callable[[Any], object]  # the row's cell


def as_is(value: object) -> object:
    """The value itself: a cell printed as `str` prints it."""
    return value


class Cell(NamedTuple):
    """A cell read off its row: the attribute at `path` (dotted, as `operator.attrgetter` reads it),
    printed by `show`. `Column("p", Cell("judgement.p_adjusted", fmt_p))` shows each row's
    `fmt_p(row.judgement.p_adjusted)`."""

    path: str
    show: Callable[[Any], object] = as_is

    def __call__(self, row: Any) -> object:
        return self.show(attrgetter(self.path)(row))


class Numbered(NamedTuple):
    """A row of a ranked table: its rank, the setting or run it shows, and (a setting's) the findings its
    runs share."""

    rank: int
    item: Any
    why: tuple[Any, ...] = ()


def listed(values: Iterable[str]) -> str:
    """`a, b`; `—` for none."""
    return ", ".join(values) or "—"


def choice_columns(
    columns: Sequence[str], choices: Callable[[Any], Mapping[str, Any]] = attrgetter("choices")
) -> list[Column]:
    """A column per choice in `columns`, each cell the row's value (`choices` of the row) as an override
    prints it."""
    return [Column(c, partial(_choice, choices, c)) for c in columns]


def _choice(choices: Callable[[Any], Mapping[str, Any]], column: str, row: Any) -> str:
    return shown(choices(row).get(column, "—"))


def md_table(columns: Sequence[Column], rows: Iterable[Any]) -> list[str]:
    """Every table of report.md, unpadded (tabulate and `to_markdown` pad each cell and do not escape `|`)."""
    escaped = {ord("|"): "\\|", ord("\n"): " "}
    return [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
        *("| " + " | ".join(str(c.cell(row)).translate(escaped) for c in columns) + " |" for row in rows),
    ]


def blocks(*parts: str | Sequence[str]) -> list[str]:
    """The parts (a line, or a block of lines) as report.md's lines, a blank line after each part."""
    return [line for part in parts for line in [*([part] if isinstance(part, str) else part), ""]]


def ladder_title(ladder: Ladder) -> str:
    """The ladder's heading in report.md and on ladder.png: `Across sizes`, or the levels' choices."""
    return "Across sizes" if ladder.kind is LadderKind.SIZE else f"Across levels of {', '.join(ladder.axis)}"


def level_label(ladder: Ladder, rung: Rung) -> str:
    """A level's name in the ladder's tables and panels; a size adds its parameters and steps."""
    params = f"{rung.params / 1e6:.2f}M" if rung.params is not None else "?"
    return f"{rung.level} ({params}, {rung.steps} steps)" if ladder.kind is LadderKind.SIZE else rung.level
