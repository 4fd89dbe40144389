"""What a setting's runs show (`tinylm.analysis.diagnosis`, run by run), over the setting: each finding with
how many runs showed it (the settings table's `why`), and the report's *Why* rows for every setting that lost
to the baseline or failed (and, apart, every one whose validation text is its training text)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinylm.analysis.diagnosis import (
    BIGRAM_STALL,
    COLLAPSED,
    DESTABILISED,
    DIVERGED,
    IGNORES_CONTEXT,
    STILL_IMPROVING,
    VALIDATION_IN_TRAINING,
    Finding,
)
from tinylm.analysis.grouping import LR, Setting
from tinylm.analysis.outcome import Outcome, Verdict
from tinylm.analysis.runs import HEALTH_PREFIX, RunSummary, natural_key

# A setting that shows only these has not failed: its budget ended first, or it trained to the bigram level and
# no further (it underfits, as a strongly regularised or small model does: it learned, it did not collapse).
NOT_FAILURES = (STILL_IMPROVING, BIGRAM_STALL)
# What makes a run fail, counted apart from the losses of the runs that trained (docs/sweeps.md): it diverged,
# or stopped learning to its end (back at the unigram level, its tokens collapsed onto one vector, or its loss
# rose and stayed up while its training loss did not fall). Health episodes it trained through (saturated
# attention, starved Q/K, dead units), overfitting and a spike it came back from are findings, not failures.
FAILURES = (DIVERGED, IGNORES_CONTEXT, COLLAPSED, DESTABILISED)
# What a finding says of the data a run was measured on, not of how it trained: its validation text is, in part,
# its training text. Never a failure (its run may have trained well); the *Why* section lists it apart.
DATA_FINDINGS = (VALIDATION_IN_TRAINING,)


@dataclass(frozen=True)
class Shared:
    """A finding over a setting's runs: how many of the `of` runs with a result showed it, the steps it
    began at, and one run's finding as the example."""

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


def shared(runs: Sequence[RunSummary], findings: Mapping[Path, Sequence[Finding]]) -> list[Shared]:
    """What a setting's runs showed (`findings`: each run's `diagnose`, by its path), in the order of
    `diagnose`, each with how many runs showed it."""
    judged = [run for run in runs if run.result is not None]
    found: dict[str, list[tuple[str, Finding]]] = {}
    for run in judged:
        for finding in findings.get(run.path, ()):
            found.setdefault(finding.kind, []).append((run.seed, finding))
    return [
        Shared(kind, len(pairs), len(judged), tuple(f.step for _, f in pairs if f.step is not None), pairs[0][1],
               pairs[0][0], all(f.recovered for _, f in pairs), tuple(sorted((seed for seed, _ in pairs), key=natural_key)))
        for kind, pairs in found.items()
    ]  # fmt: skip


def run_failure(findings: Sequence[Finding]) -> Finding | None:
    """The finding that makes one run fail (`FAILURES`, lasting to its end), or None: what `fails` counts.
    `failed` is the wider test of a setting's *Why* row."""
    return next((f for f in findings if f.kind in FAILURES and not f.recovered), None)


def failed(findings: Sequence[Shared]) -> bool:
    """Whether any finding is a failure: not only a budget that ended first, nor only episodes every run
    recovered from."""
    return any(f.kind not in NOT_FAILURES + DATA_FINDINGS and not f.recovered for f in findings)


