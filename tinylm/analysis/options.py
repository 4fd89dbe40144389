"""What a report is asked to judge, checked against the sweep: the baseline (`--baseline`, the sequential
design's, or the experiment's `baseline:`) and the ladder's axis (`--ladder`, the design's, or the
experiment's `ladder:`). Each is refused with a one-line ReportError naming the option where the sweep cannot
answer it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinylm.analysis.ladder import SCALE_KEY
from tinylm.analysis.runs import ReportError, RunSummary
from tinylm.analysis.sequential_design import Design
from tinylm.layout import DESIGN_FILE
from tinylm.overrides import OverrideError, parse


def parse_choices(text: str) -> dict[str, Any]:
    """`norm=pre,act=gelu` -> {"norm": "pre", "act": "gelu"}, each value typed as Hydra types overrides."""
    pairs = [part.strip() for part in text.split(",") if part.strip()]
    if not pairs or any("=" not in pair or pair.startswith("=") for pair in pairs):
        raise ReportError(
            f"--baseline {text!r}: write choices as key=value[,key=value], e.g. norm=pre,act=gelu"
        )
    try:
        parsed = parse(pairs)
    except OverrideError as err:
        raise ReportError(f"--baseline {text!r}: {err}") from None
    return {choice.key: choice.typed for choice in parsed}


def against_design(asked: str, how: str, holds: str) -> ReportError:
    """The error for an option (`asked`) that contradicts how the sweep's seeds were added (`how`)."""
    return ReportError(
        f"{asked}: this sweep's seeds were added {how} ({DESIGN_FILE}); its verdicts hold only {holds}"
    )


def ladder_axis(
    flag: str | None,
    runs: Sequence[RunSummary],
    columns: Sequence[str],
    wanted: dict[str, Any] | None,
    design: Sequence[str] | None,
) -> list[str]:
    """The choices judged level by level: --ladder, a sequential design's, the experiment's `ladder:`, or
    `size` where the sweep varies it and the baseline does not name it (older scale ladders); [] for none."""
    named = flag or ",".join(design or ()) or _named_alike(runs, "ladder")
    if not named:
        return [SCALE_KEY] if SCALE_KEY in columns and wanted is not None and SCALE_KEY not in wanted else []
    where = "--ladder" if flag else f"the ladder of {DESIGN_FILE}" if design else "the experiment's `ladder:`"
    axis = [key.strip() for key in named.split(",") if key.strip()]
    text = ",".join(axis) if flag is None else flag
    still = [key for key in axis if key not in columns]
    if not axis or still:
        raise ReportError(
            f"{where} {text!r}: {', '.join(still) or 'nothing'} does not vary in this sweep; choose among "
            f"{', '.join(columns)}"
        )
    named_level = sorted(set(axis) & set(wanted or {}))
    if named_level:
        raise ReportError(
            f"the baseline names {', '.join(named_level)}, the ladder's axis ({where} {text}): name the "
            "design only, and it is judged at every level"
        )
    return axis


def named_baseline(
    flag: str | None, runs: Sequence[RunSummary], design: Design | None
) -> tuple[str | None, str | None]:
    """The baseline and who named it: --baseline, the sequential design, or the experiment's `baseline:`."""
    if flag:
        return flag, "--baseline"
    if design is not None:
        return design.baseline, design.baseline_source
    named = _named_alike(runs, "baseline")
    return (named, "the experiment's `baseline:`") if named else (None, None)


def _named_alike(runs: Sequence[RunSummary], key: str) -> str | None:
    named = {getattr(run, key) for run in runs if getattr(run, key)}  # every run that names one, alike
    if len(named) > 1:
        raise ReportError(
            f"the runs name different {key}s ({', '.join(sorted(named))}); choose one with --{key}"
        )
    return named.pop() if named else None
