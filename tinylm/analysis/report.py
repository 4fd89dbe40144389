"""A sweep, compared: which setting is better, by how much, and how sure that is (docs/sweeps.md).

`build_report` is the one pass, in the order the modules go: read the runs as typed records (runs.py), group
the settings that differ only in their seed (grouping.py), estimate and test (estimates.py), judge the family
against its baseline or level by level (verdicts.py, ladder.py), judge a sequential design's added seeds apart
(sequential_design.py, sequential.py), diagnose each run and explain each setting (diagnosis.py, why.py), size what
is still open (sizing.py); then the `SweepReport` is built once from those parts, and nothing changes it.
report.md, report.json and the figures are rendered from it (render.py, report_json.py, plots.py). A run's
result is its final validation loss, or by `--metric` the steps or seconds at which it reached a level
(metric.py). A run that diverged or collapsed (or, by steps or seconds, never reached the level) fails: a
result (+inf, the worst) counted apart; a crashed or unfinished one is none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinylm.analysis.diagnosis import Finding, diagnose
from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.analysis.grouping import (
    CROSS_FITTED,
    LR,
    TUNED_THEN_JUDGED,
    Rules,
    Setting,
    group_settings,
    judge_families,
    pick_baseline,
    tuned_settings,
    varying,
)
from tinylm.analysis.ladder import SCALE_KEY, Ladder, judge_ladder
from tinylm.analysis.metric import FINAL_LOSS, LOSS, STEPS_TO, TIME_TO, Metric
from tinylm.analysis.runs import (
    DESIGN_CHOICES,
    ReportError,
    RunSummary,
    read_runs,
    shared_reference,
)
from tinylm.analysis.sequential_design import Design, baseline_keys, read_design, with_added_seeds
from tinylm.analysis.sizing import Sizing, size_open_rows
from tinylm.analysis.sweep_probe import probe_rows
from tinylm.analysis.verdicts import ALPHA
from tinylm.analysis.why import Shared, WhyRow, run_failure, shared, still_learning, why_rows
from tinylm.layout import DESIGN_FILE
from tinylm.overrides import OverrideError, parse

REPORT_MD = "report.md"
# Where a report that a new one would read differently from is kept (sweep_report.keep_previous).
PREVIOUS_REPORTS = "previous_reports"
REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
SENSITIVITY_PNG = "lr_sensitivity.png"


@dataclass(frozen=True)
class SweepReport:
    """A sweep's report, assembled once by `build_report`: every table and verdict it states."""

    sweep_dir: Path
    runs: list[RunSummary]  # ranked: runs with a result by it, then the rest in job order
    columns: list[str]  # the choices shown per run: the design choices, then every override that varies
    common: dict[str, Any]  # overrides every run shares
    settings: list[Setting]  # ranked by mean
    setting_columns: list[str]  # the columns that tell settings apart (all but seed)
    baseline: Setting | None  # among `settings`, when the learning rate does not vary
    tuned: list[Setting] = field(default_factory=list)  # each setting at its tuned rate (lr varies)
    tuned_baseline: Setting | None = None
    confidence: float = 0.95
    alpha: float = ALPHA
    min_effect: float = MIN_EFFECT
    baseline_source: str | None = None  # where the baseline was named: --baseline or the runs' config
    design: Design | None = None
    reference: dict[str, float] | None = None  # the levels of the runs' validation split, when they share one
    # A ladder: the family judged level by level along `axis` (tinylm/analysis/ladder.py), not against one
    # baseline. `axis` is known before the verdicts: it decides whether the rate is tuned or a level.
    axis: list[str] = field(default_factory=list)
    ladder: Ladder | None = None
    findings: dict[Path, list[Finding]] = field(default_factory=dict)  # each run's diagnosis, by its path
    # What each setting's runs show (the settings table's `why`), in the order of `settings`.
    setting_why: list[tuple[Shared, ...]] = field(default_factory=list)
    why: list[WhyRow] = field(
        default_factory=list
    )  # each setting that lost or failed, and what its runs show
    # The family rows (choices) whose answer pairs only runs still improving at their end, both sides.
    still_learning: tuple[dict[str, Any], ...] = ()
    sizing: Sizing | None = None  # what resolving the open rows would take
    probe: list[dict[str, Any]] = field(default_factory=list)  # the depth probe at each of the runs' shapes
    rule: str = TUNED_THEN_JUDGED  # how rates were tuned and failures counted (settings.CROSS_FITTED: before)
    metric: Metric = (
        FINAL_LOSS  # what each run's result is: its final loss, or its steps or seconds to a level
    )

    @property
    def lr_varies(self) -> bool:
        """The rate varies and is tuned per setting (not a ladder's axis, where each rate is a level)."""
        return LR in self.setting_columns and LR not in self.axis

    @property
    def judged_apart(self) -> bool:
        """The rate is tuned on the sweep's seeds and judged on others (the rule since 2026-12-04)."""
        return self.lr_varies and self.rule != CROSS_FITTED

    @property
    def family(self) -> list[Setting]:
        """The settings the verdicts are about: the tuned ones when the learning rate varies."""
        return self.tuned if self.lr_varies else self.settings

    @property
    def family_columns(self) -> list[str]:
        """The columns the family's settings differ in: all but the rate when it is tuned per setting."""
        return [c for c in self.setting_columns if c != LR] if self.lr_varies else self.setting_columns

    @property
    def family_baseline(self) -> Setting | None:
        return self.tuned_baseline if self.lr_varies else self.baseline

    @property
    def baselines(self) -> list[Setting]:
        """The family's baselines: one per level on a ladder, else the one (none before it is judged)."""
        if self.ladder is not None:
            return [rung.baseline for rung in self.ladder.rungs]
        return [self.family_baseline] if self.family_baseline is not None else []

    @property
    def baseline_keys(self) -> dict[tuple[Any, ...], tuple[Any, ...] | None]:
        """Each family row's baseline, key to key (over the family's columns): its level's on a ladder."""
        return baseline_keys(self.family, self.family_baseline, self.ladder, self.family_columns)

    @property
    def own_seeds(self) -> tuple[str, ...] | None:
        """With a sequential design, the sweep's own seeds (its first look), the only ones its verdicts use;
        None without one (every seed is the sweep's own)."""
        return self.design.first_seeds if self.design is not None and self.design.looks else None

    @property
    def rules(self) -> Rules:
        return Rules(self.confidence, self.alpha, self.min_effect, self.lr_varies)

    def baseline_of(self, setting: Setting) -> Setting | None:
        """The setting `setting` is judged against: the family's baseline, or on a ladder its level's."""
        if self.ladder is None:
            return self.family_baseline
        return next(
            (rung.baseline for rung in self.ladder.rungs if any(s is setting for s in rung.settings)), None
        )

    @property
    def shown_family_columns(self) -> list[str]:
        """The family's columns a table shows: those whose value varies between its rows."""
        return varying(self.family_columns, [s.choices for s in self.family])

    @property
    def swept_columns(self) -> list[str]:
        """The axes the sweep varies: the setting columns whose value differs between its settings (a design
        choice every run shares is no axis; a tuned rate is one)."""
        return varying(self.setting_columns, [s.choices for s in self.settings])


