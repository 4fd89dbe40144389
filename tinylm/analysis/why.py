"""What a setting's runs show: the `why` column, the *Why* rows, and the rows judged on still-improving runs
only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinylm.analysis.diagnosis import DATA_FINDINGS, FAILURES, NOT_FAILURES, STILL_IMPROVING, Finding
from tinylm.analysis.grouping import LR, Setting
from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary, natural_key
from tinylm.analysis.verdicts import Outcome, Verdict

Findings = Mapping[Path, Sequence[Finding]]  # each run's findings, by its path
Settings = Sequence[Setting]


@dataclass(frozen=True)
class Shared:
    """A finding over a setting's runs: how many showed it, from which steps, and one run's example."""

    kind: str
    count: int  # how many of the `of` runs with a result showed it, from `steps`
    of: int
    steps: tuple[int, ...]
    example: Finding
    seed: str  # the example's run
    recovered: bool = False  # every run's episode ended before the run did
    seeds: tuple[str, ...] = ()  # each run's that showed it, `count` of them

    def describe(self) -> str:
        """`dead units (3/5, from step 200-400)`: the finding as the report prints it."""
        began = ""
        if self.steps:
            low, high = min(self.steps), max(self.steps)
            began = f", from step {low}" if low == high else f", from step {low}-{high}"
        if self.recovered:  # one run: the step it last held; several: only that each recovered
            began += f" to {self.example.until}, recovered" if self.count == 1 else ", recovered"
        return f"{self.kind} ({self.count}/{self.of}{began})"


def shared(runs: Sequence[RunSummary], findings: Findings) -> list[Shared]:
    """What a setting's runs showed, in `diagnose`'s order."""
    judged = [run for run in runs if run.result is not None]
    pairs = [(run.seed, finding) for run in judged for finding in findings.get(run.path, ())]
    rows = []
    for kind in dict.fromkeys(finding.kind for _, finding in pairs):
        seeds, shown = zip(*((seed, finding) for seed, finding in pairs if finding.kind == kind), strict=True)
        steps = tuple(finding.step for finding in shown if finding.step is not None)
        recovered, ordered = all(f.until is not None for f in shown), tuple(sorted(seeds, key=natural_key))
        rows.append(Shared(kind, len(shown), len(judged), steps, shown[0], seeds[0], recovered, ordered))
    return rows


def run_failure(findings: Sequence[Finding]) -> Finding | None:
    """The finding that makes one run fail (`FAILURES`, lasting to its end), or None: what `fails` counts."""
    return next((f for f in findings if f.kind in FAILURES and f.until is None), None)


def failed(findings: Sequence[Shared]) -> bool:
    """Whether a setting's findings include a failure: not only a budget that ended or episodes it ended."""
    return any(f.kind not in NOT_FAILURES + DATA_FINDINGS and not f.recovered for f in findings)


@dataclass(frozen=True)
class WhyRow:
    """One setting explained: its verdict and difference, and the findings its runs share."""

    setting: Setting
    design: dict[str, Any]
    verdict: Verdict | None  # and its difference: None without a comparison
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
        """The findings about the runs' training (not about their data)."""
        return tuple(f for f in self.findings if f.kind not in DATA_FINDINGS)

    @property
    def about_data(self) -> tuple[Shared, ...]:
        """The findings about the data the runs were measured on."""
        return tuple(f for f in self.findings if f.kind in DATA_FINDINGS)


def judged_runs(setting: Setting) -> list[RunSummary]:
    """The runs a row's results come from: when tuned, each seed's at its chosen rate (or tuning seeds')."""
    if setting.rates:
        return [run for run in setting.runs if setting.rates.get(run.seed) == run.choices.get(LR)]
    if setting.rate is not None:
        return [run for run in setting.runs if run.choices.get(LR) == setting.rate]
    return setting.runs


def why_rows(settings: Settings, columns: list[str], findings: Findings, baselines: Settings) -> list[WhyRow]:
    """The settings that lost, failed or show `DATA_FINDINGS` (`still improving` left out if they failed)."""
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
        baseline = any(setting is b for b in baselines)
        rows.append(WhyRow(setting, design, verdict, difference, baseline, stated))
    return rows


def still_learning(family: Settings, base: Setting | None, findings: Findings) -> tuple[dict[str, Any], ...]:
    """The family rows (their choices) whose answer pairs only runs `still improving` at their end."""
    rows = []
    for setting in family:
        c = setting.answer
        if base is None or setting is base or c is None or c.tests.difference is None:
            continue
        sides = [*judged_runs(setting), *judged_runs(base)]
        paired = [run for run in sides if run.seed in c.tests.seeds and run.result is not None]
        if paired and all(any(f.kind == STILL_IMPROVING for f in findings.get(r.path, ())) for r in paired):
            rows.append(setting.choices)
    return tuple(rows)


def quantity(tag: str | None) -> str | None:
    """The health quantity a tag logs (`training_health/token_spread/block_12` -> `token_spread`);
    None for another tag."""
    return tag.split("/")[1] if tag and tag.startswith(HEALTH_PREFIX) else None
