"""A sweep's runs as the report reads them: each directory below it with a `.hydra/overrides.yaml`, its
choices, how it ended (`metrics.json`; none: `unfinished`), its TensorBoard curves and its `--metric`."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from tinylm import layout
from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.errors import ConfigError, UserError
from tinylm.overrides import choices

DESIGN_CHOICES = ("norm", "norm_type", "act")  # always shown: the design choices tinylm exists to compare
_RECORDED = dict(final_val_loss=layout.VAL_LOSS, best_val_loss=layout.BEST_VAL_LOSS, final_bpc=layout.VAL_BPC)
HEALTH_PREFIX = "training_health/"
TRAIN_TIME = "train/time"  # Lightning's Throughput: seconds of training in this segment, validation left out
LOSS, STEPS_TO, TIME_TO = "loss", "steps_to", "time_to"
Curve = list[tuple[int, float, float]]  # (step, value, seconds since the run's first scalar)


class ReportError(UserError, ValueError):
    """The directory cannot be reported on: missing, empty, or not a sweep; or a bad report option."""


@dataclass(frozen=True)
class Metric:
    """What a report compares runs on (`--metric`): the final validation loss (`level` None), or the optimizer
    steps or training seconds at which the validation loss first reached `level` nats/char."""

    kind: str = LOSS
    level: float | None = None

    @property
    def is_loss(self) -> bool:
        """Whether the result is the final validation loss (not steps or seconds to a level)."""
        return self.kind == LOSS

    @property
    def flag(self) -> str:
        """As `--metric` names it: `loss`, `steps_to=1.88`."""
        return self.kind if self.level is None else f"{self.kind}={self.level:g}"

    @property
    def tag(self) -> str | None:
        """The key of a run's result in its metrics.json (None: the loss, read as ever)."""
        if self.level is None:
            return None
        return dict(zip((STEPS_TO, TIME_TO), layout.target_tags(self.level), strict=True))[self.kind]

    @property
    def noun(self) -> str:
        """The result in words: `final validation loss`, `steps to 1.88`."""
        if self.level is None:
            return "final validation loss"
        return f"{'steps' if self.kind == STEPS_TO else 'seconds'} to {self.level:g}"

    @property
    def units(self) -> str:
        """The result's units: nats/char, steps or s."""
        return {LOSS: "nats/char", STEPS_TO: "steps", TIME_TO: "s"}[self.kind]

    @property
    def lower(self) -> str:
        """What a difference below 0 means."""
        return {LOSS: "a lower loss", STEPS_TO: "fewer steps", TIME_TO: "less time"}[self.kind]

    @property
    def min_effect(self) -> float:
        """δ by default, in the metric's units: the smallest difference worth a claim (--min-effect)."""
        return {LOSS: MIN_EFFECT, STEPS_TO: 50.0, TIME_TO: 10.0}[self.kind]

    @property
    def digits(self) -> int:
        """Decimals of a mean or a difference as the report prints it."""
        return 4 if self.is_loss else 1


FINAL_LOSS = Metric()


def parse_metric(text: str | None) -> Metric:
    """`--metric`: `loss` (None: the default), `steps_to=1.88` or `time_to=1.88`."""
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


