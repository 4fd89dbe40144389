"""report.md's sections from the family table on (a ladder's figures: plots); docs/sweeps.md explains them."""

from __future__ import annotations

import math
import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any

from tinylm import overrides
from tinylm.analysis.estimates import PairedTests, Power
from tinylm.analysis.grouping import Rule, Setting, setting_label
from tinylm.analysis.ladder import Ladder, LadderKind, Rung
from tinylm.analysis.present import formats
from tinylm.analysis.present.formats import Cell, Column, blocks, choice_columns, md_table, plural
from tinylm.analysis.report import SweepReport
from tinylm.analysis.sizing import RowSize
from tinylm.analysis.verdicts import Comparison
from tinylm.analysis.why import Shared, quantity
from tinylm.layout import DESIGN_FILE, LADDER_PNG, REPORT_PNG, SCALE_PNG, WHY_PNG
from tinylm.probe.sweep_shapes import SHOWN


def family_section(report: SweepReport) -> list[str]:
    """The family's section: each setting against the baseline, paired seed by seed, with its verdict; or
    why there are no verdicts."""
    base, named, text = report.family_baseline, report.shown_family_columns, []
    if report.judged_apart:
        text = blocks(
            "## Each setting at the rate its tuning seeds chose",
            "Each setting's rate is chosen on its tuning seeds, the sweep's own: of the rates where the "
            "fewest of them failed, the one with the lowest mean over those that trained (`tuned on`: the "
            "seeds). It is judged only on other seeds run at that rate, which `scripts/add_seeds.py` adds: "
            "no seed both chooses a rate and is judged at it, which would flatter a setting whose optimum is "
            "broad. `mean`: over the judging seeds that trained.",
        )
    elif report.lr_varies:
        text = blocks(
            "## Each setting at a cross-fitted learning rate",
            "Each seed's result is taken at the rate with the lowest mean over the setting's *other* seeds "
            "(leave one seed out), so no seed both chooses the rate and is judged at it: picking the best "
            "rate on the runs it is judged on flatters a setting whose optimum is broad. `rates chosen` "
            "counts the seeds judged at each rate.",
        )
    if report.ladder is not None:
        kind, title = report.ladder.kind, formats.ladder_title(report.ladder)
        return text + blocks(f"The baseline is judged at each {kind}: see *{title}* below.")
    if base is None:
        example = report.baseline_example
        how = (
            f"run report.py again with `--baseline {shlex.quote(example)}` (the setting the sweep ran first) "
            "or another setting's choices"
            if example is not None
            else "run report.py again with `--baseline key=value[,key=value]`"
        )
        return text + blocks(
            f"No verdicts: no baseline was named. For verdicts against one of these settings, {how}, or set "
            "`baseline:` in the experiment preset. The best setting is not used as one: it is picked from "
            "the same runs it would be judged on, which tilts every other row toward `worse`."
        )
    if not report.lr_varies:
        text += blocks(f"## Against the baseline `{base.label(named)}`")
    rows = [s for s in report.family if s is base or report.shown_comparison(s) is not None]
    text += blocks(
        f"Baseline `{base.label(named)}` (named by {report.baseline_source}). Paired seed by seed: the mean "
        f"of (setting − baseline) over the seeds both finished, with its {report.confidence:.0%} interval; "
        f"< 0 is {report.metric.lower}.",
        md_table(_family_columns(report), rows),
        [_family_notes(report), *cost_lines(report)],
    )
    if report.design is not None and len(report.design.looks) > 1:
        text += added_section(report)
    return text


