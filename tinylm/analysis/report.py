"""A sweep, compared: which setting is better, by how much, and how sure that is (docs/sweeps.md).
`build_report` reads, judges and explains the runs in one pass, and builds the `SweepReport` once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, NamedTuple

from tinylm.analysis import grouping, multiplier, why
from tinylm.analysis.diagnosis import Finding, diagnose
from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.analysis.grouping import LR, Rule, Rules, Setting
from tinylm.analysis.judging import judge_family
from tinylm.analysis.ladder import Ladder, change_family
from tinylm.analysis.multiplier import Multipliers, MultiplierTrend
from tinylm.analysis.options import against_design, ladder_axis, named_baseline, parse_choices
from tinylm.analysis.runs import (
    DESIGN_CHOICES,
    FINAL_LOSS,
    Metric,
    ReportError,
    RunSummary,
    natural_key,
    parse_metric,
    read_runs,
    shared_reference,
)
from tinylm.analysis.sequential_design import Design, look_families, look_tests, own_seeds, read_design
from tinylm.analysis.sizing import Sizing, size_open_rows
from tinylm.analysis.verdicts import ALPHA, Comparison, Family, family_size, judged_families
from tinylm.analysis.why import Shared, WhyRow
from tinylm.probe.sweep_shapes import probe_rows


@dataclass(frozen=True)
class SweepReport:
    """A sweep's report, assembled once by `build_report`: every table and verdict it states."""

    sweep_dir: Path
    runs: list[RunSummary]  # ranked: runs with a result by it, then the rest in job order
    columns: list[str]  # the choices shown per run: the design choices, then every override that varies
    common: dict[str, Any]  # overrides every run shares (a path given absolute: `portable`)
    settings: list[Setting]  # ranked by mean
    setting_columns: list[str]  # the columns that tell settings apart (all but seed)
    tuned: list[Setting] = field(default_factory=list)  # each setting at its tuned rate (lr varies)
    # The family's baseline: among `tuned` where the rate is tuned, else among `settings`; None without one,
    # and on a ladder, where each level has its own (`baselines`).
    family_baseline: Setting | None = None
    confidence: float = 0.95
    alpha: float = ALPHA
    min_effect: float = MIN_EFFECT
    baseline_source: str | None = None  # where the baseline was named: --baseline or the runs' config
    design: Design | None = None
    reference: dict[str, float] | None = None  # the levels of the runs' validation split, when they share one
    axis: list[str] = field(default_factory=list)  # a ladder's: the family is judged level by level along it
    ladder: Ladder | None = None
    findings: dict[Path, list[Finding]] = field(default_factory=dict)  # each run's diagnosis, by its path
    setting_why: list[tuple[Shared, ...]] = field(default_factory=list)  # the settings table's why, by row
    why: list[WhyRow] = field(default_factory=list)  # each setting that lost or failed, and what it shows
    still_learning: tuple[dict[str, Any], ...] = ()  # rows (choices) judged on still-improving runs only
    sizing: Sizing | None = None  # what resolving the open rows would take
    probe: list[dict[str, Any]] = field(default_factory=list)  # the depth probe at each of the runs' shapes
    rule: Rule = Rule.TUNED_THEN_JUDGED  # how rates were tuned and failures counted
    metric: Metric = FINAL_LOSS  # a run's result: its final loss, or its steps or seconds to a level
    look_levels: tuple[float | None, ...] = ()  # each later look's judging level (None: judges nothing)
    families: tuple[Family, ...] = ()  # each family of tests adjusted together (`families_of`)
    # Each comparison's compute multipliers (docs/sweeps.md), and on a ladder over ordered levels each
    # design's step multiplier across them: read from the runs' curves, so stored with the report.
    costs: tuple[Multipliers, ...] = ()
    cost_trends: tuple[MultiplierTrend, ...] = ()

    @cached_property
    def lr_varies(self) -> bool:
        """Whether each setting is judged at its own tuned learning rate (the rate is swept
        and is not the ladder's axis)."""
        return rate_tuned(self.setting_columns, self.axis)

    @cached_property
    def judged_apart(self) -> bool:
        """The rate is tuned on the sweep's seeds and judged on others."""
        return self.lr_varies and self.rule is not Rule.CROSS_FITTED

    @cached_property
    def family(self) -> list[Setting]:
        """The settings judged together: each at its tuned rate when the rate varies."""
        return self.tuned if self.lr_varies else self.settings

    @cached_property
    def family_columns(self) -> list[str]:
        """The columns that tell the family's settings apart (the rate left out when it
        is tuned)."""
        return family_columns_of(self.setting_columns, self.lr_varies)

    @cached_property
    def baselines(self) -> list[Setting]:
        """Every baseline: each ladder level's, else the family's one (none without)."""
        return baselines_of(self.ladder, self.family_baseline)

    @cached_property
    def shown_family_columns(self) -> list[str]:
        """The family columns whose value varies: those the tables show."""
        return grouping.varying(self.family_columns, [s.choices for s in self.family])

    @cached_property
    def swept_columns(self) -> list[str]:
        """The setting columns whose value varies across the sweep's settings."""
        return grouping.varying(self.setting_columns, [s.choices for s in self.settings])

    @cached_property
    def shown_comparisons(self) -> list[Comparison]:
        """The comparison the report shows for each setting of the family that has one."""
        return [c for s in self.family if (c := self.shown_comparison(s)) is not None]

    @cached_property
    def family_tests(self) -> int:
        """The tests of difference in the family the report shows: what Holm divides α by."""
        return family_size(self.shown_comparisons)

    @cached_property
    def equivalence_tests(self) -> int:
        """How many of the shown comparisons ran an equivalence test (TOST)."""
        return sum(c.tests.p_equivalence is not None for c in self.shown_comparisons)

    @cached_property
    def baseline_seeds(self) -> int:
        """The family baseline's seeds its row counts (the sweep's own)."""
        own = own_seeds(self.design)
        counted = self.family_baseline.results if self.family_baseline is not None else {}
        return sum(self.judged_apart or own is None or seed in own for seed in counted)

    @cached_property
    def run_statuses(self) -> dict[str, int]:
        """How many runs ended in each status (completed, diverged, …)."""
        return dict(Counter(run.status for run in self.runs))

    @cached_property
    def most_seeds(self) -> int:
        """The most seeds with a result any setting has."""
        return max((len(s.results) for s in self.settings), default=0)

    @cached_property
    def corpora(self) -> list[tuple[str, dict[str, float]]]:
        """Each corpus's reference levels where settings have their own, by the choices naming it (`data`)."""
        if self.reference is not None or not self.settings or any(s.reference is None for s in self.settings):
            return []
        groups: dict[tuple[tuple[str, float], ...], list[Setting]] = {}
        for s in self.settings:
            groups.setdefault(tuple(sorted(s.reference.items())), []).append(s)
        columns = self.swept_columns
        constant = [
            c for c in columns if all(len({s.choices.get(c) for s in g}) == 1 for g in groups.values())
        ]
        named = grouping.varying(constant, [g[0].choices for g in groups.values()]) or list(columns)
        return [(grouping.setting_label(g[0].choices, named), g[0].reference) for g in groups.values()]

    @cached_property
    def baseline_example(self) -> str | None:
        """Without a baseline, a `--baseline` value that gives this report its verdicts: the family's setting
        the sweep ran first (a grid runs its values in the order given, the control first as a rule), named
        by the choices that vary, and checked to name it alone as the flag would. None where a baseline is
        named, the family has one setting, or no setting can be named so."""
        if self.family_baseline is not None or self.ladder is not None or len(self.family) < 2:
            return None
        columns = self.shown_family_columns
        in_job_order = sorted((s for s in self.family if s.runs), key=_first_job)
        for setting in in_job_order:
            # As the flag takes it: a float's str reads back as itself, a value with a comma cannot
            text = ",".join(f"{c}={setting.choices[c]}" for c in columns)
            try:
                if grouping.pick_baseline(self.family, parse_choices(text), self.family_columns) is setting:
                    return text
            except ReportError:  # it cannot be named so, or it has no result to judge by
                continue
        return None

    def costs_of(self, setting: Setting) -> Multipliers | None:
        """`setting`'s multipliers against its baseline (None: not compared, or no curves were read)."""
        return multiplier.costs_of(self.costs, setting)

    def shown_comparison(self, setting: Setting) -> Comparison | None:
        """The comparison the report shows for `setting`: where seeds are judged apart,
        its answer (added seeds' where its own left it open), else its own."""
        return setting.answer if self.judged_apart else setting.comparison

    def baseline_of(self, setting: Setting) -> Setting | None:
        """The baseline `setting` is compared with: its ladder level's, else the family's."""
        if self.ladder is None:
            return self.family_baseline
        rungs = [rung for rung in self.ladder.rungs if any(s is setting for s in rung.settings)]
        return rungs[0].baseline if rungs else None


