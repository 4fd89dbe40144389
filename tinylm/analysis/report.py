"""A sweep, compared: which setting is better, by how much, and how sure that is (docs/sweeps.md).

`build_report` assembles a sweep's report in one pass: its runs (`tinylm.analysis.runs`), the settings that
differ only in their seed (`tinylm.analysis.settings`), the family of comparisons with a baseline (and, when
the learning rate varies, each setting at cross-fitted rates), the seeds a sequential design added, each
run's diagnosis, and a scale ladder's verdicts (`tinylm.analysis.ladder`). Nothing is changed after: the
report is rendered apart (`tinylm.analysis.render`, the figures in `tinylm.analysis.plots`). A diverged run
counts as a result (+inf, the worst); a failed or unfinished one as none.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tinylm.analysis.diagnosis import Finding, diagnose
from tinylm.analysis.estimates import MIN_EFFECT, Comparison
from tinylm.analysis.ladder import SCALE_KEY, Ladder, judge_ladder, with_added
from tinylm.analysis.outcome import UNRESOLVED, Outcome, Verdict
from tinylm.analysis.runs import (
    DESIGN_CHOICES,
    ReportError,
    RunSummary,
    display_value,
    read_runs,
    shared_reference,
)
from tinylm.analysis.sequential import Look, first_verdicts, sequential_plan
from tinylm.analysis.settings import (
    LR,
    Rules,
    Setting,
    group_settings,
    judge_families,
    only,
    pick_baseline,
    tests_against,
    tuned_settings,
    varying,
)
from tinylm.analysis.verdicts import ALPHA, judge
from tinylm.files import write_json
from tinylm.overrides import OverrideError, parse

REPORT_MD = "report.md"
# Where a report that a new one would read differently from is kept (sweep_report.keep_previous).
PREVIOUS_REPORTS = "previous_reports"
REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
SENSITIVITY_PNG = "lr_sensitivity.png"
# Written by scripts/add_seeds.py: the sequential design its rounds follow, and the seeds of every look.
DESIGN_FILE = "sequential.json"


@dataclass(frozen=True)
class Round:
    """A round add_seeds has started: the seeds it adds, to the settings with these choices."""

    seeds: tuple[str, ...]
    settings: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class Design:
    """A sequential extension of a finished sweep (scripts/add_seeds.py). Its first look is the sweep as it
    was: those seeds were judged by the sweep's own report, at α, and keep those verdicts (and, when the rate
    varies, choose each setting's rate). Every later look judges only the seeds added since the first, by a
    group-sequential design over at most `max_seeds - len(looks[0])` of them (`added_plan`)."""

    alpha: float
    min_effect: float
    max_seeds: int
    baseline: str
    looks: tuple[tuple[str, ...], ...]  # the baseline's seeds at each look
    baseline_source: str = DESIGN_FILE  # who named the baseline for add_seeds: --baseline or the experiment
    # add_seeds' progress: the round it started (its seeds and the settings' choices) and rounds since a look.
    round: Round | None = None
    rounds_since_look: int = 0
    spending: str = "Lan-DeMets O'Brien-Fleming-type, group-sequential boundaries over the added seeds"
    # The ladder's axis its rounds judged level by level (() for none); None in a design written before it was
    # recorded. Another axis would regroup the family the looks were judged in.
    ladder: tuple[str, ...] | None = None

    @property
    def first_seeds(self) -> tuple[str, ...]:
        return self.looks[0] if self.looks else ()

    def added_seeds(self, look: int) -> list[str]:
        return [seed for seed in self.looks[look] if seed not in self.first_seeds]

    def added_plan(self) -> list[Look | None]:
        """How each look after the first is judged (None: it has too few added seeds to judge anything)."""
        horizon = self.max_seeds - len(self.first_seeds)
        counts = [len(self.added_seeds(look)) for look in range(1, len(self.looks))]
        return sequential_plan(counts, horizon) if horizon >= 2 else [None] * len(counts)


@dataclass(frozen=True)
class SweepReport:
    """A sweep's report, assembled once by `build_report`: every table and verdict it states."""

    sweep_dir: Path
    runs: list[RunSummary]  # ranked: runs with a result by it, then the rest in job order
    columns: list[str]  # the choices shown per run: the design choices, then every override that varies
    common: dict[str, str]  # overrides every run shares
    settings: list[Setting]  # ranked by mean
    setting_columns: list[str]  # the columns that tell settings apart (all but seed)
    baseline: Setting | None  # among `settings`, when the learning rate does not vary
    tuned: list[Setting] = field(default_factory=list)  # each setting at cross-fitted rates (lr varies)
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

    @property
    def lr_varies(self) -> bool:
        """The rate varies and is tuned per setting (not a ladder's axis, where each rate is a level)."""
        return LR in self.setting_columns and LR not in self.axis

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
    def baseline_keys(self) -> dict[tuple[str, ...], tuple[str, ...]]:
        """Each family row's baseline, key to key (over the family's columns): its level's on a ladder."""
        columns = self.family_columns
        if self.ladder is not None:
            return {
                s.key(columns): rung.baseline.key(columns)
                for rung in self.ladder.rungs
                for s in rung.settings
            }
        base = self.family_baseline.key(columns) if self.family_baseline is not None else None
        return {s.key(columns): base for s in self.family}

    @property
    def own_seeds(self) -> tuple[str, ...] | None:
        """With a sequential design, the sweep's own seeds (its first look), the only ones its verdicts use;
        None without one (every seed is the sweep's own)."""
        return self.design.first_seeds if self.design is not None and self.design.looks else None

    @property
    def rules(self) -> Rules:
        return Rules(self.confidence, self.alpha, self.min_effect, self.lr_varies)

    @property
    def shown_family_columns(self) -> list[str]:
        """The family's columns a table shows: those whose value varies between its rows."""
        return varying(self.family_columns, [s.choices for s in self.family])