def parse_choices(text: str) -> dict[str, Any]:
    """`norm=pre,act=gelu` -> {"norm": "pre", "act": "gelu"}; values typed as Hydra types overrides (so 1e-3
    is the float 0.001, as in the runs' own records)."""
    pairs = [part.strip() for part in text.split(",") if part.strip()]
    if not pairs or any("=" not in pair or pair.startswith("=") for pair in pairs):
        raise ReportError(
            f"--baseline {text!r}: write choices as key=value[,key=value], e.g. norm=pre,act=gelu"
        )
    try:
        parsed = parse(pairs)
    except OverrideError as err:
        raise ReportError(f"--baseline {text!r}: {err}") from None
    return {choice.key: choice.typed for choice in parsed}


def parse_metric(text: str | None) -> Metric:
    """`--metric`: `loss` (None: the default), `steps_to=1.88` or `time_to=1.88`; whether a run of the sweep
    recorded that level is `recorded_metric`'s to say."""
    if text is None or text.strip() == LOSS:
        return FINAL_LOSS
    kind, equals, level = (part.strip() for part in text.partition("="))
    forms = (
        f"{LOSS} (the default), {STEPS_TO}=LEVEL or {TIME_TO}=LEVEL, LEVEL in nats/char, e.g. {STEPS_TO}=1.88"
    )
    if kind not in (STEPS_TO, TIME_TO) or not equals:
        raise ReportError(f"--metric {text!r}: write {forms}")
    try:
        value = float(level)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ReportError(f"--metric {text!r}: the level {level!r} is not a positive number; write {forms}")
    return Metric(kind, value)


