"""report.json: the report value through one schema, both ways (docs/sweeps.md). cattrs, as it (un)structures
the stdlib dataclasses from their own type hints (msgspec and pydantic need models of their own)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import fields
from functools import partial
from typing import Any

from cattrs import Converter
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from tinylm.analysis.estimates import PairedTests
from tinylm.analysis.grouping import Rule, Rules, Setting
from tinylm.analysis.ladder import Rung
from tinylm.analysis.report import SweepReport, families_of, portable
from tinylm.analysis.runs import ReportError, RunSummary, natural_key, parse_metric
from tinylm.analysis.verdicts import Outcome, Verdict
from tinylm.analysis.why import WhyRow, judged_runs, still_learning
from tinylm.files import plain

FORMAT = 10  # what each format holds: docs/sweeps.md
_LEFT_OUT = {
    RunSummary: ("val_curve", "train_curve", "curve", "health", "window_losses", "train_seconds"),
    Setting: ("windows",),
}
_REFERENCES = {
    SweepReport: ("family_baseline",),
    Rung: ("baseline", "settings"),
    WhyRow: ("setting",),
}


def to_json(report: SweepReport) -> dict[str, Any]:
    """The report as JSON-ready data."""
    return plain({"format": FORMAT} | _converter(None).unstructure(report))


def from_json(data: Mapping[str, Any]) -> SweepReport:
    """The report `to_json` wrote, of this format or (`upgrade`) an earlier one."""
    data = upgrade(dict(data))
    runs = _converter(None).structure(data["runs"], list[RunSummary])
    return _converter({run.name: run for run in runs}).structure(data, SweepReport)


# An earlier format's key -> the current one's (a comparison's; before format 3 failures were divergences).
_RENAMED = {
    "p": "p_value",
    "p_holm": "p_adjusted",
    "p_equivalence_holm": "p_equivalence_adjusted",
    "p_failures_holm": "p_failures_adjusted",
    "divergence": "failures",
    "p_divergence_holm": "p_failures_adjusted",
    "diverges_differently": "fails_differently",
    "final_val_loss": "estimate",
    "vs_baseline": "comparison",
    "added_seeds_vs_baseline": "added",
    "reference_levels": "reference",
}
_TESTS = [f.name for f in fields(PairedTests)]


def upgrade(old: dict[str, Any]) -> dict[str, Any]:
    """Formats 2 to 9 as this one writes them: what they lack is derived as `build_report` derives it."""
    version = int(old.get("format", 1))
    if version >= FORMAT:
        return old
    if version < 2:
        raise ReportError(f"report.json format {version} lacks what report.md shows: report its sweep again")
    # Format 8 names a path every run shares that the command gave absolute by its file's name.
    new = old | {"format": FORMAT, "common": {key: portable(value) for key, value in old["common"].items()}}
    # Format 10 holds the family's baseline once (before it: `baseline`, or `tuned_baseline` where tuned).
    tuned, untuned = (new.pop(key, None) for key in ("tuned_baseline", "baseline"))
    new.setdefault("family_baseline", tuned or untuned)
    if version >= 7:
        return new
    new, report = _format_6(new) if version < 6 else (new, from_json(new))
    # Format 7 records each family's adjustment, size and α, derived from what the report holds.
    r, rules = report, Rules(report.confidence, report.alpha, report.min_effect, report.lr_varies)
    pairs = [(s, base) for s in r.family if (base := r.baseline_of(s)) is not None and s is not base]
    families = families_of(pairs, r.settings, r.family_columns, rules, r.design, r.ladder, r.judged_apart)
    return new | {"families": plain(families if r.baselines else ())}


def _format_6(old: dict[str, Any]) -> tuple[dict[str, Any], SweepReport]:
    """Formats 2 to 5 as format 6 wrote them, and the report that is read as (all but what format 6 adds)."""
    old = _renamed(old)
    metric = plain(parse_metric(old.get("metric")))
    settings, tuned = [[_renamed(row) for row in old[rows]] for rows in ("settings", "tuned")]
    for row in settings + tuned:
        row.update({key: _comparison(row.get(key)) for key in ("comparison", "added")})
    new = old | {
        "format": FORMAT,
        "rule": old.get("rule", Rule.CROSS_FITTED.value),
        "metric": metric,
        "settings": settings,
        "tuned": tuned,
        "runs": [run | {"metric": metric} for run in old["runs"]],
        "findings": {run["path"]: run.get("diagnosis") or [] for run in old["runs"]},
        "setting_why": [row.get("why") or [] for row in old["settings"]],
        "ladder": old.get("ladder") and old["ladder"] | {"trends": old["scale"]},
        "why": [_why(row, tuned if len(tuned) > 1 else settings) for row in old["why"]],
    }
    report = from_json(new)
    # An older *Why* finding's seeds: its row's judged runs whose findings show it, if as many as counted.
    for row, stored in zip(report.why, new["why"], strict=True):
        for found, written in zip(row.findings, stored["findings"], strict=True):
            showed = [
                run.seed
                for run in judged_runs(row.setting)
                if run.result is not None
                and any(f.kind == found.kind for f in report.findings.get(run.path, ()))
            ]
            counted = sorted(showed, key=natural_key) if len(showed) == found.count else []
            written["seeds"] = list(found.seeds) or counted
    return new | {
        "still_learning": list(still_learning(report.family, report.family_baseline, report.findings)),
        "look_levels": list(report.design.look_levels(report.alpha) if report.design else ()),
    }, report


def _renamed(old: Mapping[str, Any]) -> dict[str, Any]:
    return {_RENAMED.get(key, key): value for key, value in old.items()}


def _comparison(old: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if old is None:
        return None
    named = _renamed(old)
    judged = {key: value for key, value in named.items() if key not in _TESTS} | {"verdict": _verdict(old)}
    return {"tests": {key: named[key] for key in _TESTS if key in named}, "judgement": judged}


def _verdict(old: Mapping[str, Any]) -> dict[str, str] | None:
    return None if old.get("verdict") is None else {"text": old["verdict"], "outcome": old["outcome"]}


def _why(row: Mapping[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    named = next(s for s in rows if all(s["choices"].get(k) == v for k, v in row["design"].items()))
    kept = {key: row[key] for key in ("design", "difference", "baseline")}
    findings = [dict(f) for f in row["findings"]]
    return kept | {"setting": named["choices"], "verdict": _verdict(row), "findings": findings}


def _is_hashable(kind: object) -> bool:
    return kind is Hashable


def _as_written(value: Any, _kind: object) -> Any:
    return value


def _write_verdict(verdict: Verdict) -> dict[str, str]:
    return {"text": str(verdict), "outcome": verdict.outcome.value}


def _read_verdict(value: dict[str, str], _kind: object) -> Verdict:
    return Verdict(value["text"], Outcome(value["outcome"]))


def _converter(runs: Mapping[str, RunSummary] | None) -> Converter:
    """The schema: for writing (`runs` None), or for reading a report whose runs are `runs`, by name."""
    c = Converter()
    read: dict[frozenset[tuple[str, Any]], Setting] = {}  # each setting read, by its choices
    c.register_structure_hook_func(_is_hashable, _as_written)  # a seed, as written
    c.register_unstructure_hook(Verdict, _write_verdict)
    c.register_structure_hook(Verdict, _read_verdict)

    def ref(setting: Setting | list[Setting] | None) -> Any:
        return [s.choices for s in setting] if isinstance(setting, list) else setting and setting.choices

    def deref(v: Any, _: Any) -> Any:
        return [deref(x, _) for x in v] if isinstance(v, list) else v and read[frozenset(v.items())]

    def remembered(value: Any, kind: Any, made: Any) -> Setting:
        setting = made(value, kind)
        read[frozenset(setting.choices.items())] = setting
        return setting

    def row(setting: Setting, seeds: str) -> dict[str, Any]:
        """A settings row with, for readers, its seeds (a tuned row's: those judged on) and its failures."""
        return c.unstructure(setting, Setting) | {seeds: list(setting.seeds), "fails": setting.fails}

    def tuned_rows(rows: list[Setting]) -> list[dict[str, Any]]:
        return [row(s, "judged_on") for s in rows]

    def settings_rows(rows: list[Setting]) -> list[dict[str, Any]]:
        return [row(s, "seeds") for s in rows]

    def run_names(settings_runs: list[RunSummary]) -> list[str]:
        return [run.name for run in settings_runs]

    def named_runs(names: list[str], _kind: object) -> list[RunSummary]:
        return [runs[name] for name in names]

    for kind in (RunSummary, Setting, Rung, WhyRow, SweepReport):  # each after those it holds
        omitted = {name: override(omit=True) for name in _LEFT_OUT.get(kind, ())}
        written = omitted | {name: override(unstruct_hook=ref) for name in _REFERENCES.get(kind, ())}
        read_as = omitted | {name: override(struct_hook=deref) for name in _REFERENCES.get(kind, ())}
        if kind is Setting:
            written["runs"] = override(unstruct_hook=run_names)
            read_as["runs"] = override(struct_hook=named_runs)
        if kind is SweepReport:
            written["tuned"] = override(unstruct_hook=tuned_rows)
            written["settings"] = override(unstruct_hook=settings_rows)
        c.register_unstructure_hook(kind, make_dict_unstructure_fn(kind, c, **written))
        made = make_dict_structure_fn(kind, c, **read_as)
        c.register_structure_hook(kind, partial(remembered, made=made) if kind is Setting else made)
    return c
