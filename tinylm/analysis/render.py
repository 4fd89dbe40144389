"""report.md from the report value: the answer, the settings, the family against its baseline and every run
(the sections after them: render_sections.py; report.json: report_json.py; the figures: plots.py). Reads a
`SweepReport` as `build_report` built it, and computes nothing."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from tinylm.analysis.estimates import Comparison
from tinylm.analysis.formats import fmt_interval, fmt_number, fmt_p, fmt_wall_time, md_table
from tinylm.analysis.grouping import (
    CROSS_FITTED,
    TUNED_THEN_JUDGED,
    Setting,
    gain_over_unigram,
    only,
    setting_label,
    varying,
)
from tinylm.analysis.metric import STEPS_TO
from tinylm.analysis.render_answer import answer_section, ladder_title
from tinylm.analysis.render_sections import added_section, cost_lines
from tinylm.analysis.report import SweepReport
from tinylm.analysis.verdicts import family_size
from tinylm.analysis.why import Shared
from tinylm.overrides import shown


def _settings_rows(
    settings: Sequence[Setting],
    columns: Sequence[str],
    baseline: Setting | None,
    gains: str | None = None,
    why: Sequence[Sequence[Shared]] = (),
    rule: str = TUNED_THEN_JUDGED,
    digits: int = 4,
) -> list[list]:
    """`gains`: "nats" adds each setting's gain over the unigram level its runs share; "bits" adds its mean
    and that gain in bits/char, for settings on different corpora (their nats are not comparable); `digits`:
    the decimals of its mean, sd and interval (the metric's)."""
    rows = []
    for rank, (s, found) in enumerate(zip(settings, why or [()] * len(settings), strict=True), start=1):
        e = s.estimate
        rows.append([
            rank if e is not None else "—",
            *(shown(s.choices.get(c, "—")) for c in columns),
            len(s.results),
            fmt_number(e.mean if e else None, digits),
            fmt_number(e.sd if e else None, digits),
            fmt_interval(e, digits=digits),
            s.fails if rule == CROSS_FITTED else fails_cell(s),
            s.without_result,
            "; ".join(f.describe() for f in found) or "—",
            "baseline" if s is baseline else "",
        ])  # fmt: skip
        if gains is not None:
            scale, reference = 1.0 if gains == "nats" else 1 / math.log(2), s.reference
            finite = e is not None and math.isfinite(e.mean) and reference is not None
            gain = gain_over_unigram(e.mean, reference["unigram"]) * scale if finite else None
            rows[-1][-4:-4] = [fmt_number(gain, signed=True)]
            if gains == "bits":
                rows[-1][-5:-5] = [fmt_number(e.mean * scale if finite else None)]
    return rows


def fails_cell(s: Setting) -> str:
    """`1/4 [0.01, 0.81]`: its runs that failed, of those with a result, and the exact interval of the rate."""
    interval = s.fail_interval
    return f"{s.fails}/{len(s.results)}" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


def gains_in(report: SweepReport) -> str | None:
    """How the report reads losses against the reference levels: "nats" when every run shares them, "bits"
    when its settings are on corpora of their own (nats are not comparable between vocabularies), else None
    (and None when it compares steps or seconds to a level, not losses)."""
    if not report.metric.is_loss:
        return None
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
    judged_apart = report.judged_apart
    digits = report.metric.digits
    for s in report.family:
        choices = [shown(s.choices.get(col, "—")) for col in columns]
        mean = fmt_number(s.estimate.mean if s.estimate else None, digits)
        tuned = (
            ([shown(s.rate), ", ".join(s.tuned_on) or "—", mean] if judged_apart else [rates_cell(s), mean])
            if report.lr_varies
            else []
        )
        if s is base:
            judged = len(s.results) if judged_apart else len(only(s, report.own_seeds).results)
            rows.append([*choices, *tuned, judged, "baseline", *[""] * 9])
            continue
        c = s.answer if judged_apart else s.comparison
        if c is None:
            continue
        d, pw, dv = c.difference, c.power, c.failures
        rows.append([
            *choices, *tuned, _seeds_cell(s, c), fmt_number(d.mean if d else None, digits, signed=True),
            fmt_interval(d, signed=True, digits=digits), fmt_p(c.p_adjusted), fmt_p(c.p_equivalence_adjusted),
            c.verdict, dv.describe() if dv else f"0/{len(c.seeds)} vs 0/{len(c.seeds)}" if c.seeds else "—",
            fmt_number(pw.sd if pw else d.sd if judged_apart and d else None, digits),
            fmt_number(pw.resolvable if pw else None, digits - 1), pw.seeds_for_min_effect if pw else "—",
            fmt_number(c.eval_se, 4) if c.eval_se is not None else "—",
        ])  # fmt: skip
    return rows


def _family_section(report: SweepReport) -> list[str]:
    pct = f"{report.confidence:.0%}"
    columns, base = report.shown_family_columns, report.family_baseline
    text = []
    if report.judged_apart:
        text += [
            "## Each setting at the rate its tuning seeds chose",
            "",
            "Each setting's rate is chosen on its tuning seeds, the sweep's own: of the rates where the fewest of "
            "them failed, the one with the lowest mean over those that trained (`tuned on`: the seeds). It is "
            "judged only on other seeds run at that rate, which `scripts/add_seeds.py` adds: no seed both "
            "chooses a rate and is judged at it, which would flatter a setting whose optimum is broad. `mean`: "
            "over the judging seeds that trained.",
            "",
        ]
    elif report.lr_varies:
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
        f"of (setting − baseline) over the seeds both finished, with its {pct} interval; < 0 is "
        f"{report.metric.lower}.",
        "",
    ]
    judged_apart = report.judged_apart
    tuned = (
        (["rate", "tuned on", "mean"] if judged_apart else ["rates chosen", "mean"])
        if report.lr_varies
        else []
    )
    header = [*columns, *tuned, "seeds", "difference", f"{pct} CI", "p (Holm)", "equivalence p (Holm)",
              "verdict", "diverged" if report.rule == CROSS_FITTED else "fails", "paired sd", "resolves (80%)",
              f"seeds for ±{report.min_effect:g}", "eval SE"]  # fmt: skip
    text += [*md_table(header, _family_rows(report)), ""]
    text += [*_family_notes(report), ""]
    if report.design is not None and len(report.design.looks) > 1:
        text += added_section(report)
    return text