def parse_choices(text: str) -> dict[str, str]:
    """`norm=pre,act=gelu` -> {"norm": "pre", "act": "gelu"}; values read as Hydra reads overrides (so 1e-3
    is 0.001, as the runs' own records show it)."""
    pairs = [part.strip() for part in text.split(",") if part.strip()]
    if not pairs or any("=" not in pair or pair.startswith("=") for pair in pairs):
        raise ReportError(
            f"--baseline {text!r}: write choices as key=value[,key=value], e.g. norm=pre,act=gelu"
        )
    try:
        parsed = parse(pairs)
    except OverrideError as err:
        raise ReportError(f"--baseline {text!r}: {err}") from None
    return {choice.key: display_value(choice.value) for choice in parsed}


def build_report(
    sweep_dir: str | Path,
    baseline: str | None = None,
    confidence: float = 0.95,
    curve: str | None = None,
    min_effect: float | None = None,
    ladder: str | None = None,
) -> SweepReport:
    """The report of a sweep, in one pass: runs, settings, the family judged against its baseline (or the
    ladder, size by size), the added seeds' verdicts, each run's findings."""
    sweep_dir = Path(sweep_dir)
    runs = read_runs(sweep_dir, curve)
    keys = list(DESIGN_CHOICES) + sorted({k for r in runs for k in r.choices} - set(DESIGN_CHOICES))
    varied = [k for k in keys if len({r.choices.get(k) for r in runs}) > 1]
    columns = list(DESIGN_CHOICES) + [k for k in varied if k not in DESIGN_CHOICES]
    common = {k: str(runs[0].choices[k]) for k in keys if k not in varied and k in runs[0].choices}
    for key in DESIGN_CHOICES:
        common.pop(key, None)
    setting_columns = [c for c in columns if c != "seed"]

    design = read_design(sweep_dir)
    if design is not None:
        if min_effect is not None and min_effect != design.min_effect:
            raise ReportError(
                f"--min-effect {min_effect:g}: this sweep's seeds were added to resolve comparisons within "
                f"±{design.min_effect:g} ({DESIGN_FILE}); its verdicts hold only at that δ"
            )
        if baseline is not None and parse_choices(baseline) != parse_choices(design.baseline):
            raise ReportError(
                f"--baseline {baseline}: this sweep's seeds were added against {design.baseline} "
                f"({DESIGN_FILE}); its verdicts hold only against that baseline"
            )
    baseline, source = named_baseline(baseline, runs, design)
    wanted = parse_choices(baseline) if baseline is not None else None
    if ladder is None and design is not None and design.ladder:
        ladder = ",".join(design.ladder)  # the axis the added seeds were judged along
    axis = ladder_axis(ladder, runs, setting_columns, wanted)
    if design is not None and design.ladder is not None and tuple(axis) != design.ladder:
        along = f"along {', '.join(design.ladder)}" if design.ladder else "without a ladder"
        asked = f"--ladder {ladder}" if ladder else f"the experiment's ladder ({', '.join(axis)})"
        raise ReportError(
            f"{asked}: this sweep's seeds were added {along} ({DESIGN_FILE}); its verdicts hold only for the "
            "families they were judged in"
        )
    reference = shared_reference(runs)
    settings = group_settings(runs, setting_columns, confidence)
    assembled = SweepReport(
        sweep_dir, rank_runs(runs), columns, common, settings, setting_columns, None, confidence=confidence,
        alpha=design.alpha if design else ALPHA,
        min_effect=design.min_effect if design else (MIN_EFFECT if min_effect is None else min_effect),
        baseline_source=source, design=design, reference=reference,
        axis=axis,
        findings={run.path: diagnose(run, run.reference) for run in runs},
    )  # fmt: skip
    if (
        assembled.lr_varies
    ):  # each setting cross-fitted on the sweep's own seeds (an extension's are judged apart)
        tuned = tuned_settings(settings, assembled.family_columns, confidence, seeds=assembled.own_seeds)
        assembled = replace(assembled, tuned=tuned)
    if wanted is None:
        return assembled
    return judged(assembled, wanted)


