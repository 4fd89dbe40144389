"""A sweep, compared: which setting is better, by how much, and how sure that is (docs/sweeps.md).

`python scripts/report.py SWEEP_DIR` groups the runs (`tinylm.analysis.runs`) into settings that differ only
in their seed, estimates each, compares each with a baseline seed by seed (and, when the learning rate
varies, each at its own best rate), and writes report.md, report.json and the figures into SWEEP_DIR. A
diverged run counts as a result (+inf, the worst); a failed or unfinished one as none.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tinylm.analysis.diagnosis import Finding, diagnose, why_cell
from tinylm.analysis.runs import (
    DESIGN_CHOICES,
    ReportError,
    RunSummary,
    display_value,
    natural_key,
    read_runs,
)
from tinylm.analysis.stats import (
    ALPHA,
    MIN_EFFECT,
    UNRESOLVED,
    Comparison,
    Estimate,
    Look,
    Outcome,
    Verdict,
    cross_fit,
    estimate,
    first_verdicts,
    judge,
    mean_or_inf,
    paired_tests,
    seeds_needed,
    sequential_plan,
    tuned_tests,
)
from tinylm.files import plain, write_json
from tinylm.overrides import OverrideError, parse

REPORT_MD = "report.md"
# Where a report that a new one would read differently from is kept (sweep_report.keep_previous).
PREVIOUS_REPORTS = "previous_reports"
REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
SENSITIVITY_PNG = "lr_sensitivity.png"
# Written by scripts/add_seeds.py: the sequential design its rounds follow, and the seeds of every look.
DESIGN_FILE = "sequential.json"
LR = "optim.lr"
# The choice a scale ladder varies (conf/size/): the baseline is then judged size by size (analysis/scale.py).
SCALE_KEY = "size"
_CURVES = ("val_curve", "train_curve", "curve", "health", "window_losses")  # too long for report.json


@dataclass
class Setting:
    """The runs that differ only in their seed; in the tuned table, the runs of every learning rate, each
    seed's result taken at the rate the other seeds chose (`rates`)."""

    choices: dict[str, str]
    runs: list[RunSummary]
    results: dict[str, float] = field(default_factory=dict)  # seed -> final val loss (+inf: diverged)
    windows: dict[str, list[float]] = field(default_factory=dict)  # seed -> final per-window losses
    estimate: Estimate | None = None
    comparison: Comparison | None = None
    rates: dict[str, str] = field(default_factory=dict)  # tuned: seed -> the rate chosen on the other seeds
    by_rate: dict[str, dict[str, float]] = field(default_factory=dict)  # tuned: rate -> seed -> result
    missing: tuple[str, ...] = ()  # tuned: seeds with no run at the rate the other seeds chose
    # A sequential extension's comparison (scripts/add_seeds.py): over the seeds added after the first look
    # only, with the verdict of the first look that resolved it.
    added: Comparison | None = None

    @property
    def answer(self) -> Comparison | None:
        """The comparison that answers: the sweep's own when it resolved, else the added seeds'."""
        if self.comparison is not None and not self.comparison.resolved and self.added is not None:
            return self.added
        return self.comparison

    @property
    def diverged(self) -> int:
        return sum(not math.isfinite(v) for v in self.results.values())

    @property
    def without_result(self) -> int:
        return sum(run.result is None for run in self.runs)

    def label(self, columns: Sequence[str]) -> str:
        return " ".join(f"{c}={self.choices.get(c, '—')}" for c in columns) or "all runs"

    def key(self, columns: Sequence[str]) -> tuple[str, ...]:
        return tuple(self.choices.get(c, "—") for c in columns)


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


