"""report.md: the Answer, the settings and the runs (the family and the sections after: render_sections)."""

from __future__ import annotations

import itertools
import math
from functools import partial
from operator import attrgetter, itemgetter

from tinylm.analysis.estimates import Estimate
from tinylm.analysis.grouping import Rule, Setting, setting_label, varying
from tinylm.analysis.multiplier import Multipliers, Reading
from tinylm.analysis.present import formats, render_sections
from tinylm.analysis.present.formats import Cell, Column, Numbered, blocks, choice_columns, md_table, plural
from tinylm.analysis.report import SweepReport
from tinylm.analysis.runs import STEPS_TO, RunSummary
from tinylm.analysis.why import Shared
from tinylm.overrides import shown


def answer_section(report: SweepReport) -> list[str]:
    """The Answer: a sentence per comparison, then what is still open and the command that resolves it."""
    if report.ladder is not None:
        return _ladder_answer(report)
    base, apart = report.family_baseline, report.judged_apart
    if base is None or len(report.family) < 2:
        return []
    rows = [s for s in report.family if s is not base and s.answer is not None]
    both = (
        ", each design at the rate its tuning seeds chose: those seeds chose the rates and are judged on "
        "nothing, so this is the whole procedure's"
        if apart
        else " for the sweep's own seeds and α for the added seeds'"
    )
    promise = (
        "Lower is better. Family-wise (Holm): the chance of any false `better`/`worse` among these is at "
        f"most α = {report.alpha:g}"
        + (both if apart or any(s.added is not None for s in rows) else "")
        + ". The tables and the methods are below."
    )
    lines = ["## Answer", "", *(_answer_line(report, s, base) for s in rows), "", promise]
    if report.costs:
        lines += ["", _multiplier_promise(report.confidence)]
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
        horizon = f"; {len(spent)} of them are at the design's horizon, where it adds no more"
        lines.append(
            f"Still open: {len(still_open)} of {len(rows)}. `python scripts/add_seeds.py {report.sweep_dir}` "
            f"adds {adds}{horizon if spent else ''}."
        )
    return [*lines, ""]


def _answer_line(report: SweepReport, s: Setting, base: Setting) -> str:
    c, cross, digits = s.answer, report.rule is Rule.CROSS_FITTED, report.metric.digits
    d, n, named = c.tests.difference, len(c.tests.seeds), report.shown_family_columns
    head = f"- `{s.label(named)}` against `{base.label(named)}`: **{c.judgement.verdict}**"
    if not n and not cross:
        return f"{head}: no seed is judged at a rate it chose"
    numbers = (
        f"{'difference ' if cross else ''}{formats.fmt_number(d, digits, signed=True)} "
        f"{report.metric.units}{'' if cross else ' over the seeds both sides trained'}, "
        f"{report.confidence:.0%} CI {formats.fmt_interval(d, signed=True, digits=digits)}"
        if d is not None
        else "no difference measured"
    )
    kind = "" if cross else "judging " if report.lr_varies else "added " if c is s.added else ""
    line = f"{head}; {numbers}, {plural(n, kind + 'seed')}"
    line += "" if cross or c.tests.failures else f"; fails 0/{n} vs 0/{n}"
    if s.choices in report.still_learning:
        line += (
            "; every run of both sides was still improving at its end: the budget stopped the runs before "
            "they stopped learning, so this is the difference at this budget"
        )
    costs = report.costs_of(s)
    if costs is not None and costs.steps.ratio is not None:
        line += "; " + _multiplier_clause(costs)
    mine, theirs = s.mean_at_rate, base.mean_at_rate
    if not cross and d is not None and None not in (mine, theirs) and (mine - theirs) * d.mean < 0:
        line += (
            "; the settings table orders them the other way at the chosen rates: its means there include the "
            "tuning seeds, which chose those rates and so flatter them, and this pairs the judging seeds only"
        )
    return line


_READ = {Reading.LESS: "fewer", Reading.MORE: "more", Reading.NOT_RESOLVED: "not resolved"}