def judged(report: SweepReport, wanted: dict[str, str]) -> SweepReport:
    """`report` with its family judged against the baseline `wanted` names (a ladder's: at each size), and
    the verdicts of the seeds a sequential design added."""
    if report.lr_varies:
        wanted = {k: v for k, v in wanted.items() if k != LR}
    columns = report.family_columns
    if report.axis:
        ladder = judge_ladder(report.family, wanted, columns, report.rules, report.axis, report.own_seeds)
        by_key = {s.key(columns): s for rung in ladder.rungs for s in rung.settings}
        family = [by_key[s.key(columns)] for s in report.family]
        report, base = replace(report, ladder=ladder, **_as_family(report, family, None)), None
    else:
        base = pick_baseline(report.family, wanted, columns)
        [family] = judge_families([(report.family, base)], report.rules, report.own_seeds)
        report = replace(report, **_as_family(report, family, base))
    if report.design is None or len(report.design.looks) < 2:
        return report
    added = judge_added(report, report.design)
    family = [replace(s, added=added[id(s)]) if id(s) in added else s for s in report.family]
    report = replace(report, **_as_family(report, family, base))
    if report.ladder is None:
        return report
    by_key = {s.key(columns): s for s in family if s.added is not None}
    return replace(report, ladder=with_added(report.ladder, by_key, columns, report.alpha))


def _as_family(report: SweepReport, family: list[Setting], base: Setting | None) -> dict[str, object]:
    """The fields that hold the family: the tuned settings when the rate varies, else the settings."""
    if report.lr_varies:
        return {"tuned": family, "tuned_baseline": base}
    return {"settings": family, "baseline": base}