@dataclass
class SweepReport:
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
    # A scale ladder's baseline choices, without the size: judged at each size (analysis/scale.py), not here.
    scale_baseline: dict[str, str] | None = None
    findings: dict[Path, list[Finding]] = field(default_factory=dict)  # each run's diagnosis, by its path

    @property
    def lr_varies(self) -> bool:
        return LR in self.setting_columns

    @property
    def family(self) -> list[Setting]:
        """The settings the verdicts are about: the tuned ones when the learning rate varies."""
        return self.tuned if self.lr_varies else self.settings

    @property
    def family_columns(self) -> list[str]:
        return [c for c in self.setting_columns if c != LR] if self.lr_varies else self.setting_columns

    @property
    def family_baseline(self) -> Setting | None:
        return self.tuned_baseline if self.lr_varies else self.baseline

    @property
    def own_seeds(self) -> tuple[str, ...] | None:
        """With a sequential design, the sweep's own seeds (its first look), the only ones its verdicts use;
        None without one (every seed is the sweep's own)."""
        return self.design.first_seeds if self.design is not None and self.design.looks else None

    @property
    def shown_family_columns(self) -> list[str]:
        """The family's columns a table shows: those whose value varies between its rows."""
        return varying(self.family_columns, [s.choices for s in self.family])


def varying(columns: Sequence[str], choices: Sequence[dict[str, str]]) -> list[str]:
    """The columns whose value differs between `choices`: the others are stated once, not in every row."""
    return [c for c in columns if len({str(row.get(c, "—")) for row in choices}) > 1]


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
) -> SweepReport:
    sweep_dir = Path(sweep_dir)
    runs = read_runs(sweep_dir, curve)
    keys = list(DESIGN_CHOICES) + sorted({k for r in runs for k in r.choices} - set(DESIGN_CHOICES))
    varying = [k for k in keys if len({r.choices.get(k) for r in runs}) > 1]
    columns = list(DESIGN_CHOICES) + [k for k in varying if k not in DESIGN_CHOICES]
    common = {k: str(runs[0].choices[k]) for k in keys if k not in varying and k in runs[0].choices}
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
    settings = group_settings(runs, setting_columns, confidence)
    report = SweepReport(
        sweep_dir, rank_runs(runs), columns, common, settings, setting_columns, None, confidence=confidence,
        alpha=design.alpha if design else ALPHA, baseline_source=source, design=design,
        min_effect=design.min_effect if design else (MIN_EFFECT if min_effect is None else min_effect),
    )  # fmt: skip
    report.reference = shared_reference(runs)
    report.findings = {run.path: diagnose(run, report.reference) for run in runs}
    if report.lr_varies:  # cross-fitted on the sweep's own seeds (an extension's are judged apart)
        report.tuned = tuned_settings(settings, report.family_columns, confidence, seeds=report.own_seeds)
    if baseline is None:
        return report
    wanted = {k: v for k, v in parse_choices(baseline).items() if not (report.lr_varies and k == LR)}
    if SCALE_KEY in report.family_columns and SCALE_KEY not in wanted:
        report.scale_baseline = wanted
        return report
    base = pick_baseline(report.family, wanted, report.family_columns)
    if report.lr_varies:
        report.tuned_baseline = base
    else:
        report.baseline = base
    judge_family(report.family, base, report, report.own_seeds)
    if design is not None and len(design.looks) > 1:
        judge_added(report, design)
    return report


def shared_reference(runs: Sequence[RunSummary]) -> dict[str, float] | None:
    """The reference levels every run that recorded them shares; None if none did or they differ (runs on
    different corpora or splits)."""
    levels = [run.reference for run in runs if run.reference]
    if not levels or any(
        set(other) != set(levels[0]) or any(abs(other[k] - levels[0][k]) > 1e-9 for k in other)
        for other in levels
    ):
        return None
    return levels[0]


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