def _family_columns(report: SweepReport) -> list[Column]:
    base, digits, apart = report.family_baseline, report.metric.digits, report.judged_apart
    pct, delta = f"{report.confidence:.0%}", f"{report.min_effect:g}"

    def judged(header: str, cell: Callable[[Comparison], object], on_base: object = "") -> Column:
        """A column of each row's comparison as the report shows it; the baseline's cell: `on_base`."""
        return Column(header, partial(judged_cell, cell, on_base))

    def judged_cell(cell: Callable[[Comparison], object], on_base: object, s: Setting) -> object:
        return on_base if s is base else cell(report.shown_comparison(s))

    def seeds(t: PairedTests) -> str:
        unpaired = f" (unpaired, not used: seed {', '.join(t.unmatched)})" if t.unmatched else ""
        return f"{len(t.seeds)}{unpaired}"

    def failures(t: PairedTests) -> str:
        n = len(t.seeds)
        return t.failures.describe() if t.failures else f"0/{n} vs 0/{n}" if n else "—"

    def paired_sd(c: Comparison) -> str:
        t, j = c.tests, c.judgement
        sd = j.power.sd if j.power else t.difference.sd if apart and t.difference else None
        return formats.fmt_number(sd, digits)

    def resolves(power: Power | None) -> str:
        return formats.fmt_number(power and power.resolvable, digits - 1)

    def seeds_for_delta(power: Power | None) -> int | str:
        return power.seeds_for_min_effect if power else "—"

    number = partial(formats.fmt_number, digits=digits)
    signed = partial(formats.fmt_number, digits=digits, signed=True)
    interval = partial(formats.fmt_interval, signed=True, digits=digits)
    return [
        *choice_columns(report.shown_family_columns),
        *([Column("rate", Cell("rate", overrides.shown))] if apart else []),
        *([Column("tuned on", Cell("tuned_on", formats.listed))] if apart else []),
        *([Column("rates chosen", _rates_cell)] if report.lr_varies and not apart else []),
        *([Column("mean", Cell("estimate", number))] if report.lr_varies else []),
        judged("seeds", Cell("tests", seeds), report.baseline_seeds),
        judged("difference", Cell("tests.difference", signed), "baseline"),
        judged(f"{pct} CI", Cell("tests.difference", interval)),
        judged("p (Holm)", Cell("judgement.p_adjusted", formats.fmt_p)),
        judged("equivalence p (Holm)", Cell("judgement.p_equivalence_adjusted", formats.fmt_p)),
        judged("verdict", Cell("judgement.verdict")),
        judged("diverged" if report.rule is Rule.CROSS_FITTED else "fails", Cell("tests", failures)),
        judged("paired sd", paired_sd),
        judged("resolves (80%)", Cell("judgement.power", resolves)),
        judged(f"seeds for ±{delta}", Cell("judgement.power", seeds_for_delta)),
        judged("eval SE", Cell("tests.eval_se", formats.fmt_number)),
    ]


def _family_notes(report: SweepReport) -> str:
    tests, cross_fitted = report.family_tests, report.rule is Rule.CROSS_FITTED
    delta, units = f"{report.min_effect:g}", report.metric.units
    # Every stored report judged cross-fitted (report.json format 2) that has this table tuned its rate.
    test = (
        "t on the cross-fitted differences, with the standard error of the jackknife over seeds of the whole "
        "choose-then-compare procedure; `paired sd` is √n times it"
        if cross_fitted
        else "paired t over the seeds both sides trained"
    )
    return (
        f"One family: {plural(tests, 'test')} of difference ({test}; for "
        f"{'diverged' if cross_fitted else 'failed'} seeds, McNemar's exact test), Holm-adjusted so that the "
        f"chance of any false `better`/`worse` in the table is at most α = {report.alpha:g}; "
        f"{plural(report.equivalence_tests, 'test')} of equivalence (two one-sided tests within ±δ, δ "
        f"= {delta} {units}, `--min-effect`), Holm-adjusted apart. `better, but by less than {delta}`: both. "
        f"A difference below {1e-6:g} on every seed is `identical on every seed`. `resolves (80%)`: the "
        f"smallest |difference| ({units}) these seeds find with 80% power at α/{max(1, tests)}; `seeds for "
        f"±{delta}`: the seeds a difference of δ would need. `eval SE`: the standard error the final "
        "evaluation's finite set of windows adds to the difference (part of the seed interval already)."
    )