def families_of(
    pairs: Sequence[tuple[Setting, Setting]],
    settings: list[Setting],
    columns: Sequence[str],
    rules: Rules,
    design: Design | None,
    ladder: Ladder | None,
    judged_apart: bool,
) -> tuple[Family, ...]:
    """Each family of tests a judged report adjusts apart (Holm) over its compared rows (`pairs`: each row and
    its baseline): the sweep's own (none where its seeds only chose rates: `judged_apart`), each later look's
    of a sequential design (the rows the sweep left open, on the added seeds, as `judge_added` forms them),
    and a ladder's tests of change across levels."""
    own = [s.comparison.tests for s, _ in pairs if s.comparison is not None]
    looks: tuple[Family, ...] = ()
    if design is not None and len(design.looks) > 1:
        bases = {s.key(columns): baseline.key(columns) for s, baseline in pairs if s.added is not None}
        looks = look_families(look_tests(bases, settings, columns, rules, design), rules.alpha)
    change = change_family(ladder, rules.alpha) if ladder is not None else None
    return (
        *(() if judged_apart else judged_families(own, rules.alpha)),
        *looks,
        *([change] if change is not None else []),
    )


def rate_tuned(setting_columns: Sequence[str], axis: Sequence[str]) -> bool:
    """The rate varies and is tuned per setting: a rate that is the ladder's axis is a level."""
    return LR in setting_columns and LR not in axis


