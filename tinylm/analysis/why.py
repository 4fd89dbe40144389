"""The report's *Why* section: for every setting that lost to the baseline or failed, what its runs' curves
show (`tinylm.analysis.diagnosis`), in a sentence or two per setting, with a figure of each health curve
involved, drawn beside the baseline's."""

from __future__ import annotations

from pathlib import Path

from tinylm.analysis.diagnosis import NOT_FAILURES, Shared, failed, shared
from tinylm.analysis.outcome import Outcome
from tinylm.analysis.plots import plot_health
from tinylm.analysis.report import REPORT_PNG, SweepReport
from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary
from tinylm.analysis.settings import LR, Setting


def judged_runs(setting: Setting) -> list[RunSummary]:
    """The runs a family row's results come from: at each seed's chosen rate when the rate was tuned."""
    if not setting.rates:
        return setting.runs
    return [run for run in setting.runs if setting.rates.get(run.seed) == run.choices.get(LR)]


def _rows(report: SweepReport) -> tuple[list[Setting], list[str]]:
    """The settings explained and the columns that name them: the family's, or the settings table's own
    when there is no family."""
    if len(report.family) > 1:
        return report.family, report.family_columns
    return report.settings, report.setting_columns


def explained(report: SweepReport) -> list[tuple[Setting, list[Shared]]]:
    """The settings that lost (a `worse` verdict) or whose judged runs failed, with what they showed."""
    found = []
    for setting in _rows(report)[0]:
        findings = shared(judged_runs(setting), report.findings)
        lost = setting.comparison is not None and setting.comparison.verdict.outcome is Outcome.WORSE
        if lost or failed(findings):
            found.append((setting, findings))
    return found


def why_section(
    report: SweepReport, rows: list[tuple[Setting, list[Shared]]], figures: dict[str, Path]
) -> list[str]:
    """Markdown lines for `rows` (`explained`); `figures`: the health figure of each quantity, as `draw_why`
    wrote them."""
    if not rows:
        return []
    columns = _rows(report)[1]
    text = [
        "## Why",
        "",
        "What the curves of each setting that lost or failed show (its judged runs; thresholds in "
        "docs/diagnosis.md). Loss findings are in "
        f"{REPORT_PNG} (the reference levels are its dashed lines); health findings in the figure named.",
        "",
    ]
    for setting, findings in rows:
        c = setting.comparison
        if c is not None and c.difference:
            outcome = f"{c.verdict}, {c.difference.mean:+.3f}"
        else:  # a baseline (a ladder has one per level) is named as one, not as a failure
            outcome = "baseline" if any(setting is b for b in report.baselines) else "failed"
        if not findings:
            text += [f"- **{setting.label(columns)}** ({outcome}): nothing in its curves names a cause.", ""]
            continue
        sentences = []
        for f in findings:
            if f.kind in NOT_FAILURES and failed(findings):
                continue
            example = f.example
            began = f", from step {example.step}" if example.step is not None else ""
            figure = figures.get(_quantity(example.tag)) if example.tag else None
            where = f"`{example.tag}`" + (f", {figure.name}" if figure else "")
            sentences.append(
                f"{f.kind} in {f.count}/{f.of} runs (seed {f.seed}{began}: {example.evidence}; {where})"
            )
        text += [f"- **{setting.label(columns)}** ({outcome}): " + "; ".join(sentences) + ".", ""]
    return text


def _quantity(tag: str) -> str | None:
    """`training_health/token_spread/block_12` -> `token_spread`; None for any other tag."""
    return tag.split("/")[1] if tag.startswith(HEALTH_PREFIX) else None


def baseline_of(report: SweepReport, setting: Setting) -> Setting | None:
    """The setting `setting` is judged against: the family's baseline, or in a scale ladder that of its size."""
    if report.ladder is None:
        return report.family_baseline
    return next(
        (rung.baseline for rung in report.ladder.rungs if any(s is setting for s in rung.settings)), None
    )


def why_figures(report: SweepReport, rows: list[tuple[Setting, list[Shared]]]) -> dict[str, dict[str, list]]:
    """The curves of `why_<quantity>.png` for every health quantity a finding of `rows` (`explained`) names:
    that tag in each explained setting's runs, and the same block's in the runs of the baseline it is judged
    against; by quantity, then by the label of the runs' setting."""
    columns = _rows(report)[1]
    wanted: dict[str, dict[str, list]] = {}
    for setting, findings in rows:
        for f in findings:
            quantity = _quantity(f.example.tag or "")
            if not quantity:
                continue
            curves = wanted.setdefault(quantity, {})
            label = setting.label(columns)
            curves.pop(f"{label} (baseline)", None)  # a baseline explained in its own right: drawn once
            curves[label] = [run.health.get(f.example.tag, []) for run in judged_runs(setting)]
            base = baseline_of(report, setting)
            if base is not None and base is not setting and base.label(columns) not in curves:
                curves.setdefault(
                    f"{base.label(columns)} (baseline)",
                    [run.health.get(f.example.tag, []) for run in judged_runs(base)],
                )
    return wanted


def why_path(directory: Path, quantity: str) -> Path:
    return directory / f"why_{quantity}.png"


def draw_why(report: SweepReport, figures: dict[str, dict[str, list]]) -> list[Path]:
    """Draws each of `why_figures` into the sweep directory."""
    return [
        plot_health(
            curves,
            why_path(report.sweep_dir, quantity),
            f"{HEALTH_PREFIX}{quantity}",
            f"{report.sweep_dir.name}: {quantity}, the runs diagnosed and their baselines",
        )
        for quantity, curves in figures.items()
    ]
