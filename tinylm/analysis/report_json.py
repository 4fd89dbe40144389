"""report.json: the report value as JSON, and back. `to_json` writes every value report.md states; `from_json`
rebuilds the report from it alone (`python scripts/report.py --from-json PATH/report.json`), so that the same
renderer writes the same report.md. Non-finite floats are the strings "inf"/"nan" (JSON has no such numbers).

A report.json written before `format` 3 was judged by the rule before (`settings.CROSS_FITTED`), and is read
as such. One written before `format` 2 lacks what it can be derived from: which runs make each setting (their
choices), each level of a ladder (the family's settings by level; its baseline is the row with no comparison),
the *Why* rows (the runs' stored findings and the verdicts) and the depth probe's rows (recomputed from the
runs' model sections: torch, seconds). Reading such a file derives them the way `build_report` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tinylm.analysis.diagnosis import Finding
from tinylm.analysis.estimates import Comparison, Estimate, Failures, Power
from tinylm.analysis.grouping import CROSS_FITTED, LR, Setting
from tinylm.analysis.ladder import Ladder, Rung, Trend, TrendWord, ladder_levels
from tinylm.analysis.ladder import trends as judge_trends
from tinylm.analysis.metric import Metric
from tinylm.analysis.outcome import Outcome, Verdict
from tinylm.analysis.report import SweepReport, parse_metric, run_columns
from tinylm.analysis.runs import RunSummary, natural_key
from tinylm.analysis.sequential_design import design_from
from tinylm.analysis.sizing import RowSize, Sizing, size_open_rows
from tinylm.analysis.sweep_probe import probe_rows
from tinylm.analysis.why import Shared, WhyRow, judged_runs, shared, still_learning, why_rows
from tinylm.files import plain
from tinylm.overrides import typed_choice as _typed

# 5: a settings row's seeds are `seeds` (up to 4 it called them `judged_on`, the seeds that only chose its
# rate among them; a tuned row's `judged_on` are its judging seeds, as before); 4: `metric` (what each run's
# result is; each setting's `final_val_loss` is the estimate of it), each run's `targets`; 3: `rule`, and each
# tuned setting's rate, tuned_on and judged_on; 2: everything report.md shows. Neither is read back: the
# results hold the seeds.
FORMAT = 5
# Too long for report.json, and read only by the figures: a report rebuilt from it draws none of them.
_CURVES = ("val_curve", "train_curve", "curve", "health", "window_losses")


def to_json(report: SweepReport) -> dict[str, Any]:
    """The report as JSON-ready data."""
    ladder = report.ladder
    return plain(
        {
            "format": FORMAT,
            "rule": report.rule,
            "metric": report.metric.flag,
            "sweep_dir": report.sweep_dir,
            "confidence": report.confidence,
            "alpha": report.alpha,
            "min_effect": report.min_effect,
            "baseline_source": report.baseline_source,
            "design": report.design,
            "common": report.common,
            "reference_levels": report.reference,
            "columns": report.columns,
            "setting_columns": report.setting_columns,
            "axis": report.axis,
            "baseline": report.baseline and report.baseline.choices,
            "settings": [
                _setting(s) | {"why": why}
                for s, why in zip(
                    report.settings, report.setting_why or [()] * len(report.settings), strict=True
                )
            ],
            "tuned_baseline": report.tuned_baseline and report.tuned_baseline.choices,
            "tuned": [_setting(s, tuned=True) for s in report.tuned],
            "runs": [
                {k: v for k, v in vars(r).items() if k not in (*_CURVES, "metric")}  # the report's metric
                | {"diagnosis": report.findings.get(r.path, [])}
                for r in report.runs
            ],
            "why": [
                {
                    "design": row.design,
                    "verdict": row.verdict,
                    "outcome": row.verdict and row.verdict.outcome,
                    "difference": row.difference,
                    "baseline": row.baseline,
                    "findings": row.findings,
                }
                for row in report.why
            ],
            "still_learning": report.still_learning,
            "sizing": report.sizing,
            "probe": report.probe,
        }
        | (
            {
                "ladder": {
                    "axis": ladder.axis,
                    "columns": ladder.columns,
                    "rungs": [
                        {
                            "level": rung.level,
                            "params": rung.params,
                            "steps": rung.steps,
                            "baseline": rung.baseline.choices,
                            "settings": [s.choices for s in rung.settings],
                        }
                        for rung in ladder.rungs
                    ],
                },
                "scale": ladder.trends,
            }
            if ladder is not None
            else {}
        )
    )


def _setting(s: Setting, tuned: bool = False) -> dict[str, Any]:
    """A settings row, or (`tuned`) a family row at the rate its tuning seeds chose, whose results are its
    judging seeds' alone."""
    return {
        "choices": s.choices,
        "runs": [run.name for run in s.runs],
        "results": dict(sorted(s.results.items(), key=lambda kv: natural_key(kv[0]))),
        "final_val_loss": s.estimate,
        "fails": s.fails,
        "fail_interval": s.fail_interval,
        "without_result": s.without_result,
        "rate": s.rate,
        "tuned_on": s.tuned_on,
        ("judged_on" if tuned else "seeds"): s.seeds,
        "rates": s.rates,
        "by_rate": s.by_rate,
        "missing": s.missing,
        "vs_baseline": s.comparison and _comparison(s.comparison),
        "added_seeds_vs_baseline": s.added and _comparison(s.added),
    }