def added_section(report: SweepReport) -> list[str]:
    """The seeds a sequential design added: how it judges them and (unless judged apart) their verdicts."""
    pct, design, alpha = f"{report.confidence:.0%}", report.design, report.alpha
    columns = [
        *choice_columns(report.shown_family_columns),
        Column("sweep's verdict", Cell("comparison.judgement.verdict")),
        Column("added seeds", Cell("added.tests.seeds", len)),
        Column("difference", Cell("added.tests.difference", partial(formats.fmt_number, signed=True))),
        Column(f"{pct} CI", Cell("added.tests.difference", partial(formats.fmt_interval, signed=True))),
        Column("p", Cell("added.tests.p_value", formats.fmt_p)),
        Column("verdict on added seeds", Cell("added.judgement.verdict")),
    ]
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
    return blocks(
        "## Seeds added to the open rows (scripts/add_seeds.py)",
        f"{first_words}design declared before its first added seed ({DESIGN_FILE}), up to {design.horizon} "
        f"added seeds, α = {alpha:g} spent by Lan-DeMets' O'Brien-Fleming-type function with boundaries for "
        f"the looks' t statistics ({looks}: the level of a test given the whole α; Holm gives the k-th "
        "smallest of m p-values the level of α / (m − k + 1) at the same look). A verdict names the look "
        f"that gave it. {over_both}Intervals are {pct}, over the added seeds, not adjusted for the looks.",
        [] if report.judged_apart else md_table(columns, [s for s in report.family if s.added is not None]),
    )


def cost_lines(report: SweepReport) -> list[str]:
    """The lines on what resolving the open rows would take (seeds, runs, run time); none when
    nothing is open."""
    sizing = report.sizing
    if sizing is None or not (sizing.rows or sizing.runs):
        return []
    head = (
        f"What resolving the {plural(sizing.open, 'open row')} would take, if each difference is what it "
        "seems (or δ, if smaller):"
    )
    if sizing.runs:  # else every open row is at its design's horizon: nothing more to run under it
        every = ", every rate of a setting at each new seed (cross-fitting needs them)"
        seconds = sizing.seconds
        time = f"{seconds / 3600:,.1f} hours" if seconds >= 2 * 3600 else f"{seconds / 60:.0f} minutes"
        head += (
            f" {sizing.runs:,} more runs, the rows' own below and the baseline's at the same seeds"
            f"{every if sizing.every_rate else ''}, {time} of run time at these runs' median wall times; "
            "`python scripts/add_seeds.py <sweep dir>` adds them in rounds until each is resolved."
        )
    return ["", head, *map(_cost_line, sizing.rows)]


def _cost_line(row: RowSize) -> str:
    label, seeds = f"- `{setting_label(row.design)}`:", "added seeds" if row.added else "seeds"
    if row.needed is None:
        return f"{label} too few finished seeds to size it"
    stops = row.added and row.horizon is not None and row.needed > row.horizon
    beyond = f"; more than the {row.horizon} added seeds this design allows, where it stops" if stops else ""
    if row.more:
        return f"{label} {row.needed} {seeds} ({row.more} more, {plural(row.runs, 'run')} of its own){beyond}"
    if beyond:
        return f"{label} {row.needed} {seeds}{beyond}: its {row.has} are spent"
    return (
        f"{label} its {row.has} {seeds} would find this difference 80% of the time and did not: it is "
        "smaller than it seems, or this was the other 20%"
    )


def why_section(report: SweepReport) -> list[str]:
    """The `why` section: each setting that lost or failed with what its curves show, and what the
    runs show of their data."""
    explained, about_data, digits = [], [], report.metric.digits - 1
    for row in report.why:
        named = f"- **{setting_label(row.design)}**"
        if row.lost_or_failed:
            outcome = "baseline" if row.baseline else "no difference measured"  # a ladder: one per level
            if row.verdict is not None and row.difference is not None:
                outcome = f"{row.verdict}, {row.difference:+.{digits}f}"
            found = "; ".join(map(_sentence, row.about_runs)) or "nothing in its curves names a cause"
            explained.append(f"{named} ({outcome}): {found}.")
        if row.about_data:
            about_data.append(f"{named}: " + "; ".join(map(_sentence, row.about_data)) + ".")
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
            "its validation text is not its training text, and is the same kind of text (docs/diagnosis.md).",
            *about_data,
        )
    return text


