"""report.md's later sections: added seeds, what resolving open rows would take, *Why*, the depth probe."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tinylm.analysis import formats
from tinylm.analysis.formats import Column, blocks, choice_columns, md_table, plural
from tinylm.analysis.grouping import setting_label
from tinylm.analysis.report import DESIGN_FILE, REPORT_PNG, SweepReport
from tinylm.analysis.why import Shared, WhyRow, quantity, why_figure
from tinylm.probe.sweep_shapes import SHOWN


def added_section(report: SweepReport) -> list[str]:
    """The seeds a sequential design added: how it judges them and (unless judged apart) their verdicts."""
    pct = f"{report.confidence:.0%}"
    columns = [
        *choice_columns(report.shown_family_columns),
        Column("sweep's verdict", lambda s: s.comparison.judgement.verdict),
        Column("added seeds", lambda s: len(s.added.tests.seeds)),
        Column("difference", lambda s: formats.fmt_mean(s.added.tests.difference, signed=True)),
        Column(f"{pct} CI", lambda s: formats.fmt_interval(s.added.tests.difference, signed=True)),
        Column("p", lambda s: formats.fmt_p(s.added.tests.p_value)),
        Column("verdict on added seeds", lambda s: s.added.judgement.verdict),
    ]
    table = md_table(columns, [s for s in report.family if s.added is not None])
    return blocks(
        "## Seeds added to the open rows (scripts/add_seeds.py)",
        _design_words(report) + f"Intervals are {pct}, over the added seeds, not adjusted for the looks.",
        [] if report.judged_apart else table,  # judged apart: the family table is theirs
    )


def _design_words(report: SweepReport) -> str:
    design, alpha = report.design, report.alpha
    first = f"{len(design.first_seeds)} seeds ({', '.join(design.first_seeds)})"
    looks = ", ".join(
        f"look {number + 2}: {len(design.added_seeds(number + 1))} added seeds, "
        + ("judging nothing" if level is None else f"level {level:.2g}")
        for number, level in enumerate(report.look_levels)
    )
    rate = " at the rate its sweep seeds chose" if report.lr_varies else ""
    first_words = (
        f"The sweep's own {first} chose each setting's rate and are judged on nothing; the rows above are "
        "the seeds added since, at those rates. They are judged by a group-sequential "
        if report.judged_apart
        else f"The rows above are judged on the sweep's own {first}, as its report judged them, and keep "
        "those verdicts. The seeds added since to the rows left open (and to the baseline) are a second "
        f"experiment, judged here on the added seeds alone{rate}: a group-sequential "
    )
    over_both = (
        "The chance of any false `better`/`worse` over the whole procedure, each design at the rate its "
        "tuning seeds chose, is at most α. "
        if report.judged_apart
        else "Each experiment's chance of any false `better`/`worse` is at most α, so a row's answer (the "
        "sweep's verdict, or where it was open the added seeds') errs with chance at most 2α "
        f"= {2 * alpha:g} over both. "
    )
    return (
        f"{first_words}design declared before its first added seed ({DESIGN_FILE}), up to {design.horizon} "
        f"added seeds, α = {alpha:g} spent by Lan-DeMets' O'Brien-Fleming-type function with boundaries for "
        f"the looks' t statistics ({looks}: the level of a test given the whole α; Holm gives the k-th "
        "smallest of m p-values the level of α / (m − k + 1) at the same look). A verdict names the look "
        "that gave it. " + over_both
    )


def cost_lines(report: SweepReport) -> list[str]:
    """What resolving the open rows would take (`report.sizing`)."""
    sizing = report.sizing
    rows = [_cost_line(row) for row in sizing.rows] if sizing is not None else []
    if sizing is None or not (rows or sizing.runs):
        return []
    head = (
        f"What resolving the {plural(sizing.open, 'open row')} would take, if each difference is what it "
        "seems (or δ, if smaller):"
    )
    if sizing.runs:  # else every open row is at its design's horizon: nothing more to run under it
        per_seed = (
            ", every rate of a setting at each new seed (cross-fitting needs them)"
            if sizing.every_rate
            else ""
        )
        head += (
            f" {sizing.runs:,} more runs, the rows' own below and the baseline's at the same "
            f"seeds{per_seed}, {formats.fmt_duration(sizing.seconds)} of run time at these runs' median wall "
            "times; `python scripts/add_seeds.py <sweep dir>` adds them in rounds until each is resolved."
        )
    return ["", head, *rows]


def _cost_line(row: Any) -> str:
    label, seeds = f"- `{setting_label(row.design)}`:", "added seeds" if row.added else "seeds"
    beyond = (
        f"; more than the {row.horizon} added seeds this design allows, where it stops"
        if row.added and row.horizon is not None and row.needed is not None and row.needed > row.horizon
        else ""
    )
    if row.needed is None:
        return f"{label} too few finished seeds to size it"
    if row.more:
        return f"{label} {row.needed} {seeds} ({row.more} more, {plural(row.runs, 'run')} of its own){beyond}"
    if beyond:
        return f"{label} {row.needed} {seeds}{beyond}: its {row.has} are spent"
    return (
        f"{label} its {row.has} {seeds} would find this difference 80% of the time and did not: it is "
        "smaller than it seems, or this was the other 20%"
    )


def why_section(report: SweepReport) -> list[str]:
    """The *Why* section: a sentence or two per row of `report.why`, naming the figure of each health tag."""
    explained = [_explained(report, row) for row in report.why if row.lost_or_failed]
    # A finding about the data, not the run: never among the settings that lost or failed.
    about_data = [
        f"- **{setting_label(row.design)}**: " + "; ".join(map(_sentence, row.about_data)) + "."
        for row in report.why
        if row.about_data
    ]
    text = ["## Why", ""] if report.why else []
    if explained:
        text += blocks(
            "What the curves of each setting that lost or failed show (its judged runs; thresholds in "
            f"docs/diagnosis.md). Loss findings are in {REPORT_PNG} (the reference levels are its dashed "
            "lines); health findings in the figure named.",
            *explained,
        )
    if about_data:
        text += blocks(
            "About the data, not the runs: a validation loss measures what a model generalises to only where "
            "its validation text is not its training text (docs/diagnosis.md).",
            *about_data,
        )
    return text


def _explained(report: SweepReport, row: WhyRow) -> str:
    if row.verdict is not None and row.difference is not None:
        outcome = f"{row.verdict}, {row.difference:+.{report.metric.digits - 1}f}"
    else:  # a baseline (a ladder has one per level) is named as one, not as a failure
        outcome = "baseline" if row.baseline else "no difference measured"
    found = "; ".join(map(_sentence, row.about_runs)) or "nothing in its curves names a cause"
    return f"- **{setting_label(row.design)}** ({outcome}): {found}."


def _sentence(f: Shared) -> str:
    """A finding in words: how many runs showed it (their seeds where known), an example, where to see it."""
    seeds, name = "", quantity(f.example.tag)
    if len(f.seeds) == f.count:
        seeds = f"seed {f.seeds[0]}" if f.count == 1 else f"seeds {', '.join(f.seeds[:-1])} and {f.seeds[-1]}"
    example = "" if f.count == 1 and seeds else f"seed {f.seed}" if f.count == 1 else f"e.g. seed {f.seed}"
    began = f"from step {f.example.step}" if f.example.step is not None else ""
    head = ", ".join(part for part in (example, began) if part)
    where = f"`{f.example.tag}`" + (f", {why_figure(name)}" if name else "")
    seen = f"{f.kind} in {f.count}/{f.of} runs" + (f", {seeds}" if seeds else "")
    return f"{seen} ({head + ': ' if head else ''}{f.example.evidence}; {where})"


def probe_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The depth probe's section: one line per shape the runs trained."""
    if not rows:
        return []
    from tinylm.probe.depth import label

    names = {"norm": "norm", "act": "act", "n_layer": "blocks", "d_model": "d_model"}
    columns = [
        *(Column(header, lambda row, key=key: row[key]) for key, header in names.items()),
        *(Column(f"{label(key)}, block n", lambda row, key=key: _probe_value(row[key])) for key in SHOWN),
    ]
    return blocks(
        "## At initialisation: the depth probe at this sweep's shapes",
        "Each placement's fresh blocks (no embeddings, no head), initialised as its runs were, one forward "
        "and backward pass on `randn` input over the runs' context with causal attention, loss a fixed "
        "random projection, float64; measured after the last block n (docs/probe.md). Token spread near 0 "
        "means the tokens have collapsed onto one vector; ‖∇W_q‖ and ‖∇W_k‖ orders of magnitude below ‖∇W_v‖ "
        "mean queries and keys get no gradient to learn from.",
        md_table(columns, rows),
    )


def _probe_value(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.3f}" if 0.01 <= abs(value) < 1000 else f"{value:.2e}"
