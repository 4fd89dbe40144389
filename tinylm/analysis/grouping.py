"""Settings (the runs that differ only in their seed, grouped and estimated) and families of them judged
against a baseline (docs/sweeps.md). A failed run's result is +inf, counted apart from the losses."""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from scipy.stats import binomtest

from tinylm.analysis.estimates import Estimate, PairedTests, estimate, paired_tests
from tinylm.analysis.runs import ReportError, RunSummary, natural_key, shared_reference
from tinylm.analysis.verdicts import Comparison
from tinylm.overrides import shown

LR = "optim.lr"


class Rule(enum.StrEnum):
    """How a report tuned rates and counted failures (docs/results.md): every report built now tunes each rate
    on the sweep's seeds and judges it on others; format 2 and earlier cross-fitted it on the same seeds."""

    TUNED_THEN_JUDGED = "tuned then judged"
    CROSS_FITTED = "cross-fitted"


Chosen = TypeVar("Chosen", RunSummary, "Setting")


@dataclass(frozen=True)
class Setting:
    """The runs that differ only in their seed; tuned, those of every rate, judged at the `rate` its
    `tuned_on` seeds chose, on the other seeds run at that rate (`results`)."""

    choices: dict[str, Any]
    runs: list[RunSummary]
    results: dict[str, float] = field(default_factory=dict)  # seed -> its run's result (+inf: failed)
    windows: dict[str, list[float]] = field(default_factory=dict)  # seed -> final per-window losses
    estimate: Estimate | None = None  # over the runs that trained (finite results)
    comparison: Comparison | None = None
    rate: Any = None  # tuned: the rate chosen on `tuned_on`
    tuned_on: tuple[str, ...] = ()  # tuned: the seeds that chose the rate, none of them judged
    rates: dict[str, float] = field(default_factory=dict)  # tuned: seed -> the rate it is judged at
    by_rate: dict[float, dict[str, float]] = field(default_factory=dict)  # tuned: rate -> seed -> result
    added: Comparison | None = None  # a sequential design's, over the seeds added after its first look

    @property
    def answer(self) -> Comparison | None:
        """The comparison that answers for this setting: the added seeds' where its own left it open."""
        if self.comparison is not None and not self.comparison.resolved and self.added is not None:
            return self.added
        return self.comparison

    @property
    def fails(self) -> int:
        """Its runs that failed (diverged or collapsed; cross-fitted, diverged only)."""
        return sum(not math.isfinite(v) for v in self.results.values())

    @property
    def fail_interval(self) -> tuple[float, float] | None:
        """The 95% exact (Clopper-Pearson) interval of its failure rate; None without results."""
        if not self.results:
            return None
        ci = binomtest(self.fails, len(self.results)).proportion_ci(0.95, method="exact")
        return float(ci.low), float(ci.high)

    @property
    def mean_at_rate(self) -> float | None:
        """Tuned: the mean at its rate over every seed that trained there, tuning seeds too."""
        finite = [v for v in self.by_rate.get(self.rate, {}).values() if math.isfinite(v)]
        return statistics.fmean(finite) if finite else None

    @property
    def seeds(self) -> tuple[str, ...]:
        """The seeds it has a result for (a tuned row's: its judging seeds alone)."""
        return tuple(self.results)

    @property
    def reference(self) -> dict[str, float] | None:
        """The reference levels (unigram, bigram) its runs' validation split shares, if one."""
        return shared_reference(self.runs)

    @property
    def without_result(self) -> int:
        """How many of its runs have no result."""
        return sum(run.result is None for run in self.runs)

    def label(self, columns: Sequence[str]) -> str:
        """Its choices in `columns` as `key=value` words (the report's row name)."""
        return setting_label(self.choices, columns)

    def key(self, columns: Sequence[str]) -> tuple[Any, ...]:
        """Its choices in `columns`, in order (`—` where it has none): what matches it across tables."""
        return tuple(self.choices.get(c, "—") for c in columns)


def setting_label(choices: dict[str, Any], columns: Sequence[str] | None = None) -> str:
    """`norm=pre act=gelu`: a setting's name in tables and figures (by `columns`; default all its choices)."""
    named = choices if columns is None else columns
    return " ".join(f"{c}={shown(choices.get(c, '—'))}" for c in named) or "all runs"


def varying(columns: Sequence[str], choices: Sequence[dict[str, Any]]) -> list[str]:
    """The `columns` whose value differs between some of the `choices` rows, in order."""
    return [c for c in columns if len({row.get(c, "—") for row in choices}) > 1]


@dataclass(frozen=True)
class Rules:
    """How a family is judged: confidence, family-wise α, margin δ, whether the rate is tuned per setting."""

    confidence: float
    alpha: float
    min_effect: float
    lr_varies: bool


def group_settings(
    runs: Sequence[RunSummary], columns: Sequence[str], confidence: float, failed: Collection[Path] = ()
) -> list[Setting]:
    """Runs grouped by every column but the seed, ranked; the runs at `failed` paths count +inf."""
    settings = []
    for key, members in groups_of(runs, columns).items():
        finished = [run for run in members if run.result is not None]
        results = {run.seed: math.inf if run.path in failed else run.result for run in finished}
        # The final evaluation's windows, what a loss is the mean of: the steps to a level have none.
        windows = {r.seed: r.window_losses for r in finished if r.window_losses and r.metric.is_loss}
        choices = dict(zip(columns, key, strict=True))
        settings.append(Setting(choices, members, results, windows, trained(results, confidence)))
    return sorted(settings, key=ranking)