def group_settings(runs: Sequence[RunSummary], columns: Sequence[str], confidence: float) -> list[Setting]:
    """Runs grouped by every column but the seed, ranked by their mean result (settings without one last)."""
    settings: dict[tuple[str, ...], Setting] = {}
    for run in runs:
        key = tuple(str(run.choices.get(c, "—")) for c in columns)
        setting = settings.setdefault(key, Setting(dict(zip(columns, key, strict=True)), []))
        setting.runs.append(run)
        if run.result is not None:
            setting.results[run.seed] = run.result
            if run.window_losses:
                setting.windows[run.seed] = run.window_losses
    for setting in settings.values():
        if setting.results:
            setting.estimate = estimate(list(setting.results.values()), confidence)
    return sorted(settings.values(), key=_mean)


def tuned_settings(
    settings: Sequence[Setting],
    columns: Sequence[str],
    confidence: float,
    seeds: Collection[str] | None = None,
    choose_on: Collection[str] | None = None,
) -> list[Setting]:
    """Each group of settings that differ only in their learning rate, at a rate chosen on other seeds than
    those judged: by cross-fitting (every seed at the rate with the lowest mean over the group's other
    seeds), or, with `choose_on` (a sequential design's first look), at the rate those seeds chose, judged
    on the seeds added since. `seeds`: only these."""
    tuned = []
    for key, group in _groups(settings, columns).items():
        by_rate = {
            s.choices[LR]: {seed: v for seed, v in s.results.items() if seeds is None or seed in seeds}
            for s in group
        }
        setting = Setting(dict(zip(columns, key, strict=True)), [run for s in group for run in s.runs])
        setting.by_rate = {str(rate): dict(runs) for rate, runs in by_rate.items()}
        if choose_on is not None:
            rate = chosen_rate(by_rate, choose_on)
            setting.results = {seed: v for seed, v in by_rate[rate].items() if seed not in choose_on}
            setting.rates = dict.fromkeys(setting.results, rate)
        else:
            fit = cross_fit(by_rate)
            if fit is not None:
                setting.results = {str(seed): v for seed, v in fit.values.items()}
                setting.rates = {str(seed): str(rate) for seed, rate in fit.rates.items()}
                setting.missing = tuple(str(seed) for seed in fit.missing)
        at_rate = {s.choices[LR]: s for s in group}
        setting.windows = {
            seed: at_rate[rate].windows[seed]
            for seed, rate in setting.rates.items()
            if seed in at_rate[rate].windows
        }
        if setting.results:
            setting.estimate = estimate(list(setting.results.values()), confidence)
        tuned.append(setting)
    return sorted(tuned, key=_mean)


def chosen_rate(by_rate: dict[str, dict[str, float]], choose_on: Collection[str]) -> str:
    """The rate with the lowest mean over the `choose_on` seeds (one that diverged on any never wins)."""
    return min(by_rate, key=lambda rate: mean_or_inf([v for s, v in by_rate[rate].items() if s in choose_on]))


def _mean(setting: Setting) -> float:
    return setting.estimate.mean if setting.estimate and not math.isnan(setting.estimate.mean) else math.inf


def _groups(settings: Sequence[Setting], columns: Sequence[str]) -> dict[tuple[str, ...], list[Setting]]:
    groups: dict[tuple[str, ...], list[Setting]] = {}
    for setting in settings:
        groups.setdefault(setting.key(columns), []).append(setting)
    return groups


def pick_baseline(settings: Sequence[Setting], wanted: dict[str, str], columns: Sequence[str]) -> Setting:
    """The one setting `wanted` names."""
    unknown = sorted(set(wanted) - set(columns))
    if unknown:
        raise ReportError(
            f"the baseline names {unknown}, which do not vary in this sweep; choose among {', '.join(columns)}"
        )
    described = ",".join(f"{k}={v}" for k, v in wanted.items())
    matching = [s for s in settings if all(s.choices.get(k) == v for k, v in wanted.items())]
    if len(matching) > 1:
        unnamed = [c for c in columns if c not in wanted and len({s.choices.get(c) for s in matching}) > 1]
        raise ReportError(
            f"the baseline {described} matches {len(matching)} settings; name its {', '.join(unnamed)} too"
        )
    if not matching or not matching[0].results:
        raise ReportError(f"the baseline {described} matches no setting with a result in this sweep")
    return matching[0]