def recorded_metric(metric: Metric, runs: Sequence[RunSummary]) -> Metric:
    """`metric`, once some run of the sweep recorded its level (a level never reached is not recorded)."""
    if metric.tag is None or any(metric.tag in run.targets for run in runs):
        return metric
    levels = sorted({key.split("/")[1] for run in runs for key in run.targets}, key=float, reverse=True)
    recorded = (
        f"the runs recorded {', '.join(levels)}"
        if levels
        else "no run recorded any level (callbacks.targets.levels, in metrics.json as target/<level>/step)"
    )
    raise ReportError(f"--metric {metric.flag!r}: no run of this sweep reached {metric.level:g}; {recorded}")


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
    """The report of a sweep, in one pass: its runs, the settings that differ only in their seed, the family
    judged against its baseline (or level by level along a ladder), the added seeds' verdicts, each run's
    findings and what they explain, what resolving the open rows would take; `probe`: the depth probe at the
    runs' shapes too (torch, seconds); `metric`: what a run's result is (`--metric`, default its final loss).
    Each part is computed once, and the report built from them."""
    sweep_dir = Path(sweep_dir)
    measured = parse_metric(metric)
    runs = read_runs(sweep_dir, curve, measured)
    measured = recorded_metric(measured, runs)
    columns, common = run_columns(runs)
    setting_columns = [c for c in columns if c != "seed"]
    design = read_design(sweep_dir)
    if design is not None and not measured.is_loss:
        raise ReportError(
            f"--metric {measured.flag}: this sweep's seeds were added to resolve its final losses ({DESIGN_FILE}); "
            "its verdicts hold only for them"
        )
    named, source = named_baseline(baseline, runs, design)
    wanted = parse_choices(named) if named is not None else None
    if design is not None:
        if min_effect is not None and min_effect != design.min_effect:
            raise ReportError(
                f"--min-effect {min_effect:g}: this sweep's seeds were added to resolve comparisons within "
                f"±{design.min_effect:g} ({DESIGN_FILE}); its verdicts hold only at that δ"
            )
        if baseline is not None and wanted != parse_choices(design.baseline):
            raise ReportError(
                f"--baseline {baseline}: this sweep's seeds were added against {design.baseline} "
                f"({DESIGN_FILE}); its verdicts hold only against that baseline"
            )
    axis = ladder_axis(ladder, runs, setting_columns, wanted, design.ladder if design else None)
    if design is not None and design.ladder is not None and tuple(axis) != design.ladder:
        along = f"along {', '.join(design.ladder)}" if design.ladder else "without a ladder"
        asked = f"--ladder {ladder}" if ladder else f"the experiment's ladder ({', '.join(axis)})"
        raise ReportError(
            f"{asked}: this sweep's seeds were added {along} ({DESIGN_FILE}); its verdicts hold only for the "
            "families they were judged in"
        )
    lr_varies = LR in setting_columns and LR not in axis  # a rate that is the ladder's axis is a level
    family_columns = [c for c in setting_columns if c != LR] if lr_varies else setting_columns
    rules = Rules(
        confidence, design.alpha if design else ALPHA,
        design.min_effect if design else (measured.min_effect if min_effect is None else min_effect), lr_varies,
    )  # fmt: skip
    own_seeds = design.first_seeds if design is not None and design.looks else None
    findings = {run.path: diagnose(run, run.reference) for run in runs}
    failed = {path for path, found in findings.items() if run_failure(found) is not None}
    settings = group_settings(runs, setting_columns, confidence, failed)
    # Each setting's rate chosen on the sweep's own seeds, judged on the seeds added since (none before).
    family = tuned_settings(settings, family_columns, confidence, own_seeds) if lr_varies else settings
    base, judged_ladder = None, None
    if wanted is not None:
        family, base, judged_ladder = judge_family(
            family, {k: v for k, v in wanted.items() if not (lr_varies and k == LR)}, family_columns, rules,
            axis, own_seeds,
        )  # fmt: skip
        if design is not None and len(design.looks) >= 2:
            family, judged_ladder = with_added_seeds(
                family, base, judged_ladder, settings, family_columns, rules, design
            )
    baselines = [rung.baseline for rung in judged_ladder.rungs] if judged_ladder else [base] if base else []
    explained = (family, family_columns) if len(family) > 1 else (settings, setting_columns)
    horizon = design.horizon if design is not None else None
    return SweepReport(
        sweep_dir, rank_runs(runs), columns, common, settings if lr_varies else family, setting_columns,
        None if lr_varies else base, family if lr_varies else [], base if lr_varies else None,
        confidence=confidence, alpha=rules.alpha, min_effect=rules.min_effect, baseline_source=source,
        design=design, reference=shared_reference(runs), axis=axis, ladder=judged_ladder, findings=findings,
        setting_why=[tuple(shared(s.runs, findings)) for s in (settings if lr_varies else family)],
        why=why_rows(*explained, findings, baselines), still_learning=still_learning(family, base, findings),
        sizing=None if judged_ladder else size_open_rows(
            family, base, family_columns, rules.min_effect, False, horizon, rules.alpha
        ),
        probe=probe_rows(runs) if probe else [], metric=measured,
    )  # fmt: skip