def _family_notes(report: SweepReport) -> list[str]:
    shown_rows = [s.answer if report.judged_apart else s.comparison for s in report.family]
    comparisons = [c for c in shown_rows if c is not None]
    tests = family_size(comparisons)
    equivalence = sum(c.p_equivalence is not None for c in comparisons)
    delta, units = f"{report.min_effect:g}", report.metric.units
    cross_fitted = report.rule == CROSS_FITTED
    test = (
        "t on the cross-fitted differences, with the standard error of the jackknife over seeds of the whole "
        "choose-then-compare procedure; `paired sd` is √n times it"
        if report.lr_varies and cross_fitted
        else "paired t over the seeds both sides trained"
        if not cross_fitted
        else "paired t"
    )
    failed = "diverged" if cross_fitted else "failed"
    notes = [
        f"One family: {tests} test{'s' if tests != 1 else ''} of difference ({test}; for {failed} seeds, "
        f"McNemar's exact test), Holm-adjusted so that the chance of any false `better`/`worse` in the table "
        f"is at most α = {report.alpha:g}; {equivalence} test{'s' if equivalence != 1 else ''} of equivalence "
        f"(two one-sided tests within ±δ, δ = {delta} {units}, `--min-effect`), Holm-adjusted apart. `better, but by "
        f"less than {delta}`: both. A difference below {1e-6:g} on every seed is `identical on every seed`. "
        f"`resolves (80%)`: the smallest |difference| ({units}) these seeds find with 80% power at α/{max(1, tests)}; "
        f"`seeds for ±{delta}`: the seeds a difference of δ would need. `eval SE`: the standard error the "
        "final evaluation's finite set of windows adds to the difference (part of the seed interval already).",
    ]
    notes += cost_lines(report)
    return notes