def _multiplier_clause(costs: Multipliers) -> str:
    """`the loss both reached in **0.81× the steps** [0.76, 0.87] (fewer) and 0.85× the training time …`."""
    steps, time = costs.steps, costs.time
    clause = f"the loss both reached in **{formats.fmt_multiplier(steps.ratio)} the steps**"
    clause += f" ({_READ[steps.reading]})"
    if time.ratio is not None:
        read = "less" if time.reading is Reading.LESS else _READ[time.reading]
        clause += f" and {formats.fmt_multiplier(time.ratio)} the training time ({read})"
    clause += f", {plural(steps.ratio.n, 'seed')}"
    if steps.never_reached:
        clause += (
            f"; on {len(steps.never_reached)} of {len(steps.reaches)} it never came down to the baseline's "
            "final loss, so there the loss both reached is its own"
        )
    return clause


def _multiplier_promise(confidence: float) -> str:
    return (
        "The multiplier is the steps a design takes to reach the loss both sides reached (the baseline's "
        "final validation loss, or the design's own where it never came down to it) over the baseline's, "
        f"from each run's validation curve, paired by seed, with a {confidence:.0%} interval of the mean log "
        "ratio; below 1 the design needs less training for the same loss. Steps come first because a "
        "sweep's jobs share the cores and their seconds vary with what else runs, while a step is the same "
        "work on any machine; the training time (validation left out) follows, and differs from it by what a "
        "step costs."
    )


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
        f"Lower is better. Every {ladder.kind}'s comparisons are one family (Holm): the chance of any false "
        f"`better`/`worse` among them is at most α = {report.alpha:g}. The tables and the methods are below."
    )
    costs = [
        f"- `{setting_label(t.design, shown)}`'s step multiplier along `{axis}`: **{t.word.value}**: "
        + ", ".join(
            f"{formats.fmt_multiplier(m.ratio)} ({_READ[m.reading]}) at {level}"
            for level, m in zip(t.levels, t.at_levels, strict=True)
        )
        + (f" (change of its log p (Holm) = {t.p_adjusted:.2g})" if t.p_adjusted is not None else "")
        for t in report.cost_trends
    ]
    multiplied = [*costs, "", _multiplier_promise(report.confidence), ""] if costs else []
    return ["## Answer", "", *trends, "", *multiplied, promise, *([judging] if unjudged else []), ""]


def _rank(result: str, row: Numbered) -> int | str:
    """A setting's or run's rank; `—` for one whose `result` attribute is None (ranked after the others)."""
    return row.rank if getattr(row.item, result) is not None else "—"


def _settings_columns(report: SweepReport, gains: str | None) -> list[Column]:
    """`gains`: "nats" adds the gain over the runs' shared unigram level; "bits", mean and gain in bits."""
    digits, scale = report.metric.digits, 1.0 if gains == "nats" else formats.BITS_PER_NAT

    def readable(s: Setting) -> bool:  # a finite mean, and the reference levels to read it against
        return s.estimate is not None and math.isfinite(s.estimate.mean) and s.reference is not None

    def gain_over_unigram(s: Setting) -> str:
        return formats.fmt_gain(s.reference["unigram"], s.estimate.mean, scale) if readable(s) else "—"

    def in_bits(s: Setting) -> str:
        return formats.fmt_number(s.estimate.mean * scale) if readable(s) else "—"

    def fails(s: Setting) -> str:
        ci = s.fail_interval
        return f"{s.fails}/{len(s.results)}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    def sd(e: Estimate | None) -> str:
        return formats.fmt_number(e.sd if e else None, digits)

    def why(findings: tuple[Shared, ...]) -> str:
        return "; ".join(f.describe() for f in findings) or "—"

    def note(s: Setting) -> str:
        return "baseline" if s is report.family_baseline else ""

    number = partial(formats.fmt_number, digits=digits)
    interval = partial(formats.fmt_interval, digits=digits)
    gain_units = " (bits/char)" if gains == "bits" else ""
    cross_fitted = report.rule is Rule.CROSS_FITTED
    return [
        Column("rank", partial(_rank, "estimate")),
        *choice_columns(report.swept_columns, attrgetter("item.choices")),
        Column("seeds", Cell("item.results", len)),
        Column("mean", Cell("item.estimate", number)),
        Column("sd", Cell("item.estimate", sd)),
        Column(f"{report.confidence:.0%} CI", Cell("item.estimate", interval)),
        *([Column("bits/char", Cell("item", in_bits))] if gains == "bits" else []),
        *([Column(f"gain over unigram{gain_units}", Cell("item", gain_over_unigram))] if gains else []),
        Column("diverged", Cell("item.fails")) if cross_fitted else Column("fails", Cell("item", fails)),
        Column("no result", Cell("item.without_result")),
        Column("why", Cell("why", why)),
        Column("note", Cell("item", note)),
    ]