def judge_family(
    family: list[Setting],
    wanted: dict[str, Any],
    columns: list[str],
    rules: Rules,
    axis: list[str],
    seeds: tuple[str, ...] | None,
) -> tuple[list[Setting], Setting | None, Ladder | None]:
    """The family judged against the baseline `wanted` names (on a ladder, each level's), on `seeds` only
    when given: its settings in their order, each with its comparison, the baseline, and the ladder."""
    if axis:
        ladder = judge_ladder(family, wanted, columns, rules, axis, seeds)
        by_key = {s.key(columns): s for rung in ladder.rungs for s in rung.settings}
        return [by_key[s.key(columns)] for s in family], None, ladder
    base = pick_baseline(family, wanted, columns)
    [judged] = judge_families([(family, base)], rules, seeds)
    return judged, base, None


def run_columns(runs: Sequence[RunSummary]) -> tuple[list[str], dict[str, Any]]:
    """The choices shown per run (the design choices, then every override that varies) and the overrides
    every run shares."""
    keys = list(DESIGN_CHOICES) + sorted({k for r in runs for k in r.choices} - set(DESIGN_CHOICES))
    varied = [k for k in keys if len({r.choices.get(k) for r in runs}) > 1]
    columns = list(DESIGN_CHOICES) + [k for k in varied if k not in DESIGN_CHOICES]
    common = {k: runs[0].choices[k] for k in keys if k not in varied and k in runs[0].choices}
    return columns, {k: v for k, v in common.items() if k not in DESIGN_CHOICES}


def ladder_axis(
    flag: str | None,
    runs: Sequence[RunSummary],
    columns: Sequence[str],
    wanted: dict[str, Any] | None,
    design: Sequence[str] | None = None,
) -> list[str]:
    """The choices the report judges level by level: --ladder, the axis a sequential design's looks were
    judged along (`design`), the experiment's `ladder:`, or `size` when the sweep varies it and the baseline
    does not name it (the scale ladder's runs predate `ladder:`); [] for none. Each must vary in the sweep,
    and the baseline names the design only, not a level."""
    named = {run.ladder for run in runs if run.ladder}
    if not flag and not design and len(named) > 1:
        raise ReportError(
            f"the runs name different ladders ({', '.join(sorted(named))}); choose one with --ladder"
        )
    if flag:
        where, axis = "--ladder", [key.strip() for key in flag.split(",") if key.strip()]
    elif design:
        where, axis = f"the ladder of {DESIGN_FILE}", list(design)
    elif named:
        text = named.pop()
        where, axis = "the experiment's `ladder:`", [key.strip() for key in text.split(",") if key.strip()]
    else:
        return [SCALE_KEY] if SCALE_KEY in columns and wanted is not None and SCALE_KEY not in wanted else []
    text = ",".join(axis) if flag is None else flag
    still = [key for key in axis if key not in columns]
    if not axis or still:
        raise ReportError(
            f"{where} {text!r}: {', '.join(still) or 'nothing'} does not vary in this sweep; choose among "
            f"{', '.join(columns)}"
        )
    named_level = sorted(set(axis) & set(wanted or {}))
    if named_level:
        raise ReportError(
            f"the baseline names {', '.join(named_level)}, the ladder's axis ({where} {text}): name the design "
            "only, and it is judged at every level"
        )
    return axis


def named_baseline(
    flag: str | None, runs: Sequence[RunSummary], design: Design | None
) -> tuple[str | None, str | None]:
    """The baseline and who named it: --baseline, the sequential design, or the experiment's `baseline:`
    (in every run's config). Never the best setting: that is picked from the data it would then judge."""
    if flag:
        return flag, "--baseline"
    if design is not None:
        return design.baseline, design.baseline_source
    named = {run.baseline for run in runs if run.baseline}
    if len(named) > 1:
        raise ReportError(
            f"the runs name different baselines ({', '.join(sorted(named))}); choose one with --baseline"
        )
    return (named.pop(), "the experiment's `baseline:`") if named else (None, None)


def rank_runs(runs: Sequence[RunSummary]) -> list[RunSummary]:
    """Runs with a result by it (diverged ones after every finite result), then the others in job order."""
    return sorted(runs, key=lambda r: (r.result is None, r.result if r.result is not None else 0.0))
