"""report.md's first section, the Answer: a sentence per comparison, or per design across a ladder's levels,
and what is still open."""

from __future__ import annotations

from tinylm.analysis.formats import fmt_interval, fmt_mean, plural
from tinylm.analysis.grouping import CROSS_FITTED, Setting, setting_label
from tinylm.analysis.ladder import Ladder
from tinylm.analysis.report import SweepReport


def answer_section(report: SweepReport) -> list[str]:
    """The answer first: a sentence per comparison (its verdict, difference, interval and seeds), then what is
    still open and the command that resolves it; the methods are below, with the tables."""
    if report.ladder is not None:
        return _ladder_answer(report)
    base, named, apart = report.family_baseline, report.shown_family_columns, report.judged_apart
    if base is None or len(report.family) < 2:
        return []
    rows = [s for s in report.family if s is not base and s.answer is not None]
    both = (
        ", each design at the rate its tuning seeds chose: those seeds chose the rates and are judged on "
        "nothing, so this is the whole procedure's"
        if apart
        else " for the sweep's own seeds and α for the added seeds'"
    )
    answers = [
        f"- `{s.label(named)}` against `{base.label(named)}`: " + _answer_words(report, s, base) for s in rows
    ]
    promise = (
        "Lower is better. Family-wise (Holm): the chance of any false `better`/`worse` among these is at "
        f"most α = {report.alpha:g}"
        + (both if apart or any(s.added is not None for s in rows) else "")
        + ". The tables and the methods are below."
    )
    lines = ["## Answer", "", *answers, "", promise]
    still_open = [s for s in rows if not s.answer.resolved]
    spent = [row for row in report.sizing.rows if row.spent] if report.sizing is not None else []
    if spent and len(spent) == len(still_open):
        needs = ", ".join(f"`{setting_label(row.design)}` {row.needed}" for row in spent if row.needed)
        sized = f". At this spread, added seeds to find the difference (or δ) 80% of the time: {needs}"
        lines.append(
            f"Still open: {len(still_open)} of {len(rows)}, at the sequential design's horizon "
            f"({spent[0].horizon} added seeds), where `add_seeds` adds no more{sized if needs else ''}."
        )
    elif still_open:
        adds = (
            "judging seeds at the chosen rates, in rounds, until each is resolved"
            if apart
            else "seeds to them in rounds until each is resolved (*What resolving … would take*, below, "
            "sizes it)"
        )
        horizon = (
            f"; {len(spent)} of them are at the design's horizon, where it adds no more" if spent else ""
        )
        lines.append(
            f"Still open: {len(still_open)} of {len(rows)}. `python scripts/add_seeds.py {report.sweep_dir}` "
            f"adds {adds}{horizon}."
        )
    return [*lines, ""]


def _answer_words(report: SweepReport, s: Setting, base: Setting) -> str:
    """One comparison's answer: its verdict, difference, interval and seeds; how often each side failed, and
    why it disagrees with the settings table where it does (judged `CROSS_FITTED`: the first four)."""
    c, cross, digits = s.answer, report.rule == CROSS_FITTED, report.metric.digits
    d, n, verdict = c.tests.difference, len(c.tests.seeds), c.judgement.verdict
    if not n and not cross:
        return f"**{verdict}**: no seed is judged at a rate it chose"
    numbers = (
        f"{'difference ' if cross else ''}{fmt_mean(d, digits, signed=True)} "
        f"{report.metric.units}{'' if cross else ' over the seeds both sides trained'}, "
        f"{report.confidence:.0%} CI {fmt_interval(d, signed=True, digits=digits)}"
        if d is not None
        else "no difference measured"
    )
    kind = "" if cross else "judging " if report.lr_varies else "added " if c is s.added else ""
    line = f"**{verdict}**; {numbers}, {plural(n, kind + 'seed')}"
    # Where a side failed, the verdict says how often; else the line says that neither did.
    line += "" if cross or c.tests.failures else f"; fails 0/{n} vs 0/{n}"
    if s.choices in report.still_learning:
        line += (
            "; every run of both sides was still improving at its end: the budget stopped the runs before "
            "they stopped learning, so this is the difference at this budget"
        )
    mine, theirs = s.mean_at_rate, base.mean_at_rate
    if not cross and d is not None and None not in (mine, theirs) and (mine - theirs) * d.mean < 0:
        line += (
            "; the settings table orders them the other way at the chosen rates: its means there include the "
            "tuning seeds, which chose those rates and so flatter them, and this pairs the judging seeds only"
        )
    return line


def ladder_title(ladder: Ladder) -> str:
    """The title of the report's section on a ladder: *Across sizes*, or *Across levels of <axis>*."""
    return "Across sizes" if ladder.noun == "size" else f"Across levels of {', '.join(ladder.axis)}"


def _ladder_answer(report: SweepReport) -> list[str]:
    ladder, shown, axis = report.ladder, report.ladder.shown_columns, ", ".join(report.ladder.axis)
    base = ladder.rungs[0].baseline.label(shown)
    unjudged = report.judged_apart and any(
        s.answer is not None and not s.answer.tests.seeds for rung in ladder.rungs for s in rung.settings
    )
    judging = (
        f"Not yet judged: `python scripts/add_seeds.py {report.sweep_dir}` runs judging seeds at each "
        "level's chosen rates, in rounds, until each is resolved."
    )
    trends = [
        f"- `{setting_label(t.design, shown)}` against `{base}` along `{axis}`: **{t.verdict}**"
        for t in ladder.trends
    ]
    promise = (
        f"Lower is better. Every {ladder.noun}'s comparisons are one family (Holm): the chance of any false "
        f"`better`/`worse` among them is at most α = {report.alpha:g}. The tables and the methods are below."
    )
    return ["## Answer", "", *trends, "", promise, *([judging] if unjudged else []), ""]
