"""A report rendered: report.md's sections and tables, and report.json (the figures are drawn by
`tinylm.analysis.plots`). Reads a `SweepReport` as `build_report` assembled it, and changes nothing."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinylm.analysis.diagnosis import Finding, why_cell
from tinylm.analysis.estimates import Comparison, Estimate
from tinylm.analysis.ladder import Ladder
from tinylm.analysis.report import DESIGN_FILE, REPORT_PNG, SweepReport
from tinylm.analysis.settings import Setting, only, setting_label, varying
from tinylm.analysis.sweep_probe import SHOWN
from tinylm.analysis.why import quantity, why_path
from tinylm.overrides import shown


def fmt_number(value: float | None, digits: int = 4, signed: bool = False) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "diverged" if value == math.inf else str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def fmt_interval(e: Estimate | None, signed: bool = False) -> str:
    if e is None or not e.has_interval:
        return "—"
    return f"[{fmt_number(e.low, 4, signed)}, {fmt_number(e.high, 4, signed)}]"


def _fmt_wall_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _settings_rows(
    settings: Sequence[Setting],
    columns: Sequence[str],
    baseline: Setting | None,
    gains: str | None = None,
    findings: dict[Path, list[Finding]] | None = None,
) -> list[list]:
    """`gains`: "nats" adds each setting's gain over the unigram level its runs share; "bits" adds its mean
    and that gain in bits/char, for settings on different corpora (their nats are not comparable)."""
    rows = []
    for rank, s in enumerate(settings, start=1):
        e = s.estimate
        rows.append([
            rank if e is not None else "—",
            *(shown(s.choices.get(c, "—")) for c in columns),
            len(s.results),
            fmt_number(e.mean if e else None),
            fmt_number(e.sd if e else None),
            fmt_interval(e),
            s.diverged,
            s.without_result,
            why_cell(s.runs, findings or {}),
            "baseline" if s is baseline else "",
        ])  # fmt: skip
        if gains is not None:
            scale, reference = 1.0 if gains == "nats" else 1 / math.log(2), s.reference
            finite = e is not None and math.isfinite(e.mean) and reference is not None
            gain = (reference["unigram"] - e.mean) * scale if finite else None
            rows[-1][-4:-4] = [fmt_number(gain, signed=True)]
            if gains == "bits":
                rows[-1][-5:-5] = [fmt_number(e.mean * scale if finite else None)]
    return rows


def gains_in(report: SweepReport) -> str | None:
    """How the report reads losses against the reference levels: "nats" when every run shares them, "bits"
    when its settings are on corpora of their own (nats are not comparable between vocabularies), else None."""
    if report.reference is not None:
        return "nats"
    references = [s.reference for s in report.settings]
    return "bits" if references and None not in references else None


def _reference_lines(report: SweepReport, cols: Sequence[str]) -> list[str]:
    """The reference levels the settings' gains are measured from: the one split they share, or one row per
    corpus, named by the choices that tell the corpora apart."""
    if report.reference is not None:
        levels = report.reference
        return [
            f"Reference levels of the validation split, estimated on the training split (nats/char): uniform "
            f"(ln V) {levels['uniform']:.4f}, unigram {levels['unigram']:.4f}, bigram {levels['bigram']:.4f}. "
            "A loss at the unigram level has learned the characters' frequencies and nothing of their "
            "context; `gain over unigram` is how far below it a setting got.",
            "",
        ]
    corpora: dict[tuple[tuple[str, float], ...], list[Setting]] = {}
    for s in report.settings:
        corpora.setdefault(tuple(sorted(s.reference.items())), []).append(s)
    # The choices that hold within each corpus and differ between them (e.g. `data`) name it.
    constant = [
        c for c in cols if all(len({s.choices.get(c) for s in group}) == 1 for group in corpora.values())
    ]
    named = varying(constant, [group[0].choices for group in corpora.values()]) or list(cols)
    rows = [
        [setting_label(group[0].choices, named), *(f"{dict(levels)[k]:.4f}" for k in ("uniform", "unigram", "bigram")),
         *(f"{dict(levels)[k] / math.log(2):.3f}" for k in ("uniform", "unigram", "bigram"))]
        for levels, group in corpora.items()
    ]  # fmt: skip
    return [
        f"The settings are on {len(corpora)} corpora, each with its own reference levels (validation split, "
        "estimated on the training split). Their nats are not comparable between vocabularies, so the table "
        "also reads each mean in bits/char and as `gain over unigram` in bits/char: how far below its own "
        "corpus's unigram level (the characters' frequencies, nothing of their context) a setting got.",
        "",
        *md_table(
            [
                "corpus",
                "uniform (ln V)",
                "unigram",
                "bigram",
                "uniform bits/char",
                "unigram bits/char",
                "bigram bits/char",
            ],
            rows,
        ),
        "",
    ]


def fmt_p(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}"


def _seeds_cell(s: Setting, c: Comparison) -> str:
    text = str(len(c.seeds))
    if c.unmatched:
        text += f" (unpaired, not used: seed {', '.join(c.unmatched)})"
    if s.missing:
        text += f" (no run at the chosen rate: seed {', '.join(s.missing)})"
    return text


def rates_cell(s: Setting) -> str:
    counts = Counter(s.rates.values())
    return ", ".join(f"{shown(rate)} ×{n}" for rate, n in sorted(counts.items())) or "—"


def _family_rows(report: SweepReport) -> list[list]:
    rows = []
    base, columns = report.family_baseline, report.shown_family_columns
    for s in report.family:
        choices = [shown(s.choices.get(col, "—")) for col in columns]
        tuned = (
            [rates_cell(s), fmt_number(s.estimate.mean if s.estimate else None)] if report.lr_varies else []
        )
        if s is base:
            judged = len(only(s, report.own_seeds).results)  # the seeds the rows are judged on
            rows.append([*choices, *tuned, judged, "baseline", *[""] * 9])
            continue
        c = s.comparison
        if c is None:
            continue
        d, pw, dv = c.difference, c.power, c.divergence
        rows.append([
            *choices, *tuned, _seeds_cell(s, c), fmt_number(d.mean if d else None, signed=True),
            fmt_interval(d, signed=True), fmt_p(c.p_adjusted), fmt_p(c.p_equivalence_adjusted), c.verdict,
            dv.describe() if dv else f"0/{len(c.seeds)} vs 0/{len(c.seeds)}", fmt_number(pw.sd if pw else None),
            fmt_number(pw.resolvable if pw else None, 3), pw.seeds_for_min_effect if pw else "—",
            fmt_number(c.eval_se, 4) if c.eval_se is not None else "—",
        ])  # fmt: skip
    return rows


def _answer_section(report: SweepReport) -> list[str]:
    """The answer first: a sentence per comparison (its verdict, difference, interval and seeds), then what is
    still open and the command that resolves it; the methods are below, with the tables."""
    if report.ladder is not None:
        return _ladder_answer(report)
    base = report.family_baseline
    if base is None or len(report.family) < 2:
        return []
    named = report.shown_family_columns
    rows = [s for s in report.family if s is not base and s.answer is not None]
    pct = f"{report.confidence:.0%}"
    lines = ["## Answer", ""]
    for s in rows:
        c = s.answer
        d = c.difference
        source = "added " if c is s.added else ""
        numbers = (
            f"difference {fmt_number(d.mean, signed=True)} nats/char, {pct} CI {fmt_interval(d, signed=True)}"
            if d is not None
            else "no difference measured"
        )
        lines.append(
            f"- `{s.label(named)}` against `{base.label(named)}`: **{c.verdict}**; {numbers}, "
            f"{len(c.seeds)} {source}seed{'s' if len(c.seeds) != 1 else ''}"
        )
    added = any(s.added is not None for s in rows)
    lines += [
        "",
        f"Lower is better. Family-wise (Holm): the chance of any false `better`/`worse` among these is at most "
        f"α = {report.alpha:g}"
        + (" for the sweep's own seeds and α for the added seeds'" if added else "")
        + ". The tables and the methods are below.",
    ]
    still_open = [s for s in rows if not s.answer.resolved]
    if still_open:
        lines.append(
            f"Still open: {len(still_open)} of {len(rows)}. `python scripts/add_seeds.py {report.sweep_dir}` adds "
            "seeds to them in rounds until each is resolved (*What resolving … would take*, below, sizes it)."
        )
    return [*lines, ""]


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
    return [
        *lines,
        "",
        f"Lower is better. Every {ladder.noun}'s comparisons are one family (Holm): the chance of any false "
        f"`better`/`worse` among them is at most α = {report.alpha:g}. The tables and the methods are below.",
        "",
    ]


def _family_section(report: SweepReport) -> list[str]:
    pct = f"{report.confidence:.0%}"
    columns, base = report.shown_family_columns, report.family_baseline
    text = []
    if report.lr_varies:
        text += [
            "## Each setting at a cross-fitted learning rate",
            "",
            "Each seed's result is taken at the rate with the lowest mean over the setting's *other* seeds "
            "(leave one seed out), so no seed both chooses the rate and is judged at it: picking the best "
            "rate on the runs it is judged on flatters a setting whose optimum is broad. `rates chosen` "
            "counts the seeds judged at each rate.",
            "",
        ]
    if report.ladder is not None:
        return [
            *text,
            f"The baseline is judged at each {report.ladder.noun}: see *{ladder_title(report.ladder)}* below.",
            "",
        ]
    if base is None:
        return [
            *text,
            "No verdicts: no baseline was named. The best setting is not used as one: it is picked from the "
            "same runs it would be judged on, which tilts every other row toward `worse`. Name it with "
            "`--baseline key=value[,key=value]`, or with `baseline:` in the experiment preset.",
            "",
        ]
    if not report.lr_varies:
        text += [f"## Against the baseline `{base.label(columns)}`", ""]
    text += [
        f"Baseline `{base.label(columns)}` (named by {report.baseline_source}). Paired seed by seed: the mean "
        f"of (setting − baseline) over the seeds both finished, with its {pct} interval; < 0 is a lower loss.",
        "",
    ]
    tuned = ["rates chosen", "mean"] if report.lr_varies else []
    header = [*columns, *tuned, "seeds", "difference", f"{pct} CI", "p (Holm)", "equivalence p (Holm)",
              "verdict", "diverged", "paired sd", "resolves (80%)", f"seeds for ±{report.min_effect:g}",
              "eval SE"]  # fmt: skip
    text += [*md_table(header, _family_rows(report)), ""]
    text += [*_family_notes(report), ""]
    if report.design is not None and len(report.design.looks) > 1:
        text += _added_section(report)
    return text


def _added_section(report: SweepReport) -> list[str]:
    design, pct = report.design, f"{report.confidence:.0%}"
    columns = report.shown_family_columns
    first = design.first_seeds
    plan = design.added_plan()
    looks = ", ".join(
        f"look {number + 2}: {len(design.added_seeds(number + 1))} added seeds, "
        + ("judging nothing" if look is None else f"level {look.level(report.alpha):.2g}")
        for number, look in enumerate(plan)
    )
    rows = []
    for s in report.family:
        c = s.added
        if c is None:
            continue
        d = c.difference
        rows.append([
            *(shown(s.choices.get(col, "—")) for col in columns), s.comparison.verdict, len(c.seeds),
            fmt_number(d.mean if d else None, signed=True), fmt_interval(d, signed=True), fmt_p(c.p_value),
            c.verdict,
        ])  # fmt: skip
    rate = " at the rate its sweep seeds chose" if report.lr_varies else ""
    return [
        "## Seeds added to the open rows (scripts/add_seeds.py)",
        "",
        f"The rows above are judged on the sweep's own {len(first)} seeds ({', '.join(first)}), as its report "
        f"judged them, and keep those verdicts. The seeds added since to the rows left open (and to the "
        f"baseline) are a second experiment, judged here on the added seeds alone{rate}: a group-sequential "
        f"design declared before its first added seed ({DESIGN_FILE}), up to {design.max_seeds - len(first)} "
        f"added seeds, α = {report.alpha:g} spent by Lan-DeMets' O'Brien-Fleming-type function with the "
        f"looks' correlation ({looks}: the level of a test given the whole α; Holm gives the k-th smallest "
        "of m p-values the level of α / (m − k + 1) at the same look). A verdict names the "
        "look that gave it. Each experiment's chance of any false `better`/`worse` is at most α, so a row's "
        f"answer (the sweep's verdict, or where it was open the added seeds') errs with chance at most "
        f"2α = {2 * report.alpha:g} over both. Intervals are {pct}, over the added seeds, not adjusted for "
        "the looks.",
        "",
        *md_table(
            [
                *columns,
                "sweep's verdict",
                "added seeds",
                "difference",
                f"{pct} CI",
                "p",
                "verdict on added seeds",
            ],
            rows,
        ),
        "",
    ]


def _family_notes(report: SweepReport) -> list[str]:
    comparisons = [s.comparison for s in report.family if s.comparison is not None]
    tests = sum(c.p_value is not None for c in comparisons) + sum(
        c.divergence is not None for c in comparisons
    )
    equivalence = sum(c.p_equivalence is not None for c in comparisons)
    delta = f"{report.min_effect:g}"
    test = (
        "t on the cross-fitted differences, with the standard error of the jackknife over seeds of the whole "
        "choose-then-compare procedure; `paired sd` is √n times it"
        if report.lr_varies
        else "paired t"
    )
    notes = [
        f"One family: {tests} test{'s' if tests != 1 else ''} of difference ({test}; for diverged seeds, "
        f"McNemar's exact test), Holm-adjusted so that the chance of any false `better`/`worse` in the table "
        f"is at most α = {report.alpha:g}; {equivalence} test{'s' if equivalence != 1 else ''} of equivalence "
        f"(two one-sided tests within ±δ, δ = {delta} nats/char, `--min-effect`), Holm-adjusted apart. `better, but by "
        f"less than {delta}`: both. A difference below {1e-6:g} on every seed is `identical on every seed`. "
        f"`resolves (80%)`: the smallest |difference| these seeds find with 80% power at α/{max(1, tests)}; "
        f"`seeds for ±{delta}`: the seeds a difference of δ would need. `eval SE`: the standard error the "
        "final evaluation's finite set of windows adds to the difference (part of the seed interval already).",
    ]
    notes += _cost_lines(report)
    return notes


def _cost_lines(report: SweepReport) -> list[str]:
    """What resolving the open rows would take (`report.sizing`)."""
    sizing = report.sizing
    if sizing is None:
        return []
    lines = []
    for row in sizing.rows:
        label = setting_label(row.design, list(row.design))
        seeds = "added seeds" if row.added else "seeds"
        beyond = (
            f"; more than the {row.horizon} added seeds this design allows, where it stops"
            if row.added and row.horizon is not None and row.needed is not None and row.needed > row.horizon
            else ""
        )
        if row.needed is None:
            lines.append(f"- `{label}`: too few finished seeds to size it")
        elif row.more:
            runs = f"{row.runs} run{'s' if row.runs != 1 else ''}"
            lines.append(f"- `{label}`: {row.needed} {seeds} ({row.more} more, {runs}){beyond}")
        elif beyond:
            lines.append(f"- `{label}`: {row.needed} {seeds}{beyond}: its {row.has} are spent")
        else:
            lines.append(
                f"- `{label}`: its {row.has} {seeds} would find this difference 80% of the time and did not: it "
                "is smaller than it seems, or this was the other 20%"
            )
    if sizing.runs:
        per_seed = (
            ", every rate of a setting at each new seed (cross-fitting needs them)"
            if sizing.every_rate
            else ""
        )
        count = sizing.open
        lines.insert(0, (
            f"What resolving the {count} open row{'s' if count != 1 else ''} would take, if each difference is "
            f"what it seems (or δ, if smaller): {sizing.runs:,} more runs with the baseline's{per_seed}, "
            f"{_fmt_duration(sizing.seconds)} of run time at these runs' median wall times; "
            "`python scripts/add_seeds.py <sweep dir>` adds them in rounds until each is resolved."
        ))  # fmt: skip
    return ["", *lines] if lines else []


def _fmt_duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:,.1f} hours" if hours >= 2 else f"{seconds / 60:.0f} minutes"


def markdown(report: SweepReport, sections: Sequence[str] = ()) -> str:
    """The report as markdown: settings with intervals, the family of comparisons, `sections` (lines of
    markdown from elsewhere, e.g. the depth probe), every run."""
    pct = f"{report.confidence:.0%}"
    cols = varying(report.setting_columns, [s.choices for s in report.settings])
    text = [f"# Sweep report: {report.sweep_dir}", "", *_answer_section(report)]
    n_seeds = max((len(s.results) for s in report.settings), default=0)
    text += [
        f"Final validation loss (nats/char) of {len(report.runs)} runs in {len(report.settings)} settings, "
        f"up to {n_seeds} seed{'s' if n_seeds != 1 else ''} each: the mean over the final evaluation's windows "
        "(every validation window, or up to 4 per window a short run trained on; the runs table says how many), "
        "or the last validation for a run without one. "
        f"Intervals are {pct} confidence intervals for the mean (Student t over seeds); a diverged run counts "
        "as the worst result, a failed or unfinished one as none.",
        "",
    ]
    shared = {c: report.runs[0].choices.get(c, "—") for c in report.columns if c not in _run_columns(report)}
    shared |= report.common
    if shared:
        text += ["Shared by every run: " + " ".join(f"`{k}={shown(v)}`" for k, v in shared.items()), ""]

    text += ["## Settings", ""]
    header = ["rank", *cols, "seeds", "mean", "sd", f"{pct} CI", "diverged", "no result", "why", "note"]
    gains = gains_in(report)
    if gains == "bits":
        header[-4:-4] = ["bits/char", "gain over unigram (bits/char)"]
    elif gains == "nats":
        header[-4:-4] = ["gain over unigram"]
    text += [
        *md_table(header, _settings_rows(report.settings, cols, report.baseline, gains, report.findings)),
        "",
        *(_reference_lines(report, cols) if gains else []),
        "`why`: what the runs' curves show, with how many runs showed it and the step it began "
        "(tinylm/analysis/diagnosis.py; docs/diagnosis.md has each threshold and its reason).",
        "",
    ]
    if len(report.family) > 1:
        text += _family_section(report)

    text += [*sections, "## Runs", "", *_runs_table(report), ""]
    counts = Counter(run.status for run in report.runs)
    text.append(
        f"{len(report.runs)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items())
        + ". bits/char = nats / ln 2; params without position embeddings; tokens/s and wall time depend on what "
        "else ran on the machine."
    )  # fmt: skip
    return "\n".join(text) + "\n"


def _run_columns(report: SweepReport) -> list[str]:
    return varying(report.columns, [run.choices for run in report.runs])


def _runs_table(report: SweepReport) -> list[str]:
    columns = _run_columns(report)
    header = ["rank", "run", *columns, "params", "final val loss", "evaluated on", "best val loss"]
    header += ["bits/char"]
    header += ["tokens/s", "wall time", "steps", "status"]
    rows, rank = [], 0
    for run in report.runs:
        ranked = run.result is not None
        rank += ranked
        steps = "—" if run.steps is None else f"{run.steps}" + (f"/{run.max_steps}" if run.max_steps else "")
        status = run.status if not run.error else f"{run.status}: {run.error}"
        rows.append([
            rank if ranked else "—", run.name, *(shown(run.choices.get(c, "—")) for c in columns),
            "—" if run.params is None else f"{run.params:,}", fmt_number(run.final_val_loss), run.evaluated, fmt_number(run.best_val_loss),
            fmt_number(run.final_bpc, 3), "—" if run.tokens_per_s is None else f"{run.tokens_per_s:,.0f}",
            _fmt_wall_time(run.wall_time_s), steps, status if len(status) <= 120 else status[:117] + "...",
        ])  # fmt: skip
    return md_table(header, rows)


def why_section(report: SweepReport) -> list[str]:
    """The *Why* section: a sentence or two per row of `report.why`, naming the figure of each health tag."""
    if not report.why:
        return []
    text = [
        "## Why",
        "",
        "What the curves of each setting that lost or failed show (its judged runs; thresholds in "
        "docs/diagnosis.md). Loss findings are in "
        f"{REPORT_PNG} (the reference levels are its dashed lines); health findings in the figure named.",
        "",
    ]
    for row in report.why:
        label = setting_label(row.design, list(row.design))
        if row.verdict is not None and row.difference is not None:
            outcome = f"{row.verdict}, {row.difference:+.3f}"
        else:  # a baseline (a ladder has one per level) is named as one, not as a failure
            outcome = "baseline" if row.baseline else "failed"
        if not row.findings:
            text += [f"- **{label}** ({outcome}): nothing in its curves names a cause.", ""]
            continue
        sentences = []
        for f in row.findings:
            example = f.example
            began = f", from step {example.step}" if example.step is not None else ""
            name = quantity(example.tag)
            where = f"`{example.tag}`" + (f", {why_path(Path(), name).name}" if name else "")
            sentences.append(
                f"{f.kind} in {f.count}/{f.of} runs (seed {f.seed}{began}: {example.evidence}; {where})"
            )
        text += [f"- **{label}** ({outcome}): " + "; ".join(sentences) + ".", ""]
    return text


def probe_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The depth probe's section: one line per shape the runs trained."""
    if not rows:
        return []
    from tinylm.probe.depth import label

    header = ["norm", "act", "blocks", "d_model", *(f"{label(key)}, block n" for key in SHOWN)]
    lines = [
        "## At initialisation: the depth probe at this sweep's shapes",
        "",
        "Each placement's fresh blocks (no embeddings, no head), initialised as its runs were, one forward and "
        "backward pass on `randn` input over the runs' context with causal attention, loss a fixed random "
        "projection, float64; measured after the last block n (docs/probe.md). Token spread near 0 means the "
        "tokens have collapsed onto one vector; ‖∇W_q‖ and ‖∇W_k‖ orders of magnitude below ‖∇W_v‖ mean "
        "queries and keys get no gradient to learn from.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in rows:
        shape = [row["norm"], row["act"], str(row["n_layer"]), str(row["d_model"])]
        cells = [*shape, *(_probe_value(row[key]) for key in SHOWN)]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _probe_value(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.3f}" if 0.01 <= abs(value) < 1000 else f"{value:.2e}"