def _comparison(c: Comparison) -> dict[str, Any]:
    return {
        "seeds": list(c.seeds), "unmatched": list(c.unmatched), "difference": c.difference, "p": c.p_value,
        "p_holm": c.p_adjusted, "p_equivalence": c.p_equivalence, "p_equivalence_holm": c.p_equivalence_adjusted,
        "failures": c.failures, "p_failures_holm": c.p_failures_adjusted, "power": c.power,
        "eval_se": c.eval_se, "constant": c.constant, "untested": c.untested, "differs": c.differs,
        "within_min_effect": c.within_min_effect, "fails_differently": c.fails_differently,
        "verdict": c.verdict, "outcome": c.verdict.outcome,
    }  # fmt: skip


def from_json(data: Mapping[str, Any]) -> SweepReport:
    """The report `to_json` wrote (or a report.json of the format before, its missing parts derived)."""
    metric = parse_metric(data.get("metric"))
    runs = [_run(r, metric) for r in data["runs"]]
    by_name = {run.name: run for run in runs}
    in_job_order = sorted(runs, key=lambda run: natural_key(str(run.path)))  # as the sweep's runs were read
    derived = int(data.get("format", 1)) < 2
    columns, common = run_columns(runs) if derived else (list(data["columns"]), _choices(data["common"]))
    setting_columns = list(data["setting_columns"])
    tuned_columns = [c for c in setting_columns if c != LR]

    def settings_of(rows: Sequence[Mapping[str, Any]], keyed: Sequence[str]) -> list[Setting]:
        built = []
        for row in rows:
            choices = _choices(row["choices"])
            if derived:  # the runs with these choices (and, tuned, every rate's)
                members = [
                    r for r in in_job_order if all(r.choices.get(c, "—") == choices.get(c) for c in keyed)
                ]
            else:
                members = [by_name[name] for name in row["runs"]]
            built.append(_setting_from(row, choices, members, derived))
        return built

    settings = settings_of(data["settings"], setting_columns)
    tuned = settings_of(data["tuned"], tuned_columns)
    if derived:  # each rate's results of a tuned setting, as cross-fitting read them
        tuned = [_with_rates(s, settings, tuned_columns) for s in tuned]
    family, family_columns = (tuned, tuned_columns) if tuned else (settings, setting_columns)
    ladder = _ladder(data, family, family_columns, derived, float(data["alpha"]))
    axis = ladder.axis if ladder is not None else list(data.get("axis") or [])
    findings = {run.path: [Finding(**f) for f in record.get("diagnosis") or []]
                for run, record in zip(runs, data["runs"], strict=True)}  # fmt: skip
    report = SweepReport(
        Path(data["sweep_dir"]), runs, columns, common, settings, setting_columns,
        _pick(settings, data.get("baseline")), tuned, _pick(tuned, data.get("tuned_baseline")),
        confidence=float(data["confidence"]), alpha=float(data["alpha"]), min_effect=float(data["min_effect"]),
        baseline_source=data.get("baseline_source"),
        design=design_from(data["design"]) if data.get("design") else None,
        reference=_levels(data.get("reference_levels")), axis=axis, ladder=ladder, findings=findings,
        rule=str(data.get("rule", CROSS_FITTED)), metric=metric,
    )  # fmt: skip
    # A report.json written before it held them: derived from the runs' stored findings, as build_report does.
    learning = data.get("still_learning")
    still = (
        tuple(_choices(choices) for choices in learning)
        if learning is not None
        else still_learning(report.family if report.ladder is None else [], report.family_baseline, findings)
    )
    if derived:
        explained = (family, family_columns) if len(family) > 1 else (settings, setting_columns)
        setting_why = [tuple(shared(s.runs, findings)) for s in settings]
        design = report.design
        horizon = design.horizon if design is not None else None
        sizing = None if ladder else size_open_rows(
            family, report.family_baseline, family_columns, report.min_effect, report.lr_varies, horizon,
            report.alpha,
        )  # fmt: skip
        return SweepReport(
            **{
                **vars(report),
                "setting_why": setting_why,
                "why": why_rows(*explained, findings, report.baselines),
                "still_learning": still,
                "sizing": sizing,
                "probe": probe_rows(runs),
            }
        )
    why = [_why(row, family if len(family) > 1 else settings, findings) for row in data.get("why") or []]
    return SweepReport(
        **{
            **vars(report),
            "setting_why": [tuple(_shared(f) for f in row.get("why") or ()) for row in data["settings"]],
            "why": why,
            "still_learning": still,
            "sizing": _sizing(data.get("sizing")),
            "probe": list(data.get("probe") or []),
        }
    )