def _reference_lines(report: SweepReport) -> list[str]:
    if report.reference is not None:
        return blocks(
            "Reference levels of the validation split, estimated on the training split (nats/char): uniform "
            f"(ln V) {report.reference['uniform']:.4f}, unigram {report.reference['unigram']:.4f}, bigram "
            f"{report.reference['bigram']:.4f}. A loss at the unigram level has learned the characters' "
            "frequencies and nothing of their context; `gain over unigram` is how far below it a setting got."
        )
    names = ("uniform", "unigram", "bigram")
    columns = [  # a row: (the corpus's name, its levels)
        Column("corpus", itemgetter(0)),
        *(Column(f"{k} (ln V)" if k == "uniform" else k, partial(_level_in_nats, k)) for k in names),
        *(Column(f"{k} bits/char", partial(_level_in_bits, k)) for k in names),
    ]
    return blocks(
        f"The settings are on {len(report.corpora)} corpora, each with its own reference levels (validation "
        "split, estimated on the training split). Their nats are not comparable between vocabularies, so the "
        "table also reads each mean in bits/char and as `gain over unigram` in bits/char: how far below its "
        "own corpus's unigram level (the characters' frequencies, nothing of their context) a setting got.",
        md_table(columns, report.corpora),
    )


def _level_in_nats(level: str, corpus: tuple[str, dict[str, float]]) -> str:
    return f"{corpus[1][level]:.4f}"


def _level_in_bits(level: str, corpus: tuple[str, dict[str, float]]) -> str:
    return f"{corpus[1][level] / math.log(2):.3f}"


def _method_lines(report: SweepReport, run_columns: list[str]) -> list[str]:
    pct, metric, loss = f"{report.confidence:.0%}", report.metric, report.metric.is_loss
    most = plural(report.most_seeds, "seed")
    seeds = f"{len(report.runs)} runs in {len(report.settings)} settings, up to {most} each"
    compared = (
        f"Final validation loss (nats/char) of {seeds}: the mean over the final evaluation's windows (every "
        "validation window, or up to 4 per window a short run trained on; the runs table says how many), or "
        "the last validation for a run without one. "
        if loss
        else f"{metric.noun.capitalize()} (lower is better) of {seeds}: the "
        + ("optimizer step" if metric.kind == STEPS_TO else "seconds of training (validations included)")
        + f" at which a run's periodic validation loss first reached {metric.level:g} nats/char "
        f"(`{metric.tag}` in its metrics.json; `--metric`). "
    )
    failing = "diverged or collapsed" if loss else f"diverged, collapsed or never reached {metric.level:g}"
    counted = (
        "a diverged run counts as the worst result, a failed or unfinished one as none."
        if report.rule is Rule.CROSS_FITTED
        else f"a run that {failing} fails (docs/sweeps.md): `fails` counts it, with the exact {pct} interval "
        f"of the rate, and the means are over the runs that {'trained' if loss else 'reached it'}; "
        "a crashed or unfinished run has no result."
    )
    choices = {c: report.runs[0].choices.get(c, "—") for c in report.columns if c not in run_columns}
    shared = " ".join(f"`{k}={shown(v)}`" for k, v in (choices | report.common).items())
    return blocks(
        f"{compared}Intervals are {pct} confidence intervals for the mean (Student t over seeds); {counted}",
        *([f"Shared by every run: {shared}"] if shared else []),
    )