def judge_family(
    settings: Sequence[Setting], base: Setting, report: SweepReport, seeds: Collection[str] | None = None
) -> None:
    """Compare every setting with `base`, seed by seed (on `seeds` only, when given), and judge them together
    as one family."""
    others = [s for s in settings if s is not base]
    compared = [tests_against(only(s, seeds), only(base, seeds), report) for s in others]
    judged = judge(compared, report.min_effect, report.alpha)
    for setting, comparison in zip(others, judged, strict=True):
        setting.comparison = comparison


def only(setting: Setting, seeds: Collection[str] | None) -> Setting:
    """`setting` with the results of `seeds` only (the tuned ones are already cut to them)."""
    if seeds is None or setting.by_rate:
        return setting
    return replace(
        setting,
        results={k: v for k, v in setting.results.items() if k in seeds},
        windows={k: v for k, v in setting.windows.items() if k in seeds},
    )


def tests_against(
    setting: Setting, base: Setting, report: SweepReport, cross_fitted: bool = True
) -> Comparison:
    """The tests of one row: paired over seeds, or, when the rate varies, between cross-fitted settings (the
    seeds added to a sequential design are judged at the rate the first look chose, plainly paired)."""
    windows = (setting.windows, base.windows)
    if report.lr_varies and cross_fitted:
        return tuned_tests(setting.by_rate, base.by_rate, report.min_effect, report.confidence, windows)
    return paired_tests(setting.results, base.results, report.min_effect, report.confidence, windows)


def judge_added(report: SweepReport, design: Design) -> None:
    """The sequential extension's verdicts, on the added seeds alone: each look judges the seeds added by
    then at the level its boundary gives (Holm over the rows the extension adds seeds to), and a row keeps
    the first verdict a look gives it. The sweep's own verdicts stay as its own seeds gave them."""
    columns, base_key = report.family_columns, report.family_baseline.key(report.family_columns)
    rows = [s for s in report.family if s.comparison is not None and not s.comparison.resolved]
    looks = []
    for look in range(1, len(design.looks)):
        family = {s.key(columns): s for s in added_family(report, design, look)}
        base = family[base_key]
        looks.append([tests_against(family[s.key(columns)], base, report, cross_fitted=False) for s in rows])
    plan = design.added_plan()
    first = first_verdicts(looks, plan, report.min_effect, report.alpha)
    last = judge(looks[-1], report.min_effect, report.alpha, with_power=False)
    judged = sum(look is not None for look in plan)
    for setting, found, latest in zip(rows, first, last, strict=True):
        if found is None:
            verdict = f"{UNRESOLVED} after {judged} look{'s' if judged != 1 else ''} of added seeds"
            setting.added = replace(latest, verdict=Verdict(verdict, Outcome.NOT_RESOLVED))
        else:
            number, c = found
            setting.added = replace(
                c, verdict=c.verdict.noted(f" (look {number + 2}, {len(c.seeds)} added seeds)")
            )


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
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ReportError(f"{path} is not a sequential design scripts/add_seeds.py wrote: {err}") from None


def write_design(sweep_dir: Path, design: Design) -> None:
    write_json(sweep_dir / DESIGN_FILE, dataclasses.asdict(design))