@dataclass
class RunSummary:
    """One run as the report reads it: its choices, status and result, and its curves."""

    path: Path
    name: str
    status: str
    choices: dict[str, Any]  # key -> the value as Hydra types it (a rate is a float)
    seed: str = "—"
    max_steps: int | None = None
    chars_per_step: int | None = None
    steps: int | None = None
    params: int | None = None
    final_val_loss: float | None = None  # its final evaluation's, else its last validation's
    best_val_loss: float | None = None
    final_bpc: float | None = None
    tokens_per_s: float | None = None
    wall_time_s: float | None = None
    error: str | None = None
    window_losses: list[float] | None = None  # each window's loss in its final evaluation, if it made one
    evaluated: str = "—"  # which evaluation final_val_loss is: `final, 960 of 7,477 validation windows`
    baseline: str | None = None  # the setting its experiment compares against (the config's `baseline`)
    ladder: str | None = None  # the choices its experiment judges level by level (the config's `ladder`)
    reference: dict[str, float] | None = None  # its validation split's uniform, unigram and bigram levels
    model: dict[str, Any] | None = None  # the model section of its config
    val_curve: Curve = field(default_factory=list)
    curve: Curve = field(default_factory=list)  # the tag the report plots
    train_curve: list[tuple[int, float]] = field(default_factory=list)  # tells overfitting from instability
    # (optimizer steps done, seconds of training so far, validation left out): Lightning's Throughput clock,
    # what a time multiplier reads
    train_seconds: list[tuple[int, float]] = field(default_factory=list)
    # Every training_health/<quantity>/block_<k> curve it logged, as (step, value): what `diagnosis` reads.
    health: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    val_in_training: float | None = None  # share of its validation found in training (metrics.json)
    diverged_at: int | None = None  # diverged: the step whose loss was first non-finite (metrics.json)
    targets: dict[str, float] = field(default_factory=dict)  # metrics.json's `target/<level>/step`, `/time_s`
    # The levels it watched (callbacks.targets.levels; None: none): an unwatched level is not "never reached".
    watched: tuple[float, ...] | None = None
    metric: Metric = FINAL_LOSS  # what `result` is (report.py --metric)

    @property
    def result(self) -> float | None:
        """By `metric`; +inf: diverged or a level never reached; None: crashed or never finished."""
        if self.status == "diverged":
            return math.inf
        if self.status == "completed" and self.metric.tag is not None:
            if self.metric.tag in self.targets:
                return self.targets[self.metric.tag]
            return math.inf if self.watches(self.metric.level) else None
        if self.status == "completed" and self.final_val_loss is not None:
            return self.final_val_loss if math.isfinite(self.final_val_loss) else math.inf
        return None

    def watches(self, level: float | None) -> bool:
        """Whether the run watched `level` (logged when its validation loss first reached it):
        an unwatched level is not one never reached."""
        return self.watched is not None and any(math.isclose(level or 0.0, w) for w in self.watched)