def ladder_axis(
    flag: str | None, runs: Sequence[RunSummary], columns: Sequence[str], wanted: dict[str, str] | None
) -> list[str]:
    """The choices the report judges level by level: --ladder, the experiment's `ladder:`, or `size` when the
    sweep varies it and the baseline does not name it (the scale ladder's runs predate `ladder:`); [] for
    none. Each must vary in the sweep, and the baseline names the design only, not a level."""
    named = {run.ladder for run in runs if run.ladder}
    if not flag and len(named) > 1:
        raise ReportError(
            f"the runs name different ladders ({', '.join(sorted(named))}); choose one with --ladder"
        )
    text = flag or (named.pop() if named else None)
    if text is None:
        return [SCALE_KEY] if SCALE_KEY in columns and wanted is not None and SCALE_KEY not in wanted else []
    where = "--ladder" if flag else "the experiment's `ladder:`"
    axis = [key.strip() for key in text.split(",") if key.strip()]
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


def judge_added(report: SweepReport, design: Design) -> dict[int, Comparison]:
    """The sequential extension's verdicts, on the added seeds alone, by the `id` of the family's row they
    answer: each look judges the seeds added by then at the level its boundary gives (Holm over the rows
    the extension adds seeds to), and a row keeps the first verdict a look gives it. The sweep's own
    verdicts stay as its own seeds gave them."""
    columns, bases = report.family_columns, report.baseline_keys
    rows = [s for s in report.family if s.comparison is not None and not s.comparison.resolved]
    looks = []
    for look in range(1, len(design.looks)):
        family = {s.key(columns): s for s in added_family(report, design, look)}
        looks.append([
            tests_against(family[key], family[bases[key]], report.rules, cross_fitted=False)
            for key in (s.key(columns) for s in rows)
        ])  # fmt: skip
    plan = design.added_plan()
    first = first_verdicts(looks, plan, report.min_effect, report.alpha)
    last = judge(looks[-1], report.min_effect, report.alpha, with_power=False)
    judged_looks = sum(look is not None for look in plan)
    added = {}
    for setting, found, latest in zip(rows, first, last, strict=True):
        if found is None:
            verdict = (
                f"{UNRESOLVED} after {judged_looks} look{'s' if judged_looks != 1 else ''} of added seeds"
            )
            added[id(setting)] = replace(latest, verdict=Verdict(verdict, Outcome.NOT_RESOLVED))
        else:
            number, c = found
            added[id(setting)] = replace(
                c, verdict=c.verdict.noted(f" (look {number + 2}, {len(c.seeds)} added seeds)")
            )
    return added


def added_family(report: SweepReport, design: Design, look: int) -> list[Setting]:
    """The family's settings with only the seeds added by `look` (when the rate varies: at the rate each
    setting's first-look seeds chose)."""
    added = set(design.added_seeds(look))
    if report.lr_varies:
        return tuned_settings(
            report.settings, report.family_columns, report.confidence, added | set(design.first_seeds),
            choose_on=design.first_seeds,
        )  # fmt: skip
    return [only(s, added) for s in report.settings]


def read_design(sweep_dir: Path) -> Design | None:
    """SWEEP_DIR/sequential.json as add_seeds wrote it (`write_design`), or None."""
    path = sweep_dir / DESIGN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        started = data.get("round")
        return Design(
            float(data["alpha"]), float(data["min_effect"]), int(data["max_seeds"]), str(data["baseline"]),
            tuple(tuple(str(s) for s in look) for look in data["looks"]),
            str(data.get("baseline_source", DESIGN_FILE)),
            Round(
                tuple(str(s) for s in started["seeds"]),
                tuple({str(k): str(v) for k, v in choices.items()} for choices in started["settings"]),
            ) if started else None,
            int(data.get("rounds_since_look", 0)),
            ladder=tuple(str(k) for k in data["ladder"]) if data.get("ladder") is not None else None,
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ReportError(f"{path} is not a sequential design scripts/add_seeds.py wrote: {err}") from None


def write_design(sweep_dir: Path, design: Design) -> None:
    write_json(sweep_dir / DESIGN_FILE, dataclasses.asdict(design))


def rank_runs(runs: Sequence[RunSummary]) -> list[RunSummary]:
    """Runs with a result by it (diverged ones after every finite result), then the others in job order."""
    return sorted(runs, key=lambda r: (r.result is None, r.result if r.result is not None else 0.0))
