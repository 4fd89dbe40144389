"""A sweep, compared: which setting is better, by how much, and how sure that is (docs/sweeps.md).

`python scripts/report.py SWEEP_DIR` groups the runs (`tinylm.analysis.runs`) into settings that differ only
in their seed, estimates each, compares each with a baseline seed by seed (and, when the learning rate
varies, each at its own best rate), and writes report.md, report.json and the figures into SWEEP_DIR. A
diverged run counts as a result (+inf, the worst); a failed or unfinished one as none.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinylm.analysis.runs import (
    DESIGN_CHOICES,
    ReportError,
    RunSummary,
    display_value,
    natural_key,
    read_runs,
)
from tinylm.analysis.stats import Comparison, Estimate, best_key, compare, estimate
from tinylm.files import plain
from tinylm.overrides import OverrideError, parse

REPORT_MD = "report.md"
REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
SENSITIVITY_PNG = "lr_sensitivity.png"
LR = "optim.lr"


@dataclass
class Setting:
    """The runs that differ only in their seed."""

    choices: dict[str, str]
    runs: list[RunSummary]
    results: dict[str, float] = field(default_factory=dict)  # seed -> final val loss (+inf: diverged)
    estimate: Estimate | None = None
    comparison: Comparison | None = None

    @property
    def diverged(self) -> int:
        return sum(not math.isfinite(v) for v in self.results.values())

    @property
    def without_result(self) -> int:
        return sum(run.result is None for run in self.runs)

    def label(self, columns: Sequence[str]) -> str:
        return " ".join(f"{c}={self.choices.get(c, '—')}" for c in columns) or "all runs"


@dataclass
class SweepReport:
    sweep_dir: Path
    runs: list[RunSummary]  # ranked: runs with a result by it, then the rest in job order
    columns: list[str]  # the choices shown per run: the design choices, then every override that varies
    common: dict[str, str]  # overrides every run shares
    settings: list[Setting]  # ranked by mean
    setting_columns: list[str]  # the columns that tell settings apart (all but seed)
    baseline: Setting | None
    tuned: list[Setting] = field(default_factory=list)  # each setting at its best lr (when lr varies)
    tuned_baseline: Setting | None = None
    confidence: float = 0.95

    @property
    def lr_varies(self) -> bool:
        return LR in self.setting_columns


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
    sweep_dir: str | Path, baseline: str | None = None, confidence: float = 0.95, curve: str | None = None
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

    settings = group_settings(runs, setting_columns, confidence)
    wanted = parse_choices(baseline) if baseline else None
    base = pick_baseline(settings, wanted, setting_columns)
    compare_all(settings, base, confidence)

    report = SweepReport(
        sweep_dir, rank_runs(runs), columns, common, settings, setting_columns, base, confidence=confidence
    )
    if report.lr_varies:
        tuned_columns = [c for c in setting_columns if c != LR]
        groups = _groups(settings, tuned_columns).values()
        best = sorted((min(group, key=_mean) for group in groups if any(s.results for s in group)), key=_mean)
        # Copies: the tuned table compares them with another baseline.
        report.tuned = [Setting(s.choices, s.runs, s.results, s.estimate) for s in best]
        tuned_wanted = {k: v for k, v in wanted.items() if k != LR} if wanted else None
        report.tuned_baseline = pick_baseline(report.tuned, tuned_wanted, tuned_columns)
        compare_all(report.tuned, report.tuned_baseline, confidence)
    return report


def group_settings(runs: Sequence[RunSummary], columns: Sequence[str], confidence: float) -> list[Setting]:
    """Runs grouped by every column but the seed, ranked by their mean result (settings without one last)."""
    settings: dict[tuple[str, ...], Setting] = {}
    for run in runs:
        key = tuple(str(run.choices.get(c, "—")) for c in columns)
        setting = settings.setdefault(key, Setting(dict(zip(columns, key, strict=True)), []))
        setting.runs.append(run)
        if run.result is not None:
            setting.results[run.seed] = run.result
    for setting in settings.values():
        if setting.results:
            setting.estimate = estimate(list(setting.results.values()), confidence)
    return sorted(settings.values(), key=_mean)


def _mean(setting: Setting) -> float:
    return setting.estimate.mean if setting.estimate and not math.isnan(setting.estimate.mean) else math.inf


def _groups(settings: Sequence[Setting], columns: Sequence[str]) -> dict[tuple[str, ...], list[Setting]]:
    groups: dict[tuple[str, ...], list[Setting]] = {}
    for setting in settings:
        groups.setdefault(tuple(setting.choices.get(c, "—") for c in columns), []).append(setting)
    return groups


def pick_baseline(
    settings: Sequence[Setting], wanted: dict[str, str] | None, columns: Sequence[str]
) -> Setting | None:
    """The setting named by `wanted` (the best of them if it names several), else the best setting."""
    with_results = [s for s in settings if s.results]
    if wanted is None:
        return min(with_results, key=_mean) if with_results else None
    unknown = sorted(set(wanted) - set(columns))
    if unknown:
        raise ReportError(
            f"--baseline names {unknown}, which do not vary in this sweep; choose among {', '.join(columns)}"
        )
    matching = [s for s in with_results if all(s.choices.get(k) == v for k, v in wanted.items())]
    if not matching:
        described = ",".join(f"{k}={v}" for k, v in wanted.items())
        raise ReportError(f"--baseline {described} matches no setting with a result in this sweep")
    groups = {id(s): list(s.results.values()) for s in matching}
    best = best_key(groups)
    return next(s for s in matching if id(s) == best)


def compare_all(settings: Sequence[Setting], baseline: Setting | None, confidence: float) -> None:
    for setting in settings:
        if baseline is not None and setting is not baseline and setting.results:
            setting.comparison = compare(setting.results, baseline.results, confidence)


def rank_runs(runs: Sequence[RunSummary]) -> list[RunSummary]:
    """Runs with a result by it (diverged ones after every finite result), then the others in job order."""
    return sorted(runs, key=lambda r: (r.result is None, r.result if r.result is not None else 0.0))


def _fmt(value: float | None, digits: int = 4, signed: bool = False) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "diverged" if value == math.inf else str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _fmt_interval(e: Estimate | None, signed: bool = False) -> str:
    if e is None or not e.has_interval:
        return "—"
    return f"[{_fmt(e.low, 4, signed)}, {_fmt(e.high, 4, signed)}]"


def _fmt_wall_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _settings_rows(
    settings: Sequence[Setting], columns: Sequence[str], baseline: Setting | None
) -> list[list]:
    rows = []
    for rank, s in enumerate(settings, start=1):
        e = s.estimate
        rows.append([
            rank if e is not None else "—",
            *(s.choices.get(c, "—") for c in columns),
            len(s.results),
            _fmt(e.mean if e else None),
            _fmt(e.sd if e else None),
            _fmt_interval(e),
            s.diverged,
            s.without_result,
            "baseline" if s is baseline else "",
        ])  # fmt: skip
    return rows


def _comparison_rows(
    settings: Sequence[Setting], columns: Sequence[str], baseline: Setting | None
) -> list[list]:
    rows = []
    for s in settings:
        if s is baseline or s.comparison is None:
            continue
        c = s.comparison
        rows.append([
            *(s.choices.get(col, "—") for col in columns),
            len(c.seeds),
            _fmt(c.difference.mean if c.difference else None, signed=True),
            _fmt_interval(c.difference, signed=True),
            c.verdict,
        ])  # fmt: skip
    return rows


def _tuned_rows(settings: Sequence[Setting], columns: Sequence[str], baseline: Setting | None) -> list[list]:
    rows = []
    for rank, s in enumerate(settings, start=1):
        c = s.comparison
        rows.append([
            rank, *(s.choices.get(col, "—") for col in columns), s.choices.get(LR, "—"), len(s.results),
            _fmt(s.estimate.mean if s.estimate else None), _fmt_interval(s.estimate),
            "baseline" if s is baseline else _fmt(c.difference.mean if c and c.difference else None, signed=True),
            _fmt_interval(c.difference if c else None, signed=True),
            c.verdict if c else "",
        ])  # fmt: skip
    return rows


def markdown(report: SweepReport) -> str:
    """The report as markdown: settings with intervals, paired comparisons, the tuned table, every run."""
    pct = f"{report.confidence:.0%}"
    cols = report.setting_columns
    text = [f"# Sweep report: {report.sweep_dir}", ""]
    n_seeds = max((len(s.results) for s in report.settings), default=0)
    text += [
        f"Final validation loss (nats/char) of {len(report.runs)} runs in {len(report.settings)} settings, "
        f"up to {n_seeds} seed{'s' if n_seeds != 1 else ''} each. Intervals are {pct} confidence intervals for the mean (Student t over "
        "seeds); a diverged run counts as the worst result, a failed or unfinished one as none.",
        "",
    ]
    if report.common:
        text += ["Shared by every run: " + " ".join(f"`{k}={v}`" for k, v in report.common.items()), ""]

    text += ["## Settings", ""]
    header = ["rank", *cols, "seeds", "mean", "sd", f"{pct} CI", "diverged", "no result", "note"]
    text += [*_table(header, _settings_rows(report.settings, cols, report.baseline)), ""]

    if report.lr_varies:
        tuned_cols = [c for c in cols if c != LR]
        base = report.tuned_baseline
        text += [
            "## Each setting at its own best learning rate",
            "",
            "The learning rate with the lowest mean over seeds, per setting; compared with "
            f"{'the baseline' if base is None else '`' + base.label(tuned_cols) + '`'} at its own best "
            "learning rate, seed by seed (difference < 0: lower loss than the baseline). The best rate is "
            "chosen on the same runs it is judged on, so the intervals are slightly optimistic.",
            "",
        ]
        header = ["rank", *tuned_cols, "best lr", "seeds", "mean", f"{pct} CI"]
        header += ["vs baseline", f"{pct} CI", "verdict"]
        text += [*_table(header, _tuned_rows(report.tuned, tuned_cols, base)), ""]
    elif report.baseline is not None and len(report.settings) > 1:
        text += [
            f"## Against the baseline `{report.baseline.label(cols)}`",
            "",
            "Paired seed by seed: the mean of (setting - baseline) over the seeds both have, and its "
            f"{pct} interval; < 0 is a lower loss than the baseline.",
            "",
        ]
        header = [*cols, "seeds", "mean difference", f"{pct} CI", "verdict"]
        text += [*_table(header, _comparison_rows(report.settings, cols, report.baseline)), ""]

    text += ["## Runs", "", *_runs_table(report), ""]
    counts = Counter(run.status for run in report.runs)
    text.append(
        f"{len(report.runs)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items())
        + ". bits/char = nats / ln 2; params without position embeddings; tokens/s and wall time depend on what "
        "else ran on the machine."
    )  # fmt: skip
    return "\n".join(text) + "\n"


def _runs_table(report: SweepReport) -> list[str]:
    header = ["rank", "run", *report.columns, "params", "final val loss", "best val loss", "bits/char"]
    header += ["tokens/s", "wall time", "steps", "status"]
    rows, rank = [], 0
    for run in report.runs:
        ranked = run.result is not None
        rank += ranked
        steps = "—" if run.steps is None else f"{run.steps}" + (f"/{run.max_steps}" if run.max_steps else "")
        status = run.status if not run.error else f"{run.status}: {run.error}"
        rows.append([
            rank if ranked else "—", run.name, *(run.choices.get(c, "—") for c in report.columns),
            "—" if run.params is None else f"{run.params:,}", _fmt(run.final_val_loss), _fmt(run.best_val_loss),
            _fmt(run.final_bpc, 3), "—" if run.tokens_per_s is None else f"{run.tokens_per_s:,.0f}",
            _fmt_wall_time(run.wall_time_s), steps, status if len(status) <= 120 else status[:117] + "...",
        ])  # fmt: skip
    return _table(header, rows)


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
            "vs_baseline": c and {"seeds": list(c.seeds), "difference": c.difference, "verdict": c.verdict},
        }

    return plain(
        {
            "sweep_dir": report.sweep_dir,
            "confidence": report.confidence,
            "common": report.common,
            "setting_columns": report.setting_columns,
            "baseline": report.baseline and report.baseline.choices,
            "settings": [setting(s) for s in report.settings],
            "tuned_baseline": report.tuned_baseline and report.tuned_baseline.choices,
            "tuned": [setting(s) for s in report.tuned],
            "runs": [
                {k: v for k, v in vars(r).items() if k not in ("val_curve", "curve")} for r in report.runs
            ],
        }
    )
