"""What a setting's runs show over the setting: each finding with how many runs showed it (the `why` column),
and the *Why* rows of the settings that lost, failed, or whose validation text is their training text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinylm.analysis.diagnosis import DATA_FINDINGS, FAILURES, NOT_FAILURES, STILL_IMPROVING, Finding
from tinylm.analysis.grouping import LR, Setting
from tinylm.analysis.outcome import Outcome, Verdict
from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary, natural_key

# Each run's findings, by its path.
Findings = Mapping[Path, Sequence[Finding]]


@dataclass(frozen=True)
class Shared:
    """A finding over a setting's runs: how many of the `of` runs with a result showed it, the steps it began
    at, one run's finding as the example, and the seeds of the runs that showed it."""

    kind: str
    count: int
    of: int
    steps: tuple[int, ...]
    example: Finding
    seed: str  # the example's run
    recovered: bool = False  # every run's episode ended before the run did
    seeds: tuple[str, ...] = ()  # each run's that showed it, `count` of them

    def describe(self) -> str:
        began = ""
        if self.steps:
            low, high = min(self.steps), max(self.steps)
            began = f", from step {low}" if low == high else f", from step {low}-{high}"
        if self.recovered:  # one run: the step it last held; several: only that each recovered
            began += f" to {self.example.until}, recovered" if self.count == 1 else ", recovered"
        return f"{self.kind} ({self.count}/{self.of}{began})"


def shared(runs: Sequence[RunSummary], findings: Findings) -> list[Shared]:
    """What a setting's runs showed (`findings`: each run's `diagnose`, by path), in `diagnose`'s order."""
    judged = [run for run in runs if run.result is not None]
    pairs = [(run.seed, finding) for run in judged for finding in findings.get(run.path, ())]
    rows = []
    for kind in dict.fromkeys(finding.kind for _, finding in pairs):
        seeds, shown = zip(*((seed, finding) for seed, finding in pairs if finding.kind == kind), strict=True)
        steps = tuple(finding.step for finding in shown if finding.step is not None)
        recovered, ordered = all(f.recovered for f in shown), tuple(sorted(seeds, key=natural_key))
        rows.append(Shared(kind, len(shown), len(judged), steps, shown[0], seeds[0], recovered, ordered))
    return rows


def run_failure(findings: Sequence[Finding]) -> Finding | None:
    """The finding that makes one run fail (`FAILURES`, lasting to its end), or None: what `fails` counts."""
    return next((f for f in findings if f.kind in FAILURES and not f.recovered), None)


def failed(findings: Sequence[Shared]) -> bool:
    """Whether a setting's findings include a failure: not only a budget that ended or episodes it ended."""
    return any(f.kind not in NOT_FAILURES + DATA_FINDINGS and not f.recovered for f in findings)


@dataclass(frozen=True)
class WhyRow:
    """One setting explained: its design (the choices that name it), its verdict and difference (None without
    a comparison), whether it is a baseline, and the findings its judged runs share."""

    setting: Setting
    design: dict[str, Any]
    verdict: Verdict | None
    difference: float | None
    baseline: bool
    findings: tuple[Shared, ...]

    @property
    def lost_or_failed(self) -> bool:
        """Whether it lost (`worse`) or its runs failed; else it is listed for what its data shows alone."""
        lost = self.verdict is not None and self.verdict.outcome is Outcome.WORSE
        return not self.about_data or lost or failed(self.findings)

    @property
    def about_runs(self) -> tuple[Shared, ...]:
        """Its findings of how its runs trained."""
        return tuple(f for f in self.findings if f.kind not in DATA_FINDINGS)

    @property
    def about_data(self) -> tuple[Shared, ...]:
        """Its findings of the data its runs were measured on."""
        return tuple(f for f in self.findings if f.kind in DATA_FINDINGS)


def judged_runs(setting: Setting) -> list[RunSummary]:
    """The runs a row's results come from: each seed's at its chosen rate when tuned (before any seed is
    judged, the tuning seeds' at the rate they chose)."""
    if setting.rates:
        return [run for run in setting.runs if setting.rates.get(run.seed) == run.choices.get(LR)]
    if setting.rate is not None:
        return [run for run in setting.runs if run.choices.get(LR) == setting.rate]
    return setting.runs


def why_rows(
    settings: Sequence[Setting], columns: Sequence[str], findings: Findings, baselines: Sequence[Setting]
) -> list[WhyRow]:
    """The settings that lost, whose judged runs failed, or whose data shows `DATA_FINDINGS`, with what they
    showed (a budget that ended first left out where something else failed them)."""
    rows = []
    for setting in settings:
        found = shared(judged_runs(setting), findings)
        c = setting.answer  # a tuned row's: its judging seeds'
        lost = c is not None and c.judgement.verdict.outcome is Outcome.WORSE
        if not lost and not failed(found) and not any(f.kind in DATA_FINDINGS for f in found):
            continue
        stated = tuple(f for f in found if not (f.kind == STILL_IMPROVING and failed(found)))
        design = {k: setting.choices.get(k, "—") for k in columns}
        compared = c is not None and c.tests.difference is not None
        verdict, difference = (c.judgement.verdict, c.tests.difference.mean) if compared else (None, None)
        rows.append(
            WhyRow(setting, design, verdict, difference, any(setting is b for b in baselines), stated)
        )
    return rows


def still_learning(
    family: Sequence[Setting], base: Setting | None, findings: Findings
) -> tuple[dict[str, Any], ...]:
    """The family rows (their choices) whose answer pairs only runs `still improving` at their end, on both
    sides: a difference at this budget. None on a ladder (`base` None)."""
    if base is None:
        return ()
    rows = []
    for setting in family:
        c = setting.answer
        if setting is base or c is None or c.tests.difference is None:
            continue
        sides = [*judged_runs(setting), *judged_runs(base)]
        paired = [run for run in sides if run.seed in c.tests.seeds and run.result is not None]
        if paired and all(any(f.kind == STILL_IMPROVING for f in findings.get(r.path, ())) for r in paired):
            rows.append(setting.choices)
    return tuple(rows)


def quantity(tag: str | None) -> str | None:
    """`training_health/token_spread/block_12` -> `token_spread`; None for any other tag."""
    return tag.split("/")[1] if tag and tag.startswith(HEALTH_PREFIX) else None


def why_figure(name: str) -> str:
    """The file the health quantity `name`'s why figure is drawn to, in the sweep directory."""
    return f"why_{name}.png"