@dataclass(frozen=True)
class WhyRow:
    """One setting explained: its design (the choices that name it), its verdict and difference (None for a
    baseline or a setting with no comparison), and the findings its judged runs share, as the report states
    them. `setting` is what the figures read its runs' curves from; report.json holds the rest."""

    setting: Setting
    design: dict[str, Any]
    verdict: Verdict | None
    difference: float | None
    baseline: bool
    findings: tuple[Shared, ...]
    # Whether it lost (`worse`) or its runs failed: what the *Why* list explains; a row that did neither is
    # there for what its data shows (`about_data`) alone. Derived from the fields above, never stored.
    lost_or_failed: bool = field(init=False)

    def __post_init__(self) -> None:
        lost = self.verdict is not None and self.verdict.outcome is Outcome.WORSE
        # A frozen row's derived field, set once as it is built.
        object.__setattr__(self, "lost_or_failed", not self.about_data or lost or failed(self.findings))

    # The two below select from `findings` by kind (DATA_FINDINGS) and compute nothing.
    @property
    def about_runs(self) -> tuple[Shared, ...]:
        """What its runs' curves show: how they trained."""
        return tuple(f for f in self.findings if f.kind not in DATA_FINDINGS)

    @property
    def about_data(self) -> tuple[Shared, ...]:
        """What its runs show of the data they were measured on."""
        return tuple(f for f in self.findings if f.kind in DATA_FINDINGS)


def judged_runs(setting: Setting) -> list[RunSummary]:
    """The runs a family row's results come from: at each seed's chosen rate when the rate was tuned; before
    any seed is judged, the tuning seeds' runs at the rate they chose (the settings table's row at that rate),
    not every rate's."""
    if setting.rates:
        return [run for run in setting.runs if setting.rates.get(run.seed) == run.choices.get(LR)]
    if setting.rate is not None:
        return [run for run in setting.runs if run.choices.get(LR) == setting.rate]
    return setting.runs


def why_rows(
    settings: Sequence[Setting], columns: Sequence[str], findings: Mapping[Path, Sequence[Finding]],
    baselines: Sequence[Setting],
) -> list[WhyRow]:  # fmt: skip
    """The settings (the family's, or the settings table's when there is no family) that lost (a `worse`
    verdict), whose judged runs failed, or whose data is not what a loss is read against (`DATA_FINDINGS`),
    with what they showed; a budget that ended first is left out of a setting that failed for another
    reason."""
    rows = []
    for setting in settings:
        found = shared(judged_runs(setting), findings)
        c = setting.answer  # a tuned row's: its judging seeds'
        lost = c is not None and c.judgement.verdict.outcome is Outcome.WORSE
        if not lost and not failed(found) and not any(f.kind in DATA_FINDINGS for f in found):
            continue
        stated = tuple(f for f in found if not (f.kind == STILL_IMPROVING and failed(found)))
        compared = c is not None and c.tests.difference is not None
        rows.append(WhyRow(
            setting, {k: setting.choices.get(k, "—") for k in columns}, c.judgement.verdict if compared else None,
            c.tests.difference.mean if compared else None, any(setting is b for b in baselines), stated,
        ))  # fmt: skip
    return rows


def still_learning(
    family: Sequence[Setting], base: Setting | None, findings: Mapping[Path, Sequence[Finding]]
) -> tuple[dict[str, Any], ...]:
    """The family rows (their choices) whose answer pairs only runs that were `still improving` when their
    budget ended, on both sides: the budget stopped them before they stopped learning, so the difference is
    one at this budget. None on a ladder (`base` None: its Answer states no difference)."""
    if base is None:
        return ()
    rows = []
    for setting in family:
        c = setting.answer
        if setting is base or c is None or c.tests.difference is None:
            continue
        paired = [
            run for side in (setting, base) for run in judged_runs(side) if run.seed in c.tests.seeds and run.result is not None
        ]  # fmt: skip
        if paired and all(
            any(f.kind == STILL_IMPROVING for f in findings.get(run.path, ())) for run in paired
        ):
            rows.append(setting.choices)
    return tuple(rows)


def quantity(tag: str | None) -> str | None:
    """`training_health/token_spread/block_12` -> `token_spread`; None for any other tag."""
    return tag.split("/")[1] if tag and tag.startswith(HEALTH_PREFIX) else None


def why_figure(name: str) -> str:
    """The file the health quantity `name`'s why figure is drawn to, in the sweep directory."""
    return f"why_{name}.png"