def find_run_dirs(sweep_dir: Path) -> list[Path]:
    """Every run directory below `sweep_dir`, in job order; a clear ReportError if there is none."""
    if not sweep_dir.is_dir():
        raise ReportError(
            f"{str(sweep_dir)!r} is not a directory; pass a sweep directory (runs/multirun/...)"
        )
    if (sweep_dir / layout.HYDRA_DIR / "overrides.yaml").is_file():
        above = sweep_dir.parent
        if (above / layout.SWEEP_RECORD).is_file():
            raise ReportError(
                f"{str(sweep_dir)!r} is one run of the sweep {str(above)!r}: report the sweep, "
                f"`python scripts/report.py {above}`"
            )
        raise ReportError(
            f"{str(sweep_dir)!r} is a single run, not a sweep: a report compares settings over seeds; its "
            f"curves are in `tensorboard --logdir {sweep_dir}` and how it ended in its metrics.json"
        )
    marked = {p.parent for name in (layout.SWEEP_RECORD, layout.DESIGN_FILE) for p in sweep_dir.rglob(name)}
    # Less those inside another: a sweep's added seeds are launched as sweeps of their own in its added/.
    sweeps = sorted(d for d in marked if not any(other in d.parents for other in marked))
    if sweeps and sweeps != [sweep_dir]:
        listed = ", ".join(str(s) for s in sweeps)
        raise ReportError(
            f"{str(sweep_dir)!r} holds {len(sweeps)} sweep{'s' if len(sweeps) > 1 else ''} ({listed}); "
            "report each by its own directory: pooled, their seeds would be judged as one experiment"
        )
    runs = [p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")]
    if not runs:
        raise ReportError(
            f"no runs in {str(sweep_dir)!r} (no */.hydra/overrides.yaml); pass a sweep directory made by "
            "`scripts/train.py -m ...`, e.g. runs/multirun/<date>/<time>"
        )

    def job_order(path: Path) -> list[Any]:
        return natural_key(path.relative_to(sweep_dir).as_posix())

    return sorted(runs, key=job_order)


def natural_key(text: str) -> list[Any]:
    """`2_x` before `10_x`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _series(scalars: Any, tag: str, start: float = 0.0) -> Curve:
    """`tag` as (step, value, seconds since `start`); a step logged twice (a resumed run) keeps the latest."""
    rows = scalars[scalars.tag == tag].sort_values(["step", "wall_time"])
    latest = rows.drop_duplicates("step", keep="last")
    return [
        (int(s), float(v), float(w) - start)
        for s, v, w in zip(latest.step, latest.value, latest.wall_time, strict=True)
    ]


def _tokens_per_second(scalars: Any) -> float | None:
    """Median of Lightning's rolling throughput; for a run too short for its window, its counters' mean."""
    for tag in ("train/device/items_per_sec", "train/items_per_sec"):
        values = [v for _, v, _ in _series(scalars, tag) if math.isfinite(v)]
        if values:
            return statistics.median(values)
    lengths, times = _series(scalars, "train/lengths"), _series(scalars, TRAIN_TIME)
    if len(lengths) >= 2 and len(times) >= 2 and times[-1][1] > times[0][1]:
        return (lengths[-1][1] - lengths[0][1]) / (times[-1][1] - times[0][1])
    return None


def _training_clock(logged: Curve) -> list[tuple[int, float]]:
    """`train/time` as (steps done, seconds): it is logged at the step before (the weights it timed), and
    starts again from 0 in a resumed segment, which continues from the last time of the one before."""
    clock, carried, last = [], 0.0, 0.0
    for step, seconds, _ in logged:
        if seconds < last:
            carried += last
        last = seconds
        clock.append((step + 1, carried + seconds))
    return clock


def _logged(scalars: Any | None, curve_tag: str | None) -> dict[str, Any]:
    if scalars is None or scalars.empty:
        return {}
    start = float(scalars.wall_time.min())
    val, bpc = _series(scalars, layout.VAL_LOSS, start), _series(scalars, layout.VAL_BPC)
    health = [str(tag) for tag in scalars.tag.unique() if str(tag).startswith(HEALTH_PREFIX)]
    logged = {
        "val_curve": val,
        "curve": _series(scalars, curve_tag, start) if curve_tag else val,
        "train_curve": [(step, value) for step, value, _ in _series(scalars, layout.TRAIN_LOSS)],
        "train_seconds": _training_clock(_series(scalars, TRAIN_TIME)),
        "health": {tag: [(step, value) for step, value, _ in _series(scalars, tag)] for tag in health},
        "tokens_per_s": _tokens_per_second(scalars),
    }
    if val:
        best = min((v for _, v, _ in val if math.isfinite(v)), default=None)
        logged |= {
            "final_val_loss": val[-1][1],
            "best_val_loss": best,
            "final_bpc": bpc[-1][1] if bpc else None,
        }
    return logged


def _configured(run_dir: Path) -> dict[str, Any]:
    config = OmegaConf.load(run_dir / layout.HYDRA_DIR / layout.CONFIG_FILE)
    select = partial(OmegaConf.select, config, default=None, throw_on_resolution_failure=False)
    # Each choice as Hydra types it: two Optuna trials at 0.00125029 and 0.00125039 stay two settings.
    overrides = OmegaConf.to_container(OmegaConf.load(run_dir / layout.HYDRA_DIR / "overrides.yaml")) or []
    batch, block = select("data.batch_size"), select("model.block_size")
    accumulate = select("trainer.accumulate_grad_batches") or 1
    chars = batch * block * accumulate if isinstance(batch, int) and isinstance(block, int) else None
    levels = select("callbacks.targets.levels")
    watched = tuple(v for v in map(_number, levels) if v is not None) if OmegaConf.is_list(levels) else None
    named = {key: select(key) for key in ("baseline", "ladder")}
    # The model section where `ModelConfig` accepts it: a job refused for its model settings has none.
    model = OmegaConf.to_container(config.model, resolve=True) if "model" in config else None
    if model is not None:
        from tinylm.model.config import ModelConfig  # torch only once a sweep is read

        try:
            ModelConfig.from_dict(dict(model))  # type: ignore[arg-type]
        except ConfigError:
            model = None
    return {
        "choices": {choice.key: choice.typed for choice in choices([str(line) for line in overrides])}
        | {n: str(select(f"model.{n}")) for n in DESIGN_CHOICES},
        "seed": str(select("seed")),
        "max_steps": _integer(select("trainer.max_steps")),
        "chars_per_step": chars,
        **{key: str(value) if value else None for key, value in named.items()},
        "model": model,
        "watched": watched,
    }


def summarize_run(
    run_dir: Path, sweep_dir: Path, scalars: Any, curve_tag: str | None = None, metric: Metric = FINAL_LOSS
) -> RunSummary:
    """One run from its config, its record (metrics.json; none: `unfinished`) and TensorBoard `scalars`."""
    record = layout.read_run_record(run_dir) or {}
    logged = _logged(scalars, curve_tag)
    if not logged.get("val_curve"):  # its record's last validation stands for the curve's
        logged |= {name: _number(record.get(key)) for name, key in _RECORDED.items()}
    # Its evaluation after the last step (None: it made none) stands for its last validation.
    final = _number(record.get(layout.FINAL_VAL_LOSS))
    windows = record.get(layout.FINAL_WINDOW_LOSSES)
    windows = [float(v) for v in windows] if isinstance(windows, list) and final is not None else None
    evaluated = "—" if logged["final_val_loss"] is None else "last validation"
    if final is not None:
        logged |= {"final_val_loss": final, "final_bpc": final / math.log(2)}
        available = _integer(record.get(layout.FINAL_SPLIT_WINDOWS))
        evaluated = f"final, {layout.evaluated_windows(len(windows), available)}" if windows else "final"
    steps, train = _integer(record.get("step")), logged.get("train_curve")
    reference = record.get(layout.REFERENCE_LEVELS)
    number = re.match(r"(\d+)_", run_dir.name)  # Hydra prefixes a job's directory with its number
    return RunSummary(
        path=run_dir,
        name=(run_dir.parent / number[1] if number else run_dir).relative_to(sweep_dir).as_posix(),
        status=str(record["status"]) if record else "unfinished",
        steps=steps if steps is not None or not train else train[-1][0] + 1,
        params=int(record["params"]) if _number(record.get("params")) is not None else None,
        wall_time_s=_number(record.get("wall_time_s")),
        error=record.get("error"),
        window_losses=windows,
        evaluated=evaluated,
        reference={k: float(v) for k, v in reference.items()} if isinstance(reference, dict) else None,
        val_in_training=_number(record.get(layout.VAL_IN_TRAINING)),
        diverged_at=_integer(record.get(layout.DIVERGED_AT)),
        targets={
            k: float(v)
            for k, v in record.items()
            if k.startswith(layout.TARGET_PREFIX) and _number(v) is not None
        },
        metric=metric,
        **logged,
        **_configured(run_dir),
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def read_runs(
    sweep_dir: str | Path, curve_tag: str | None = None, metric: Metric = FINAL_LOSS
) -> list[RunSummary]:
    """Every run of the sweep in job order, its `result` by `metric` (a ReportError where no run recorded its
    level: a level never reached is not recorded); `curve_tag` picks each run's `curve`."""
    import tbparse

    sweep_dir = Path(sweep_dir)
    run_dirs = find_run_dirs(sweep_dir)
    frame = tbparse.SummaryReader(
        str(sweep_dir), extra_columns={"dir_name", "wall_time"}, event_types={"scalars"}
    ).scalars
    parts: dict[Path, list[Any]] = {}
    for dir_name, rows in frame.groupby("dir_name") if not frame.empty else ():
        event_dir = sweep_dir / str(dir_name)
        owner = next((p for p in (event_dir, *event_dir.parents) if p in run_dirs), None)
        if owner is not None:  # a run may log into more than one TensorBoard directory
            parts.setdefault(owner, []).append(rows)
    scalars = {owner: pd.concat(frames, ignore_index=True) for owner, frames in parts.items()}
    runs = [
        summarize_run(run_dir, sweep_dir, scalars.get(run_dir), curve_tag, metric) for run_dir in run_dirs
    ]
    if metric.tag is None or any(metric.tag in run.targets for run in runs):
        return runs
    levels = {
        level for run in runs for level in run.watched or () if Metric(metric.kind, level).tag in run.targets
    }
    recorded = (
        f"the runs recorded {', '.join(f'{level:g}' for level in sorted(levels, reverse=True))}"
        if levels
        else "no run recorded any level (callbacks.targets.levels, in metrics.json as target/<level>/step)"
    )
    raise ReportError(f"--metric {metric.flag!r}: no run of this sweep reached {metric.level:g}; {recorded}")


def shared_reference(runs: Sequence[RunSummary]) -> dict[str, float] | None:
    """The reference levels every run that recorded them shares; None if none did or they differ."""
    levels = [run.reference for run in runs if run.reference]
    first = levels[0] if levels else {}
    differ = any(set(o) != set(first) or any(abs(o[k] - first[k]) > 1e-9 for k in o) for o in levels)
    return first if first and not differ else None
