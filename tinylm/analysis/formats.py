"""How the report prints numbers and tables: every renderer formats through these, and computes nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tinylm.analysis.estimates import Estimate


def fmt_number(value: float | None, digits: int = 4, signed: bool = False) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "diverged" if value == math.inf else str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def fmt_interval(e: Estimate | None, signed: bool = False, digits: int = 4) -> str:
    if e is None or not e.has_interval:
        return "—"
    return f"[{fmt_number(e.low, digits, signed)}, {fmt_number(e.high, digits, signed)}]"


def fmt_wall_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def fmt_p(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}"


def fmt_duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:,.1f} hours" if hours >= 2 else f"{seconds / 60:.0f} minutes"