def _first_job(setting: Setting) -> list[Any]:
    """Where a setting's first run stands in the sweep's job order."""
    return min(natural_key(run.name) for run in setting.runs)


def _by_result(run: RunSummary) -> tuple[bool, float]:
    """Runs ranked by result, diverged (inf) after the finite, then those without one."""
    return run.result is None, run.result or 0.0


def family_columns_of(setting_columns: Sequence[str], lr_varies: bool) -> list[str]:
    """The columns that tell a family's settings apart: all but the rate when it is tuned."""
    return [c for c in setting_columns if c != LR] if lr_varies else list(setting_columns)


def baselines_of(ladder: Ladder | None, base: Setting | None) -> list[Setting]:
    """Each level's baseline on a ladder, else `base` alone (none without one)."""
    return [rung.baseline for rung in ladder.rungs] if ladder else [base] if base else []


class Scope(NamedTuple):
    """What a sweep is judged on: the columns telling settings apart, the baseline's choices, a
    ladder's axis, the rules and the sequential design."""

    setting_columns: list[str]  # the columns that tell settings apart (all but seed)
    wanted: dict[str, Any] | None  # the baseline's choices (None: no verdicts)
    axis: list[str]  # a ladder's; [] for none
    rules: Rules
    design: Design | None


def build_report(
    sweep_dir: str | Path,
    baseline: str | None = None,
    confidence: float = 0.95,
    curve: str | None = None,
    min_effect: float | None = None,
    ladder: str | None = None,
    probe: bool = False,
    metric: str | None = None,
) -> SweepReport:
    """The report of a sweep; `probe`: the depth probe at the runs' shapes too (torch, seconds); `metric`:
    a run's result (`--metric`). A ReportError where an option contradicts the sweep's sequential design."""
    sweep_dir = Path(sweep_dir)
    measured = parse_metric(metric)
    runs = read_runs(sweep_dir, curve, measured)
    design = read_design(sweep_dir)
    if design is not None and not measured.is_loss:
        raise against_design(f"--metric {measured.flag}", "to resolve its final losses", "for them")
    named, source = named_baseline(baseline, runs, design)
    wanted = parse_choices(named) if named is not None else None
    if design is not None and min_effect is not None and min_effect != design.min_effect:
        within = f"to resolve comparisons within ±{design.min_effect:g}"
        raise against_design(f"--min-effect {min_effect:g}", within, "at that δ")
    if design is not None and baseline is not None and wanted != parse_choices(design.baseline):
        raise against_design(f"--baseline {baseline}", f"against {design.baseline}", "against that baseline")
    # The choices shown per run: the design choices, then every override that varies; and those all share.
    others = sorted({k for r in runs for k in r.choices} - set(DESIGN_CHOICES))
    varied = [k for k in others if len({r.choices.get(k) for r in runs}) > 1]
    common = {k: portable(runs[0].choices[k]) for k in others if k not in varied and k in runs[0].choices}
    columns = list(DESIGN_CHOICES) + varied
    setting_columns = [c for c in columns if c != "seed"]
    axis = ladder_axis(ladder, runs, setting_columns, wanted, design.ladder if design else None)
    if design is not None and design.ladder is not None and tuple(axis) != design.ladder:
        along = f"along {', '.join(design.ladder)}" if design.ladder else "without a ladder"
        asked = f"--ladder {ladder}" if ladder else f"the experiment's ladder ({', '.join(axis)})"
        raise against_design(asked, along, "for the families they were judged in")
    delta = design.min_effect if design else (measured.min_effect if min_effect is None else min_effect)
    rules = Rules(confidence, design.alpha if design else ALPHA, delta, rate_tuned(setting_columns, axis))
    findings = {run.path: diagnose(run, run.reference) for run in runs}
    judged = judge_sweep(runs, findings, Scope(setting_columns, wanted, axis, rules, design))
    return SweepReport(
        sweep_dir,
        sorted(runs, key=_by_result),
        columns,
        common,
        setting_columns=setting_columns,
        confidence=confidence,
        alpha=rules.alpha,
        min_effect=rules.min_effect,
        baseline_source=source,
        design=design,
        reference=shared_reference(runs),
        axis=axis,
        findings=findings,
        metric=measured,
        probe=probe_rows(run.model for run in runs if run.model) if probe else [],
        settings=judged.settings,
        # Stored apart by whether the rate is tuned (report.json's format): `family` reads them back as one.
        tuned=judged.family if rules.lr_varies else [],
        family_baseline=judged.baseline,
        ladder=judged.ladder,
        families=judged.families,
        setting_why=judged.setting_why,
        why=judged.why,
        still_learning=judged.still_learning,
        sizing=judged.sizing,
        look_levels=design.look_levels(rules.alpha) if design is not None else (),
        costs=judged.costs,
        cost_trends=judged.cost_trends,
    )