def trained(results: dict[str, float], confidence: float) -> Estimate | None:
    """The estimate of the finite `results` (a diverged run left out); None when none is finite."""
    values = [v for v in results.values() if math.isfinite(v)]
    return estimate(values, confidence) if values else None


def tuned_settings(
    settings: Sequence[Setting],
    columns: Sequence[str],
    confidence: float,
    tuned_on: Collection[str] | None = None,
    judged_on: Collection[str] | None = None,
) -> list[Setting]:
    """Each group of settings that differ only in their rate, at the rate its `tuned_on` seeds chose (None:
    all), judged on other seeds (`judged_on` only, when given): no seed both chooses and is judged."""
    tuned = []
    for key, group in groups_of(settings, columns).items():
        by_rate = {s.choices[LR]: dict(s.results) for s in group}
        seen = {seed for results in by_rate.values() for seed in results}
        tuning = seen if tuned_on is None else seen & set(tuned_on)
        rate = chosen_rate(by_rate, tuning)
        results = {
            seed: v
            for seed, v in by_rate.get(rate, {}).items()
            if seed not in tuning and (judged_on is None or seed in judged_on)
        }
        windows = next((s.windows for s in group if s.choices[LR] == rate), group[0].windows)
        setting = Setting(
            dict(zip(columns, key, strict=True)),
            [run for s in group for run in s.runs],
            results,
            {seed: windows[seed] for seed in results if seed in windows},
            trained(results, confidence),
            rate=rate,
            tuned_on=tuple(sorted(tuning, key=natural_key)),
            rates=dict.fromkeys(results, rate),
            by_rate=by_rate,
        )
        tuned.append(setting)
    return sorted(tuned, key=ranking)


def chosen_rate(by_rate: dict[Any, dict[str, float]], tuning: Collection[str]) -> Any:
    """The rate the `tuning` seeds choose: of those where the fewest of them failed, the lowest mean over
    those that trained (docs/sweeps.md); None without a tuning seed."""

    def rank(rate: Any) -> tuple[int, float]:
        values = [v for seed, v in by_rate[rate].items() if seed in tuning]
        finite = [v for v in values if math.isfinite(v)]
        return len(values) - len(finite), statistics.fmean(finite) if finite else math.inf

    candidates = [rate for rate in by_rate if any(seed in tuning for seed in by_rate[rate])]
    return min(candidates, key=rank) if candidates else None


def ranking(setting: Setting) -> tuple[float, float]:
    """As rates are chosen: the share of its runs that failed, then the mean (not yet judged: at its rate)."""
    share = setting.fails / len(setting.results) if setting.results else 0.0
    if setting.estimate is not None and not math.isnan(setting.estimate.mean):
        return share, setting.estimate.mean
    at_rate = setting.mean_at_rate
    return share, at_rate if at_rate is not None else math.inf


def groups_of(items: Sequence[Chosen], columns: Sequence[str]) -> dict[tuple[Any, ...], list[Chosen]]:
    """Runs or settings by their values of `columns` (a setting's `key`), in the order first seen."""
    groups: dict[tuple[Any, ...], list[Chosen]] = {}
    for item in items:
        groups.setdefault(tuple(item.choices.get(c, "—") for c in columns), []).append(item)
    return groups


def pick_baseline(settings: Sequence[Setting], wanted: dict[str, Any], columns: Sequence[str]) -> Setting:
    """The one setting whose choices are `wanted`; a ReportError names the choices to pick from
    when `wanted` names a column that does not vary, or matches no setting or several."""
    unknown = sorted(set(wanted) - set(columns))
    if unknown:
        raise ReportError(
            f"the baseline names {unknown}, which do not vary in this sweep; "
            f"choose among {', '.join(columns)}"
        )
    described = ",".join(f"{k}={shown(v)}" for k, v in wanted.items())
    matching = [s for s in settings if all(s.choices.get(k) == v for k, v in wanted.items())]
    if len(matching) > 1:
        unnamed = [c for c in columns if c not in wanted and len({s.choices.get(c) for s in matching}) > 1]
        raise ReportError(
            f"the baseline {described} matches {len(matching)} settings; name its {', '.join(unnamed)} too"
        )
    if not matching or not (matching[0].results or any(matching[0].by_rate.values())):  # tuned: any rate's
        raise ReportError(f"the baseline {described} matches no setting with a result in this sweep")
    return matching[0]


def tests_against(
    setting: Setting, base: Setting, rules: Rules, seeds: Collection[str] | None = None
) -> PairedTests:
    """`setting` paired by seed with `base` under `rules` (on `seeds` only, where given)."""
    mine, theirs, my_windows, their_windows = (
        {k: v for k, v in values.items() if seeds is None or k in seeds}
        for values in (setting.results, base.results, setting.windows, base.windows)
    )
    return paired_tests(mine, theirs, rules.min_effect, rules.confidence, (my_windows, their_windows))
