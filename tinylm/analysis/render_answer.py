"""report.md's first section, the Answer: a sentence per comparison (its verdict, difference, interval and
seeds; over the runs that trained, with how often each side failed), or per design across a ladder's levels,
and what is still open. Reads the report value and computes nothing."""

from __future__ import annotations

from tinylm.analysis.formats import fmt_interval, fmt_number
from tinylm.analysis.grouping import CROSS_FITTED, Setting, setting_label
from tinylm.analysis.ladder import Ladder
from tinylm.analysis.report import SweepReport
from tinylm.analysis.verdicts import Comparison


def answer_section(report: SweepReport) -> list[str]:
    """The answer first: a sentence per comparison (its verdict, difference, interval and seeds), then what is
    still open and the command that resolves it; the methods are below, with the tables."""
    if report.ladder is not None:
        return _ladder_answer(report)
    base = report.family_baseline
    if base is None or len(report.family) < 2:
        return []
    named = report.shown_family_columns
    rows = [s for s in report.family if s is not base and s.answer is not None]
    lines = ["## Answer", ""]
    for s in rows:
        c = s.answer
        lines.append(
            f"- `{s.label(named)}` against `{base.label(named)}`: " + _answer_words(report, s, base, c)
        )
    added = any(s.added is not None for s in rows)
    judged_apart = report.judged_apart
    both = (
        ", each design at the rate its tuning seeds chose: those seeds chose the rates and are judged on nothing, "
        "so this is the whole procedure's"
        if judged_apart
        else " for the sweep's own seeds and α for the added seeds'"
    )
    lines += [
        "",
        f"Lower is better. Family-wise (Holm): the chance of any false `better`/`worse` among these is at most "
        f"α = {report.alpha:g}"
        + (both if added or judged_apart else "")
        + ". The tables and the methods are below.",
    ]
    still_open = [s for s in rows if not s.answer.resolved]
    spent = [row for row in report.sizing.rows if row.spent] if report.sizing is not None else []
    if spent and len(spent) == len(still_open):
        needs = ", ".join(f"`{setting_label(row.design)}` {row.needed}" for row in spent if row.needed)
        lines.append(
            f"Still open: {len(still_open)} of {len(rows)}, at the sequential design's horizon ({spent[0].horizon} "
            "added seeds), where `add_seeds` adds no more"
            + (
                f". At this spread, added seeds to find the difference (or δ) 80% of the time: {needs}."
                if needs
                else "."
            )
        )
    elif still_open:
        lines.append(
            f"Still open: {len(still_open)} of {len(rows)}. `python scripts/add_seeds.py {report.sweep_dir}` adds "
            + (
                "judging seeds at the chosen rates, in rounds, until each is resolved"
                if judged_apart
                else "seeds to them in rounds until each is resolved (*What resolving … would take*, below, sizes it)"
            )
            + (
                f"; {len(spent)} of them are at the design's horizon, where it adds no more."
                if spent
                else "."
            )
        )
    return [*lines, ""]


def _answer_words(report: SweepReport, s: Setting, base: Setting, c: Comparison) -> str:
    """One comparison's answer: its verdict, difference, interval and seeds; over the runs that trained, with
    how often each side failed, and why it disagrees with the settings table where it does (a report judged
    cross-fitted, `CROSS_FITTED`: its verdict, difference, interval and seeds only)."""
    pct = f"{report.confidence:.0%}"
    d, units, digits = c.tests.difference, report.metric.units, report.metric.digits
    if report.rule == CROSS_FITTED:
        numbers = (
            f"difference {fmt_number(d.mean, digits, signed=True)} {units}, {pct} CI "
            f"{fmt_interval(d, signed=True, digits=digits)}"
            if d is not None
            else "no difference measured"
        )
        return (
            f"**{c.judgement.verdict}**; {numbers}, {len(c.tests.seeds)} seed{'s' if len(c.tests.seeds) != 1 else ''}"
            + _budget_words(report, s)
        )
    if not c.tests.seeds:
        return f"**{c.judgement.verdict}**: no seed is judged at a rate it chose"
    kind = "judging " if report.lr_varies else "added " if c is s.added else ""
    seeds = f"{len(c.tests.seeds)} {kind}seed{'s' if len(c.tests.seeds) != 1 else ''}"
    numbers = (
        f"{fmt_number(d.mean, digits, signed=True)} {units} over the seeds both sides trained, {pct} CI "
        f"{fmt_interval(d, signed=True, digits=digits)}"
        if d is not None
        else "no difference measured"
    )
    # Where a side failed, the verdict says how often; else the line says that neither did.
    line = f"**{c.judgement.verdict}**; {numbers}, {seeds}" + (
        "" if c.tests.failures else f"; fails 0/{len(c.tests.seeds)} vs 0/{len(c.tests.seeds)}"
    )
    line += _budget_words(report, s)
    mine, theirs = s.mean_at_rate, base.mean_at_rate
    if d is not None and mine is not None and theirs is not None and (mine - theirs) * d.mean < 0:
        line += (
            "; the settings table orders them the other way at the chosen rates: its means there include the "
            "tuning seeds, which chose those rates and so flatter them, and this pairs the judging seeds only"
        )
    return line


def _budget_words(report: SweepReport, s: Setting) -> str:
    """Where every run of both sides was still improving at its end (`report.still_learning`): the difference
    is one at this budget."""
    if s.choices not in report.still_learning:
        return ""
    return (
        "; every run of both sides was still improving at its end: the budget stopped the runs before they "
        "stopped learning, so this is the difference at this budget"
    )


def ladder_title(ladder: Ladder) -> str:
    """The title of the report's section on a ladder: *Across sizes*, or *Across levels of <axis>*."""
    return "Across sizes" if ladder.noun == "size" else f"Across levels of {', '.join(ladder.axis)}"


def _ladder_answer(report: SweepReport) -> list[str]:
    """A ladder's answer: per design, its verdict across the levels (which names each level's verdict)."""
    ladder = report.ladder
    shown = ladder.shown_columns
    base = ladder.rungs[0].baseline.label(shown)
    lines = ["## Answer", ""]
    for trend in ladder.trends:
        design = setting_label(trend.design, shown)
        lines.append(f"- `{design}` against `{base}` along `{', '.join(ladder.axis)}`: **{trend.verdict}**")
    unjudged = report.judged_apart and any(
        s.answer is not None and not s.answer.tests.seeds for rung in ladder.rungs for s in rung.settings
    )
    return [
        *lines,
        "",
        f"Lower is better. Every {ladder.noun}'s comparisons are one family (Holm): the chance of any false "
        f"`better`/`worse` among them is at most α = {report.alpha:g}. The tables and the methods are below.",
        *(
            [
                f"Not yet judged: `python scripts/add_seeds.py {report.sweep_dir}` runs judging seeds at each "
                "level's chosen rates, in rounds, until each is resolved."
            ]
            if unjudged
            else []
        ),
        "",
    ]
