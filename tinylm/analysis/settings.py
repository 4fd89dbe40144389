"""Settings and families: the runs that differ only in their seed, grouped and estimated, and a family of them
compared with one baseline (docs/sweeps.md). Each is built once, with its results: judging a family returns
new settings that carry their comparisons, and changes none."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tinylm.analysis.estimates import (
    Comparison,
    Estimate,
    cross_fit,
    estimate,
    mean_or_inf,
    paired_tests,
    tuned_tests,
)
from tinylm.analysis.runs import ReportError, RunSummary, runs_frame, shared_reference
from tinylm.analysis.verdicts import judge
from tinylm.overrides import shown

LR = "optim.lr"


@dataclass(frozen=True)
class Setting:
    """The runs that differ only in their seed; in the tuned table, the runs of every learning rate, each
    seed's result taken at the rate the other seeds chose (`rates`)."""

    choices: dict[str, Any]
    runs: list[RunSummary]
    results: dict[str, float] = field(default_factory=dict)  # seed -> final val loss (+inf: diverged)
    windows: dict[str, list[float]] = field(default_factory=dict)  # seed -> final per-window losses
    estimate: Estimate | None = None
    comparison: Comparison | None = None
    rates: dict[str, float] = field(default_factory=dict)  # tuned: seed -> the rate chosen on the other seeds
    by_rate: dict[float, dict[str, float]] = field(default_factory=dict)  # tuned: rate -> seed -> result
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
    def reference(self) -> dict[str, float] | None:
        """The reference levels of its runs' validation split (one corpus per setting, or None)."""
        return shared_reference(self.runs)

    @property
    def without_result(self) -> int:
        return sum(run.result is None for run in self.runs)

    def label(self, columns: Sequence[str]) -> str:
        return setting_label(self.choices, columns)

    def key(self, columns: Sequence[str]) -> tuple[Any, ...]:
        return tuple(self.choices.get(c, "—") for c in columns)


def gain_over_unigram(mean: float, unigram: float) -> float:
    """How far below its corpus's unigram level (the characters' frequencies, nothing of their context) a loss
    got, in the loss's units: what the report reads a loss against, within and across corpora."""
    return unigram - mean


def setting_label(choices: dict[str, Any], columns: Sequence[str]) -> str:
    """`norm=pre act=gelu`: how a setting is named in tables, legends and figures."""
    return " ".join(f"{c}={shown(choices.get(c, '—'))}" for c in columns) or "all runs"


def varying(columns: Sequence[str], choices: Sequence[dict[str, Any]]) -> list[str]:
    """The columns whose value differs between `choices`: the others are stated once, not in every row."""
    return [c for c in columns if len({row.get(c, "—") for row in choices}) > 1]


@dataclass(frozen=True)
class Rules:
    """How a family is judged: the interval's confidence, the family-wise α, the equivalence margin δ, and
    whether the rate varies (then each setting is compared at cross-fitted rates)."""

    confidence: float
    alpha: float
    min_effect: float
    lr_varies: bool


def group_settings(runs: Sequence[RunSummary], columns: Sequence[str], confidence: float) -> list[Setting]:
    """Runs grouped by every column but the seed, ranked by their mean result (settings without one last)."""
    settings = []
    for key, rows in runs_frame(runs, columns).groupby(list(columns), sort=False, dropna=False):
        members = [runs[i] for i in rows.index]
        finished = [run for run in members if run.result is not None]
        results = {run.seed: run.result for run in finished}
        windows = {run.seed: run.window_losses for run in finished if run.window_losses}
        fit = estimate(list(results.values()), confidence) if results else None
        settings.append(Setting(dict(zip(columns, key, strict=True)), members, results, windows, fit))
    return sorted(settings, key=by_mean)


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
    for key, group in groups_of(settings, columns).items():
        by_rate = {
            s.choices[LR]: {seed: v for seed, v in s.results.items() if seeds is None or seed in seeds}
            for s in group
        }
        results: dict[str, float] = {}
        rates: dict[str, Any] = {}
        missing: tuple[str, ...] = ()
        if choose_on is not None:
            rate = chosen_rate(by_rate, choose_on)
            results = {seed: v for seed, v in by_rate[rate].items() if seed not in choose_on}
            rates = dict.fromkeys(results, rate)
        else:
            fit = cross_fit(by_rate)
            if fit is not None:
                results = {str(seed): v for seed, v in fit.values.items()}
                rates = {str(seed): rate for seed, rate in fit.rates.items()}
                missing = tuple(str(seed) for seed in fit.missing)
        at_rate = {s.choices[LR]: s for s in group}
        windows = {
            seed: at_rate[rate].windows[seed] for seed, rate in rates.items() if seed in at_rate[rate].windows
        }
        tuned.append(
            Setting(
                dict(zip(columns, key, strict=True)), [run for s in group for run in s.runs], results, windows,
                estimate(list(results.values()), confidence) if results else None, rates=rates,
                by_rate={rate: dict(runs) for rate, runs in by_rate.items()}, missing=missing,
            )
        )  # fmt: skip
    return sorted(tuned, key=by_mean)