def markdown(report: SweepReport, sections: Sequence[str] = ()) -> str:
    """The report as markdown: settings with intervals, the family of comparisons, `sections` (lines of
    markdown from elsewhere, e.g. the depth probe), every run."""
    pct = f"{report.confidence:.0%}"
    metric = report.metric
    cols = varying(report.setting_columns, [s.choices for s in report.settings])
    title = f"# Sweep report: {report.sweep_dir}" + ("" if metric.is_loss else f", {metric.noun}")
    text = [title, "", *answer_section(report)]
    n_seeds = max((len(s.results) for s in report.settings), default=0)
    compared = (
        f"Final validation loss (nats/char) of {len(report.runs)} runs in {len(report.settings)} settings, "
        f"up to {n_seeds} seed{'s' if n_seeds != 1 else ''} each: the mean over the final evaluation's windows "
        "(every validation window, or up to 4 per window a short run trained on; the runs table says how many), "
        "or the last validation for a run without one. "
        if metric.is_loss
        else f"{metric.noun.capitalize()} (lower is better) of {len(report.runs)} runs in {len(report.settings)} "
        f"settings, up to {n_seeds} seed{'s' if n_seeds != 1 else ''} each: the "
        + ("optimizer step" if metric.kind == STEPS_TO else "seconds of training (validations included)")
        + f" at which a run's periodic validation loss first reached {metric.level:g} nats/char (`{metric.tag}` "
        "in its metrics.json; `--metric`). "
    )
    failing = (
        "diverged or collapsed"
        if metric.is_loss
        else f"diverged, collapsed or never reached {metric.level:g}"
    )
    text += [
        compared
        + f"Intervals are {pct} confidence intervals for the mean (Student t over seeds); "
        + (
            "a diverged run counts as the worst result, a failed or unfinished one as none."
            if report.rule == CROSS_FITTED
            else f"a run that {failing} fails (docs/sweeps.md): `fails` counts it, with the exact "
            f"{pct} interval of the rate, and the means are over the runs that "
            + ("trained" if metric.is_loss else "reached it")
            + "; a crashed or unfinished run has no result."
        ),
        "",
    ]
    shared = {c: report.runs[0].choices.get(c, "—") for c in report.columns if c not in _run_columns(report)}
    shared |= report.common
    if shared:
        text += ["Shared by every run: " + " ".join(f"`{k}={shown(v)}`" for k, v in shared.items()), ""]

    text += ["## Settings", ""]
    fails = "diverged" if report.rule == CROSS_FITTED else "fails"
    header = ["rank", *cols, "seeds", "mean", "sd", f"{pct} CI", fails, "no result", "why", "note"]
    gains = gains_in(report)
    if gains == "bits":
        header[-4:-4] = ["bits/char", "gain over unigram (bits/char)"]
    elif gains == "nats":
        header[-4:-4] = ["gain over unigram"]
    text += [
        *md_table(
            header,
            _settings_rows(
                report.settings, cols, report.baseline, gains, report.setting_why, report.rule, metric.digits
            ),
        ),
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
    columns, metric = _run_columns(report), report.metric
    header = ["rank", "run", *columns, "params", "final val loss", "evaluated on", "best val loss"]
    if metric.tag is not None:  # what ranks the runs, beside their losses
        header[-3:-3] = [metric.noun]
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
            fmt_wall_time(run.wall_time_s), steps, status if len(status) <= 120 else status[:117] + "...",
        ])  # fmt: skip
        if metric.tag is not None:
            reached = run.targets.get(metric.tag)
            watched = run.status == "completed" and run.watches(metric.level)
            missing = "not reached" if watched else "not watched" if run.status == "completed" else "—"
            cell = fmt_number(reached, metric.digits) if reached is not None else missing
            rows[-1][3 + len(columns) : 3 + len(columns)] = [cell]  # after params
    return md_table(header, rows)