def rank_runs(runs: Sequence[RunSummary]) -> list[RunSummary]:
    """Runs with a result by it (diverged ones after every finite result), then the others in job order."""
    return sorted(runs, key=lambda r: (r.result is None, r.result if r.result is not None else 0.0))


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
    reference: dict[str, float] | None = None,
    findings: dict[Path, list[Finding]] | None = None,
) -> list[list]:
    rows = []
    for rank, s in enumerate(settings, start=1):
        e = s.estimate
        rows.append([
            rank if e is not None else "—",
            *(s.choices.get(c, "—") for c in columns),
            len(s.results),
            fmt_number(e.mean if e else None),
            fmt_number(e.sd if e else None),
            fmt_interval(e),
            s.diverged,
            s.without_result,
            why_cell(s.runs, findings or {}),
            "baseline" if s is baseline else "",
        ])  # fmt: skip
        if reference is not None:
            gain = reference["unigram"] - e.mean if e is not None and math.isfinite(e.mean) else None
            rows[-1].insert(-4, fmt_number(gain, signed=True))
    return rows


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
    return ", ".join(f"{rate} ×{n}" for rate, n in sorted(counts.items(), key=lambda kv: float(kv[0]))) or "—"


def _family_rows(report: SweepReport) -> list[list]:
    rows = []
    base, columns = report.family_baseline, report.shown_family_columns
    for s in report.family:
        choices = [s.choices.get(col, "—") for col in columns]
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
    base = report.family_baseline
    if base is None or report.scale_baseline is not None or len(report.family) < 2:
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
    if report.scale_baseline is not None:
        return [
            *text,
            "The baseline is judged at each size: see *Across sizes* below.",
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
            *(s.choices.get(col, "—") for col in columns), s.comparison.verdict, len(c.seeds),
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
    """What resolving the open rows would take: per row, the seeds that find its observed difference, or δ
    when that is smaller (below δ the answer sought is equivalence, which needs about as many), with 80%
    power; runs and minutes from the runs' own median wall times."""
    base = report.family_baseline
    open_rows = [
        s for s in report.family
        if s is not base and s.answer is not None and not s.answer.resolved
    ]  # fmt: skip
    if not open_rows or base is None:
        return []
    lines, needed_base, total_runs, total_s = [], 0, 0, 0.0
    for s in open_rows:
        c = s.comparison
        if c.power is None or c.difference is None:
            lines.append(f"- `{s.label(report.family_columns)}`: too few finished seeds to size it")
            continue
        effect = max(abs(c.difference.mean), report.min_effect)
        needed = seeds_needed(effect / c.power.sd, c.power.level)
        if needed is None:
            continue
        have = len(c.seeds) + (len(s.added.seeds) if s.added is not None else 0)
        more = max(0, needed - have)
        needed_base = max(needed_base, more)
        runs, seconds = _run_cost(s, more)
        total_runs, total_s = total_runs + runs, total_s + seconds
        if more:
            lines.append(f"- `{s.label(report.family_columns)}`: {needed} seeds ({more} more, {runs} runs)")
        else:
            lines.append(
                f"- `{s.label(report.family_columns)}`: its {have} seeds would find this difference 80% of the "
                "time and did not: it is smaller than it seems, or this was the other 20%"
            )
    runs, seconds = _run_cost(base, needed_base)
    total_runs, total_s = total_runs + runs, total_s + seconds
    if total_runs:
        per_seed = (
            ", every rate of a setting at each new seed (cross-fitting needs them)"
            if report.lr_varies
            else ""
        )
        lines.insert(0, (
            f"What resolving the {len(open_rows)} open row{'s' if len(open_rows) != 1 else ''} would take, "
            f"if each difference is what it seems (or δ, if smaller): {total_runs:,} more runs with the "
            f"baseline's{per_seed}, {_fmt_duration(total_s)} of run time at these runs' median wall times; "
            "`python scripts/add_seeds.py <sweep dir>` adds them in rounds until each is resolved."
        ))  # fmt: skip
    return ["", *lines] if lines else []


def _fmt_duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:,.1f} hours" if hours >= 2 else f"{seconds / 60:.0f} minutes"