def _sentence(f: Shared) -> str:
    seeds, name = "", quantity(f.example.tag)
    if len(f.seeds) == f.count:
        seeds = f"seed {f.seeds[0]}" if f.count == 1 else f"seeds {', '.join(f.seeds[:-1])} and {f.seeds[-1]}"
    example = "" if f.count == 1 and seeds else f"seed {f.seed}" if f.count == 1 else f"e.g. seed {f.seed}"
    began = f"from step {f.example.step}" if f.example.step is not None else ""
    head = ", ".join(part for part in (example, began) if part)
    where = f"`{f.example.tag}`" + (f", {WHY_PNG.format(name)}" if name else "")
    seen = f"{f.kind} in {f.count}/{f.of} runs" + (f", {seeds}" if seeds else "")
    return f"{seen} ({head + ': ' if head else ''}{f.example.evidence}; {where})"


def probe_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The depth probe's table at each of the runs' shapes; none without probe rows."""
    if not rows:
        return []
    from tinylm.probe.depth import label  # torch: only where a sweep has probe rows

    def value(key: str, row: dict[str, Any]) -> str:  # nan and inf print as such
        v = row[key]
        return f"{v:.3f}" if 0.01 <= abs(v) < 1000 else f"{v:.2e}"

    names = {"norm": "norm", "act": "act", "n_layer": "blocks", "d_model": "d_model"}
    columns = [
        *(Column(header, itemgetter(key)) for key, header in names.items()),
        *(Column(f"{label(key)}, block n", partial(value, key)) for key in SHOWN),
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


def _rates_cell(s: Setting) -> str:
    """The rates a setting's seeds chose, each with its count: `0.001 ×3, 0.003 ×2`."""
    counts = sorted(Counter(s.rates.values()).items())
    return formats.listed(f"{overrides.shown(rate)} ×{n}" for rate, n in counts)


# A design's cell at a level: `cell(setting, rung, unigram)`, `unigram` the level's unigram level where the
# ladder reads in bits/char (its levels' corpora differ), else None.
_LevelCell = Callable[[Setting, Rung, float | None], str]


def _ladder_table(
    report: SweepReport, rows: Sequence[Any], choices: str, cell: _LevelCell, *after: Column
) -> list[str]:
    """A ladder's table: a row per design (its choices: the row's attribute `choices`), a column per level
    with `cell` of the design's setting there (`—` where it has none), then the `after` columns."""
    ladder, design = report.ladder, attrgetter(choices)
    bits = ladder.in_bits and report.metric.is_loss

    def at(rung: Rung, row: Any) -> str:
        key = tuple(design(row).get(c, "—") for c in ladder.columns)
        s = next((s for s in rung.settings if s.key(ladder.columns) == key), None)
        return "—" if s is None else cell(s, rung, rung.reference["unigram"] if bits else None)

    levels = [Column(formats.level_label(ladder, rung), partial(at, rung)) for rung in ladder.rungs]
    return md_table([*choice_columns(ladder.shown_columns, design), *levels, *after], rows)


def _means_table(report: SweepReport) -> list[str]:
    """The ladder's table of each design's mean at each level (in bits/char, with its gain over unigram,
    where the ladder reads in bits), with the rates its seeds chose where the rate varies."""
    ladder, digits, per_bit = report.ladder, report.metric.digits, formats.BITS_PER_NAT

    def mean_at(s: Setting, rung: Rung, unigram: float | None) -> str:
        if s.estimate is None:
            return "—"
        mean = s.estimate.mean
        text = formats.fmt_number(mean, digits)
        if unigram is not None and math.isfinite(mean):
            text = f"{formats.fmt_number(mean * per_bit)} ({formats.fmt_gain(unigram, mean, per_bit)})"
        return text + (f" ({_rates_cell(s)})" if report.lr_varies else "")

    designs = {s.key(ladder.columns): s for rung in ladder.rungs for s in rung.settings}
    return _ladder_table(report, list(designs.values()), "choices", mean_at)