def chosen_rate(by_rate: dict[float, dict[str, float]], choose_on: Collection[str]) -> float:
    """The rate with the lowest mean over the `choose_on` seeds (one that diverged on any never wins)."""
    return min(by_rate, key=lambda rate: mean_or_inf([v for s, v in by_rate[rate].items() if s in choose_on]))


def by_mean(setting: Setting) -> float:
    return setting.estimate.mean if setting.estimate and not math.isnan(setting.estimate.mean) else math.inf


def groups_of(settings: Sequence[Setting], columns: Sequence[str]) -> dict[tuple[Any, ...], list[Setting]]:
    groups: dict[tuple[Any, ...], list[Setting]] = {}
    for setting in settings:
        groups.setdefault(setting.key(columns), []).append(setting)
    return groups


def pick_baseline(settings: Sequence[Setting], wanted: dict[str, Any], columns: Sequence[str]) -> Setting:
    """The one setting `wanted` names."""
    unknown = sorted(set(wanted) - set(columns))
    if unknown:
        raise ReportError(
            f"the baseline names {unknown}, which do not vary in this sweep; choose among {', '.join(columns)}"
        )
    described = ",".join(f"{k}={shown(v)}" for k, v in wanted.items())
    matching = [s for s in settings if all(s.choices.get(k) == v for k, v in wanted.items())]
    if len(matching) > 1:
        unnamed = [c for c in columns if c not in wanted and len({s.choices.get(c) for s in matching}) > 1]
        raise ReportError(
            f"the baseline {described} matches {len(matching)} settings; name its {', '.join(unnamed)} too"
        )
    if not matching or not matching[0].results:
        raise ReportError(f"the baseline {described} matches no setting with a result in this sweep")
    return matching[0]


def judge_families(
    families: Sequence[tuple[Sequence[Setting], Setting]], rules: Rules, seeds: Collection[str] | None = None
) -> list[list[Setting]]:
    """Compare every setting of each family with its baseline, seed by seed (on `seeds` only, when given),
    and judge all the comparisons together, one Holm family; returns each family's settings in their order,
    the others with their comparison (new settings) and the baseline as it was."""
    rows = [(s, base) for settings, base in families for s in settings if s is not base]
    compared = [tests_against(only(s, seeds), only(base, seeds), rules) for s, base in rows]
    judged = {
        id(s): c for (s, _), c in zip(rows, judge(compared, rules.min_effect, rules.alpha), strict=True)
    }
    return [
        [s if s is base else replace(s, comparison=judged[id(s)]) for s in settings]
        for settings, base in families
    ]


def only(setting: Setting, seeds: Collection[str] | None) -> Setting:
    """`setting` with the results of `seeds` only (the tuned ones are already cut to them)."""
    if seeds is None or setting.by_rate:
        return setting
    return replace(
        setting,
        results={k: v for k, v in setting.results.items() if k in seeds},
        windows={k: v for k, v in setting.windows.items() if k in seeds},
    )


def tests_against(setting: Setting, base: Setting, rules: Rules, cross_fitted: bool = True) -> Comparison:
    """The tests of one row: paired over seeds, or, when the rate varies, between cross-fitted settings (the
    seeds added to a sequential design are judged at the rate the first look chose, plainly paired)."""
    windows = (setting.windows, base.windows)
    if rules.lr_varies and cross_fitted:
        return tuned_tests(setting.by_rate, base.by_rate, rules.min_effect, rules.confidence, windows)
    return paired_tests(setting.results, base.results, rules.min_effect, rules.confidence, windows)