def markdown(report: SweepReport) -> str:
    """report.md: the Answer, the settings, the family, the ladder, *Why* and probe sections, the runs."""
    levels = "nats" if report.reference is not None else "bits" if report.corpora else None
    gains = levels if report.metric.is_loss else None
    why = report.setting_why or [()] * len(report.settings)
    run_columns = varying(report.columns, [run.choices for run in report.runs])  # the runs table's choices
    ranked = [Numbered(n, s, w) for n, (s, w) in enumerate(zip(report.settings, why, strict=True), start=1)]
    text = [
        f"# Sweep report: {report.sweep_dir}" + ("" if report.metric.is_loss else f", {report.metric.noun}"),
        "",
        *answer_section(report),
        *_method_lines(report, run_columns),
        *blocks("## Settings", md_table(_settings_columns(report, gains), ranked)),
        *(_reference_lines(report) if gains else []),
        *blocks(
            "`why`: what the runs' curves show, with how many runs showed it and the step it began "
            "(tinylm/analysis/diagnosis.py; docs/diagnosis.md has each threshold and its reason)."
        ),
        *(render_sections.family_section(report) if len(report.family) > 1 else []),
        *(render_sections.ladder_section(report, report.ladder) if report.ladder else []),
        *render_sections.why_section(report),
        *render_sections.probe_section(report.probe),
        *blocks(
            "## Runs",
            md_table(_runs_columns(report, run_columns), map(Numbered, itertools.count(1), report.runs)),
        ),
        f"{len(report.runs)} runs: "
        + ", ".join(f"{n} {s}" for s, n in report.run_statuses.items())
        + ". bits/char = nats / ln 2; params without position embeddings; tokens/s and wall time depend on "
        "what else ran on the machine.",
    ]
    return "\n".join(text) + "\n"


def _runs_columns(report: SweepReport, run_columns: list[str]) -> list[Column]:
    metric = report.metric

    def reached(run: RunSummary) -> str:
        value = run.targets.get(metric.tag)
        if value is not None or run.status != "completed":
            return formats.fmt_number(value, metric.digits)  # "—" where it has none
        return "not reached" if run.watches(metric.level) else "not watched"

    def steps(run: RunSummary) -> str:
        return "—" if run.steps is None else f"{run.steps}" + (f"/{run.max_steps}" if run.max_steps else "")

    def status(run: RunSummary) -> str:
        text = run.status if not run.error else f"{run.status}: {run.error}"
        return text if len(text) <= 120 else text[:117] + "..."

    def params(count: int | None) -> str:
        return "—" if count is None else f"{count:,}"

    def rate(tokens_per_s: float | None) -> str:
        return "—" if tokens_per_s is None else f"{tokens_per_s:,.0f}"

    return [
        Column("rank", partial(_rank, "result")),
        Column("run", Cell("item.name")),
        *choice_columns(run_columns, attrgetter("item.choices")),
        Column("params", Cell("item.params", params)),
        *([Column(metric.noun, Cell("item", reached))] if metric.tag is not None else []),
        Column("final val loss", Cell("item.final_val_loss", formats.fmt_number)),
        Column("evaluated on", Cell("item.evaluated")),
        Column("best val loss", Cell("item.best_val_loss", formats.fmt_number)),
        Column("bits/char", Cell("item.final_bpc", partial(formats.fmt_number, digits=3))),
        Column("tokens/s", Cell("item.tokens_per_s", rate)),
        Column("wall time", Cell("item.wall_time_s", formats.fmt_duration)),
        Column("steps", Cell("item", steps)),
        Column("status", Cell("item", status)),
    ]
