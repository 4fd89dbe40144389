"""How the report prints numbers and tables: every renderer formats through these, and computes nothing."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tinylm.analysis.estimates import Estimate
from tinylm.overrides import shown


def fmt_number(value: float | None, digits: int = 4, signed: bool = False) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "diverged" if value == math.inf else str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def fmt_mean(e: Estimate | None, digits: int = 4, signed: bool = False) -> str:
    return fmt_number(None if e is None else e.mean, digits, signed)


def fmt_interval(e: Estimate | None, signed: bool = False, digits: int = 4) -> str:
    if e is None or not e.has_interval:
        return "—"
    return f"[{fmt_number(e.low, digits, signed)}, {fmt_number(e.high, digits, signed)}]"


def fmt_wall_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def fmt_p(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}"


def fmt_duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:,.1f} hours" if hours >= 2 else f"{seconds / 60:.0f} minutes"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


@dataclass(frozen=True)
class Column:
    """A column of a report table: its header and its cell for a row."""

    header: str
    cell: Callable[[Any], Any]


def choice_columns(
    columns: Sequence[str], choices: Callable[[Any], dict] = lambda row: row.choices
) -> list[Column]:
    """A column per choice, each row's value as a command line writes it (`—` where it has none)."""
    return [Column(c, lambda row, c=c: shown(choices(row).get(c, "—"))) for c in columns]


def md_table(columns: Sequence[Column], rows: Iterable[Any]) -> list[str]:
    """Every table of report.md: a header row, a separator row and a line per row, unpadded (tabulate, and
    pandas' `to_markdown` through it, pad each cell to its column's width and do not escape `|`)."""
    escaped = {ord("|"): "\\|", ord("\n"): " "}
    return [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
        *("| " + " | ".join(str(c.cell(row)).translate(escaped) for c in columns) + " |" for row in rows),
    ]


def blocks(*parts: str | Sequence[str]) -> list[str]:
    """Markdown blocks, each followed by a blank line: a paragraph or heading (a string), or table lines."""
    lines: list[str] = []
    for part in parts:
        lines += [part] if isinstance(part, str) else part
        lines.append("")
    return lines