def _differences_table(report: SweepReport) -> list[str]:
    """The ladder's table of each design's difference from its level's baseline at each level (its interval,
    share of the baseline's gain over unigram where the ladder reads in bits, p and verdict), then its
    verdict across levels."""
    digits = report.metric.digits

    def difference_at(s: Setting, rung: Rung, unigram: float | None) -> str:
        c, added = report.shown_comparison(s), s.added
        if c is None or c.tests.difference is None:
            return "—"
        d, e = c.tests.difference, rung.baseline.estimate
        interval = formats.fmt_interval(d, signed=True, digits=digits)
        text = f"{formats.fmt_number(d.mean, digits, signed=True)} {interval}"
        gain = unigram - e.mean if unigram is not None and e is not None else math.nan
        if gain > 0 and math.isfinite(d.mean):
            text += f" ({d.mean / gain:+.1%} of the baseline's gain)"
        also = f"; added seeds: {added.judgement.verdict}" if added is not None and added is not c else ""
        return f"{text}, p {formats.fmt_p(c.judgement.p_adjusted)}: {c.judgement.verdict}{also}"

    across = Column(f"across {report.ladder.kind}s", Cell("verdict"))
    return _ladder_table(report, report.ladder.trends, "design", difference_at, across)


def ladder_section(report: SweepReport, ladder: Ladder) -> list[str]:
    """The ladder's section: each design's mean and its difference from the level's baseline at
    every level, the word across levels, and what the words mean."""
    pct, kind, metric, axis = f"{report.confidence:.0%}", ladder.kind, report.metric, ", ".join(ladder.axis)
    bits, across = ladder.in_bits and metric.is_loss, f"across {kind}s"
    loss = "Mean final loss" if metric.is_loss else f"Mean {metric.noun}"
    loss += " in bits/char (gain over its corpus's unigram level)" if bits else ""
    chosen = "cross-fitted rate" if report.rule is Rule.CROSS_FITTED else "rate its tuning seeds chose"
    rates = (
        f", each at its own {chosen} per {kind}. {loss} (rates chosen):"
        if report.lr_varies or kind is LadderKind.SIZE
        else f". {loss}:"
    )
    along = "size" if kind is LadderKind.SIZE else f"level (`{axis}`)"
    flips = "the losses resolved in opposite directions (not a `better`/`worse` that failures decided)"
    if kind is LadderKind.SIZE:
        words = (
            "`grows / shrinks with size`: resolved in the same direction at the smallest and largest sizes, "
            "and Welch's t test of the difference at the largest size against that at the smallest, Holm "
            "over the designs, finds a change; `holds at every size`: the same resolved verdict at every "
            f"size and no change shown; `flips`: {flips}; `changes with size`: that test finds a "
            "change, but the ends' verdicts show neither its direction nor a sign change. Loss against "
            f"parameters: {SCALE_PNG}."
        )
    else:
        holds = "`holds at every level`: the same resolved verdict at every level"
        ends = (
            f"`grows / shrinks with {axis}`: resolved in the same direction at the first and last levels, "
            "and Welch's t test of the difference at the last level against that at the first, Holm over "
            f"the designs, finds a change; `changes with {axis}`: that test finds a change, but the ends' "
            f"verdicts show neither its direction nor a sign change; {holds} and no change shown"
            if ladder.ordered
            else f"The levels have no order, so no word compares the ends; {holds}"
        )
        words = f"{ends}; `flips`: {flips}."
    lower, units = ("lower loss", "") if metric.is_loss else (metric.lower, f" {metric.units}")
    share = " and its share of the baseline's gain over unigram (which compares across corpora)"
    return blocks(
        f"## {formats.ladder_title(ladder)}",
        f"Each design against the baseline `{ladder.rungs[0].baseline.label(ladder.shown_columns)}` of its "
        f"own {along}{rates}",
        _means_table(report),
        f"Difference from the baseline in {metric.units} (< 0: {lower}), its {pct} interval"
        f"{share if bits else ''}, p (Holm) and verdict at each {kind}, and the verdict {across} "
        f"({LADDER_PNG} draws it):",
        _differences_table(report),
        f"Every {kind}'s comparisons are one family ({report.family_tests} tests, Holm, "
        f"α = {report.alpha:g}, δ = {report.min_effect:g}{units}). {words}",
    )