def _sizing(data: Mapping[str, Any] | None) -> Sizing | None:
    if data is None:
        return None
    rows = tuple(
        RowSize(**{**row, "design": _choices(row["design"]), "seconds": float(row["seconds"])})
        for row in data["rows"]
    )
    return Sizing(
        rows, int(data["runs"]), float(data["seconds"]), bool(data["every_rate"]), int(data["open"])
    )


def _number(value: Any) -> float | None:
    """A float as `plain` wrote it: a number, or "inf"/"-inf"/"nan"."""
    return None if value is None else float(value)


def _choices(values: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): _typed(v) for k, v in values.items()}


def _levels(levels: Mapping[str, Any] | None) -> dict[str, float] | None:
    return {k: float(v) for k, v in levels.items()} if levels else None


def _run(record: Mapping[str, Any], metric: Metric) -> RunSummary:
    fields = {k: v for k, v in record.items() if k != "diagnosis"}
    numbers = ("final_val_loss", "best_val_loss", "final_bpc", "tokens_per_s", "wall_time_s")
    return RunSummary(**{
        **fields, **{k: _number(fields.get(k)) for k in numbers}, "path": Path(fields["path"]),
        "choices": _choices(fields["choices"]), "reference": _levels(fields.get("reference")), "metric": metric,
        "watched": tuple(fields["watched"]) if fields.get("watched") is not None else None,
    })  # fmt: skip


def _estimate(data: Mapping[str, Any] | None) -> Estimate | None:
    if data is None:
        return None
    return Estimate(float(data["mean"]), int(data["n"]), _number(data.get("sd")), _number(data.get("low")),
                    _number(data.get("high")), float(data.get("confidence", 0.95)))  # fmt: skip


def _verdict(text: str, outcome: str) -> Verdict:
    return Verdict(text, Outcome(outcome))


def _comparison_from(data: Mapping[str, Any] | None) -> Comparison | None:
    if data is None:
        return None
    # Before format 3 the failures were the diverged runs, under the keys that named them.
    failures, power = data.get("failures", data.get("divergence")), data.get("power")
    return Comparison(
        tuple(data["seeds"]), tuple(data.get("unmatched") or ()), _estimate(data.get("difference")),
        _number(data.get("p")), _number(data.get("p_equivalence")), bool(data.get("constant", False)),
        data.get("untested"),
        Failures(**{**failures, "p_value": float(failures["p_value"])}) if failures else None,
        _number(data.get("eval_se")), _number(data.get("p_holm")), _number(data.get("p_equivalence_holm")),
        _number(data.get("p_failures_holm", data.get("p_divergence_holm"))), bool(data.get("differs", False)),
        bool(data.get("within_min_effect", False)),
        bool(data.get("fails_differently", data.get("diverges_differently", False))),
        Power(float(power["sd"]), float(power["level"]), _number(power.get("resolvable")),
              power.get("seeds_for_min_effect")) if power else None,
        _verdict(data["verdict"], data["outcome"]),
    )  # fmt: skip