def _run_cost(s: Setting, seeds: int) -> tuple[int, float]:
    times = [run.wall_time_s for run in s.runs if run.wall_time_s is not None]
    rates = max(1, len({run.choices.get(LR) for run in s.runs}))
    runs = seeds * rates
    return runs, runs * (statistics.median(times) if times else 0.0)


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
        text += ["Shared by every run: " + " ".join(f"`{k}={v}`" for k, v in shared.items()), ""]

    text += ["## Settings", ""]
    header = ["rank", *cols, "seeds", "mean", "sd", f"{pct} CI", "diverged", "no result", "why", "note"]
    if report.reference is not None:
        header.insert(-4, "gain over unigram")
    text += [
        *md_table(
            header, _settings_rows(report.settings, cols, report.baseline, report.reference, report.findings)
        ),
        "",
    ]
    if report.reference is not None:
        levels = report.reference
        text += [
            f"Reference levels of the validation split, estimated on the training split (nats/char): uniform "
            f"(ln V) {levels['uniform']:.4f}, unigram {levels['unigram']:.4f}, bigram {levels['bigram']:.4f}. "
            "A loss at the unigram level has learned the characters' frequencies and nothing of their "
            "context; `gain over unigram` is how far below it a setting got.",
            "",
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
            rank if ranked else "—", run.name, *(run.choices.get(c, "—") for c in columns),
            "—" if run.params is None else f"{run.params:,}", fmt_number(run.final_val_loss), run.evaluated, fmt_number(run.best_val_loss),
            fmt_number(run.final_bpc, 3), "—" if run.tokens_per_s is None else f"{run.tokens_per_s:,.0f}",
            _fmt_wall_time(run.wall_time_s), steps, status if len(status) <= 120 else status[:117] + "...",
        ])  # fmt: skip
    return md_table(header, rows)


def to_json(report: SweepReport) -> dict[str, Any]:
    """The report's numbers as JSON-ready data (non-finite floats as "inf"/"nan" strings)."""

    def setting(s: Setting) -> dict[str, Any]:
        c = s.comparison
        return {
            "choices": s.choices,
            "results": dict(sorted(s.results.items(), key=lambda kv: natural_key(kv[0]))),
            "final_val_loss": s.estimate,
            "diverged": s.diverged,
            "without_result": s.without_result,
            "rates": s.rates,
            "vs_baseline": c and {
                "seeds": list(c.seeds), "unmatched": list(c.unmatched), "difference": c.difference,
                "p": c.p_value, "p_holm": c.p_adjusted, "p_equivalence": c.p_equivalence,
                "p_equivalence_holm": c.p_equivalence_adjusted, "divergence": c.divergence,
                "p_divergence_holm": c.p_divergence_adjusted, "power": c.power, "eval_se": c.eval_se,
                "verdict": c.verdict, "outcome": c.verdict.outcome,
            },
            "added_seeds_vs_baseline": s.added and {
                "seeds": list(s.added.seeds), "difference": s.added.difference, "p": s.added.p_value,
                "p_equivalence": s.added.p_equivalence, "divergence": s.added.divergence,
                "verdict": s.added.verdict, "outcome": s.added.verdict.outcome,
            },
        }  # fmt: skip

    return plain(
        {
            "sweep_dir": report.sweep_dir,
            "confidence": report.confidence,
            "alpha": report.alpha,
            "min_effect": report.min_effect,
            "baseline_source": report.baseline_source,
            "design": report.design,
            "common": report.common,
            "reference_levels": report.reference,
            "setting_columns": report.setting_columns,
            "baseline": report.baseline and report.baseline.choices,
            "settings": [setting(s) for s in report.settings],
            "tuned_baseline": report.tuned_baseline and report.tuned_baseline.choices,
            "tuned": [setting(s) for s in report.tuned],
            "runs": [
                {k: v for k, v in vars(r).items() if k not in _CURVES}
                | {"diagnosis": report.findings.get(r.path, [])}
                for r in report.runs
            ],
        }
    )