def portable(value: Any) -> Any:
    """An override as a reader on any machine recognises it: a path the command gave absolute names a
    directory of the machine that ran it, so its file's name stands for it (`…/input.txt`); a relative path
    is as the command gave it (`data.path=input.txt`), and any other value is itself."""
    if isinstance(value, list):  # data.files='[a.txt,/data/b.txt]'
        return [portable(item) for item in value]
    if not isinstance(value, str):
        return value
    path = PureWindowsPath(value) if PureWindowsPath(value).drive else PurePosixPath(value)
    return f"…/{path.name}" if path.is_absolute() and path.name else value


@dataclass(frozen=True)
class JudgedSweep:
    """What judging a sweep's settings gives its report (`judge_sweep`), each quantity once."""

    settings: list[Setting]  # every setting (at each rate it ran, where the rate is tuned)
    family: list[Setting]  # the rows judged together: each setting at its tuned rate where the rate is tuned
    baseline: Setting | None  # the family's (None without one, or on a ladder: each level has its own)
    ladder: Ladder | None
    families: tuple[Family, ...]  # the families of tests adjusted apart (`families_of`)
    setting_why: list[tuple[Shared, ...]]  # what each of `settings`' runs showed
    why: list[WhyRow]
    still_learning: tuple[dict[str, Any], ...]  # rows judged on still-improving runs only
    sizing: Sizing | None
    costs: tuple[Multipliers, ...]  # each compared row's compute multipliers against its baseline
    cost_trends: tuple[MultiplierTrend, ...]  # on a ladder over ordered levels, each design's across them


def judge_sweep(runs: Sequence[RunSummary], findings: dict[Path, list[Finding]], scope: Scope) -> JudgedSweep:
    """The sweep's runs grouped into settings, the family judged against the scope's baseline (level by
    level on a ladder), and what explains, sizes and costs each row."""
    rules, design, tuned = scope.rules, scope.design, scope.rules.lr_varies
    columns = family_columns_of(scope.setting_columns, tuned)
    failed = {path for path, found in findings.items() if why.run_failure(found) is not None}
    settings = grouping.group_settings(runs, scope.setting_columns, rules.confidence, failed)
    family = (
        grouping.tuned_settings(settings, columns, rules.confidence, own_seeds(design)) if tuned else settings
    )
    base = ladder = None
    pairs: list[tuple[Setting, Setting]] = []
    families: tuple[Family, ...] = ()
    if scope.wanted is not None:
        named = {k: v for k, v in scope.wanted.items() if not (tuned and k == LR)}
        judged = judge_family(family, named, columns, rules, scope.axis, design, settings)
        family, base, ladder, pairs = judged.rows, judged.baseline, judged.ladder, judged.pairs
        # A report built now judges apart wherever the rate is tuned (its rule: Rule.TUNED_THEN_JUDGED).
        families = families_of(pairs, settings, columns, rules, design, ladder, judged_apart=tuned)
    explained = (family, columns) if len(family) > 1 else (settings, scope.setting_columns)
    shown = settings if tuned else family  # the settings table: where the rate is not tuned, the judged rows
    costs = multiplier.compared_costs(pairs, rules.confidence)
    return JudgedSweep(
        settings=shown,
        family=family,
        baseline=base,
        ladder=ladder,
        families=families,
        setting_why=[tuple(why.shared(s.runs, findings)) for s in shown],
        why=why.why_rows(*explained, findings, baselines_of(ladder, base)),
        still_learning=why.still_learning(family, base, findings),  # none on a ladder (no one baseline)
        sizing=size_open_rows(family, base, columns, rules, design.horizon if design else None),
        costs=costs,
        cost_trends=tuple(multiplier.costs_across(ladder, costs, rules.alpha)) if ladder else (),
    )