def _setting_from(
    row: Mapping[str, Any], choices: dict[str, Any], members: list[RunSummary], derived: bool
) -> Setting:
    by_rate = {
        _typed(rate): {k: float(v) for k, v in seeds.items()}
        for rate, seeds in (row.get("by_rate") or {}).items()
    }
    return Setting(
        choices, members, {k: float(v) for k, v in row["results"].items()}, {}, _estimate(row["final_val_loss"]),
        _comparison_from(row.get("vs_baseline")), rates={k: _typed(v) for k, v in (row.get("rates") or {}).items()},
        rate=_typed(row["rate"]) if row.get("rate") is not None else None, tuned_on=tuple(row.get("tuned_on") or ()),
        by_rate=by_rate, missing=tuple(row.get("missing") or ()), added=_comparison_from(row.get("added_seeds_vs_baseline")),
    )  # fmt: skip


def _with_rates(tuned: Setting, settings: Sequence[Setting], columns: Sequence[str]) -> Setting:
    """A tuned setting of a report.json before `format` 2: each rate's results from its settings table, and
    the seeds with no run at the rate the others chose (every seed cross-fitting saw, less those it judged)."""
    group = [s for s in settings if all(s.choices.get(c) == tuned.choices.get(c) for c in columns)]
    by_rate = {s.choices[LR]: dict(s.results) for s in group}
    seen = sorted(
        {seed for results in by_rate.values() for seed in results} - set(tuned.rates), key=natural_key
    )
    return Setting(**{**vars(tuned), "by_rate": by_rate, "missing": tuple(seen)})


def _pick(settings: Sequence[Setting], choices: Mapping[str, Any] | None) -> Setting | None:
    if not choices:
        return None
    wanted = _choices(choices)
    return next(s for s in settings if all(s.choices.get(k) == v for k, v in wanted.items()))


def _ladder(
    data: Mapping[str, Any], family: Sequence[Setting], columns: Sequence[str], derived: bool, alpha: float
) -> Ladder | None:
    if "scale" not in data:
        return None
    if not derived:
        stored = data["ladder"]
        rungs = [
            Rung(r["level"], r["params"], r["steps"], _pick(family, r["baseline"]),
                 [_pick(family, choices) for choices in r["settings"]])
            for r in stored["rungs"]
        ]  # fmt: skip
        trends = [
            Trend(_choices(t["design"]), _number(t.get("change")), _number(t.get("p_value")),
                  _number(t.get("p_adjusted")), t["verdict"], TrendWord(t["word"]))
            for t in data["scale"]
        ]  # fmt: skip
        return Ladder(list(stored["axis"]), list(stored["columns"]), rungs, trends)
    # The axis: the family's columns that do not name a design; each level's baseline has no comparison. The
    # words across levels are judged again from the levels' comparisons, by the rule in force (a word may
    # have been retired since: `changes sign, not resolved`).
    named = {key for t in data["scale"] for key in t["design"]}
    axis = [c for c in columns if c not in named]
    rungs = [
        Rung(level, params, steps, next(s for s in group if s.comparison is None), group)
        for level, params, steps, group in ladder_levels(family, axis)
    ]
    designs = [c for c in columns if c not in axis]
    return Ladder(axis, designs, rungs, judge_trends(rungs, designs, alpha, axis))


def _shared(f: Mapping[str, Any]) -> Shared:
    return Shared(
        f["kind"], f["count"], f["of"], tuple(f["steps"]), Finding(**f["example"]), f["seed"], f["recovered"],
        tuple(f.get("seeds") or ()),
    )  # fmt: skip


def _why(
    row: Mapping[str, Any], settings: Sequence[Setting], findings: Mapping[Path, Sequence[Finding]]
) -> WhyRow:
    design = _choices(row["design"])
    setting = _pick(settings, design)
    found = tuple(_with_seeds(_shared(f), setting, findings) for f in row["findings"])
    verdict = _verdict(row["verdict"], row["outcome"]) if row.get("verdict") is not None else None
    return WhyRow(setting, design, verdict, _number(row.get("difference")), row["baseline"], found)


def _with_seeds(f: Shared, setting: Setting | None, findings: Mapping[Path, Sequence[Finding]]) -> Shared:
    """A *Why* finding of a report.json written before each one named its runs' seeds: them, from the runs'
    stored findings, where as many of its judged runs show it as it counts (else none is named)."""
    if f.seeds or setting is None:
        return f
    showed = [
        run.seed
        for run in judged_runs(setting)
        if run.result is not None and any(found.kind == f.kind for found in findings.get(run.path, ()))
    ]
    seeds = tuple(sorted(showed, key=natural_key))
    return Shared(**{**vars(f), "seeds": seeds}) if len(seeds) == f.count else f
