"""A sweep's runs as the report sees them: every directory below the sweep with a `.hydra/overrides.yaml`
(a grid's jobs, or an Optuna study's), with its choices, how it ended (`metrics.json`; none: `unfinished`)
and its TensorBoard curves (read in one pass with tbparse).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
from omegaconf import OmegaConf

from tinylm.analysis.metric import FINAL_LOSS, Metric
from tinylm.errors import ConfigError, UserError
from tinylm.layout import (
    BEST_VAL_LOSS,
    CONFIG_FILE,
    DESIGN_FILE,
    DIVERGED_AT,
    FINAL_SPLIT_WINDOWS,
    FINAL_VAL_LOSS,
    FINAL_WINDOW_LOSSES,
    HYDRA_DIR,
    REFERENCE_LEVELS,
    SWEEP_RECORD,
    TARGET_PREFIX,
    TRAIN_LOSS,
    VAL_BPC,
    VAL_IN_TRAINING,
    VAL_LOSS,
    VAL_WINDOWS_IN_TRAINING,
    evaluated_windows,
    read_run_record,
)
from tinylm.overrides import choices

# Always shown: the design choices tinylm exists to compare.
DESIGN_CHOICES = ("norm", "norm_type", "act")
_THROUGHPUT_TAGS = ("train/device/items_per_sec", "train/items_per_sec")
# Each metric's tag, then what runs logged before the losses were grouped under loss/ (still read).
_VAL_LOSS = (VAL_LOSS, "val/loss")
_VAL_BPC = (VAL_BPC, "val/bpc")
_TRAIN_LOSS = (TRAIN_LOSS, "train/loss")
_BEST_VAL_LOSS = (BEST_VAL_LOSS, "best/val_loss")
HEALTH_PREFIX = "training_health/"
# What a run without a final evaluation is read at: its last periodic validation (data.val_windows).
LAST_VALIDATION = "last validation"


class ReportError(UserError, ValueError):
    """The directory cannot be reported on: missing, empty, or not a sweep; or a bad report option."""


@dataclass
class RunSummary:
    """One run of a sweep."""

    path: Path
    name: str
    status: str
    choices: dict[str, Any]  # key -> the value as Hydra types it (a rate is a float)
    seed: str = "—"
    max_steps: int | None = None
    chars_per_step: int | None = None
    steps: int | None = None
    params: int | None = None
    final_val_loss: float | None = None
    best_val_loss: float | None = None
    final_bpc: float | None = None
    tokens_per_s: float | None = None
    wall_time_s: float | None = None
    error: str | None = None
    # The final evaluation's loss of every window (metrics.json), when the run made one: final_val_loss is
    # then their mean; else it is the last validation of the TensorBoard curve.
    window_losses: list[float] | None = None
    # Which evaluation final_val_loss comes from: `final, 960 of 7,477 validation windows`, `last validation`.
    evaluated: str = "—"
    baseline: str | None = None  # the setting its experiment compares against (the config's `baseline`)
    ladder: str | None = None  # the choices its experiment judges level by level (the config's `ladder`)
    reference: dict[str, float] | None = None  # its validation split's uniform, unigram and bigram levels
    model: dict[str, Any] | None = None  # the model section of its config
    # (step, value, seconds since the run's first scalar) of the validation loss, and of the tag plotted
    val_curve: list[tuple[int, float, float]] = field(default_factory=list)
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    # (step, value) of the training loss: what tells overfitting (it keeps falling) from instability.
    train_curve: list[tuple[int, float]] = field(default_factory=list)
    # Every training_health/<quantity>/block_<k> curve it logged, as (step, value): what `diagnosis` reads.
    health: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    val_in_training: float | None = None  # share of its validation found in training (metrics.json)
    diverged_at: int | None = None  # diverged: the step whose loss was first non-finite (metrics.json)
    # metrics.json's `target/<level>/step` and `target/<level>/time_s`: the levels its validation loss reached.
    targets: dict[str, float] = field(default_factory=dict)
    # The levels it watched (callbacks.targets.levels; None: its config names none): a level it did not watch
    # has no record to read as "never reached".
    watched: tuple[float, ...] | None = None
    metric: Metric = FINAL_LOSS  # what `result` is (report.py --metric)

    @property
    def result(self) -> float | None:
        """What a comparison counts: by `metric`, the final val loss of a completed run, or the steps or
        seconds at which it reached the level (+inf, a failure, where it never did); +inf for a diverged one,
        None for a run that failed or never finished."""
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
        return self.watched is not None and any(math.isclose(level or 0.0, w) for w in self.watched)


def find_run_dirs(sweep_dir: str | Path) -> list[Path]:
    """Every run directory below `sweep_dir`, in job order; a clear ReportError if there is none."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(
            f"{str(sweep_dir)!r} is not a directory; pass a sweep directory (runs/multirun/...)"
        )
    if (sweep_dir / HYDRA_DIR / "overrides.yaml").is_file():
        above = sweep_dir.parent
        if (above / SWEEP_RECORD).is_file():
            raise ReportError(
                f"{str(sweep_dir)!r} is one run of the sweep {str(above)!r}: report the sweep, "
                f"`python scripts/report.py {above}`"
            )
        raise ReportError(
            f"{str(sweep_dir)!r} is a single run, not a sweep: a report compares settings over seeds; its curves "
            f"are in `tensorboard --logdir {sweep_dir}` and how it ended in its metrics.json"
        )
    sweeps = sweeps_below(sweep_dir)
    if sweeps and sweeps != [sweep_dir]:
        listed = ", ".join(str(s) for s in sweeps)
        raise ReportError(
            f"{str(sweep_dir)!r} holds {len(sweeps)} sweep{'s' if len(sweeps) > 1 else ''} ({listed}); report "
            "each by its own directory: pooled, their seeds would be judged as one experiment"
        )
    runs = [p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")]
    if not runs:
        raise ReportError(
            f"no runs in {str(sweep_dir)!r} (no */.hydra/overrides.yaml); pass a sweep directory made by "
            "`scripts/train.py -m ...`, e.g. runs/multirun/<date>/<time>"
        )
    return sorted(runs, key=lambda p: natural_key(p.relative_to(sweep_dir).as_posix()))


def sweeps_below(directory: Path) -> list[Path]:
    """The sweeps in `directory` (itself included): each directory with a sweep record or a sequential design,
    less those inside another (a sweep's added seeds are launched as sweeps of their own in its added/)."""
    marked = {p.parent for name in (SWEEP_RECORD, DESIGN_FILE) for p in directory.rglob(name)}
    return sorted(d for d in marked if not any(other in d.parents for other in marked))


def natural_key(text: str) -> list[Any]:
    """`2_x` before `10_x`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _short_name(run_dir: Path, sweep_dir: Path) -> str:
    """The run's path below the sweep, its own directory cut to the job number Hydra prefixes it with."""
    relative = run_dir.relative_to(sweep_dir)
    number = re.match(r"(\d+)_", relative.name)
    return (relative.parent / number[1]).as_posix() if number else relative.as_posix()


def read_overrides(run_dir: Path) -> dict[str, Any]:
    """The run's command-line choices (Hydra's record of its overrides), key -> value as Hydra types it: two
    Optuna trials at 0.00125029 and 0.00125039 stay two settings, however they are printed."""
    lines = OmegaConf.to_container(OmegaConf.load(run_dir / HYDRA_DIR / "overrides.yaml")) or []
    return {choice.key: choice.typed for choice in choices([str(line) for line in lines])}


def _config_value(config: Any, key: str) -> Any:
    return OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)


def _chars_per_step(config: Any) -> int | None:
    """Characters per optimizer step: batch × block × accumulated batches."""
    batch, block = _config_value(config, "data.batch_size"), _config_value(config, "model.block_size")
    accumulate = _config_value(config, "trainer.accumulate_grad_batches") or 1
    return batch * block * accumulate if isinstance(batch, int) and isinstance(block, int) else None


def _levels(levels: Any) -> tuple[float, ...] | None:
    """callbacks.targets.levels as numbers, or None where the config has no such list."""
    return (
        tuple(float(v) for v in levels if isinstance(v, int | float)) if OmegaConf.is_list(levels) else None
    )


def _buildable_model(config: Any) -> dict[str, Any] | None:
    """The run's model section where `ModelConfig` accepts it: a job refused for its model settings (a `failed`
    row, its error recorded) has no model to rebuild, e.g. for the depth probe beside the sweep."""
    if "model" not in config:
        return None
    from tinylm.model.config import ModelConfig  # torch only once a sweep is read

    model = OmegaConf.to_container(config.model, resolve=True)
    try:
        ModelConfig.from_dict(dict(model))  # type: ignore[arg-type]
    except ConfigError:
        return None
    return model  # type: ignore[return-value]


def read_scalars(sweep_dir: Path, run_dirs: Sequence[Path]) -> dict[Path, Any]:
    """Every run's TensorBoard scalars (a pandas DataFrame: step, tag, value, wall_time), read in one pass."""
    import tbparse

    frame = tbparse.SummaryReader(
        str(sweep_dir), extra_columns={"dir_name", "wall_time"}, event_types={"scalars"}
    ).scalars
    if frame.empty:
        return {}
    owners = set(run_dirs)
    parts: dict[Path, list[Any]] = {}
    for dir_name, rows in frame.groupby("dir_name"):
        event_dir = sweep_dir / str(dir_name)
        owner = next((p for p in (event_dir, *event_dir.parents) if p in owners), None)
        if owner is not None:  # a run may log into more than one TensorBoard directory
            parts.setdefault(owner, []).append(rows)
    return {owner: pd.concat(frames, ignore_index=True) for owner, frames in parts.items()}


def _series(scalars: Any, tags: str | Sequence[str]) -> list[tuple[int, float, float]]:
    """The first of `tags` that was logged, as (step, value, wall time) by step; a step logged twice (a
    resumed run) keeps its latest value."""
    names = [tags] if isinstance(tags, str) else list(tags)
    tag = next((t for t in names if (scalars.tag == t).any()), names[0])
    rows = scalars[scalars.tag == tag].sort_values(["step", "wall_time"])
    latest = rows.drop_duplicates("step", keep="last")
    return [
        (int(s), float(v), float(w))
        for s, v, w in zip(latest.step, latest.value, latest.wall_time, strict=True)
    ]


def _tokens_per_second(scalars: Any) -> float | None:
    """Median of Lightning's rolling throughput, or, for runs too short to fill its window, the mean rate
    between the first and last logged step from its cumulative counters."""
    for tag in _THROUGHPUT_TAGS:
        values = [v for _, v, _ in _series(scalars, tag) if math.isfinite(v)]
        if values:
            return statistics.median(values)
    lengths, times = _series(scalars, "train/lengths"), _series(scalars, "train/time")
    if len(lengths) >= 2 and len(times) >= 2 and times[-1][1] > times[0][1]:
        return (lengths[-1][1] - lengths[0][1]) / (times[-1][1] - times[0][1])
    return None


class _Curves(NamedTuple):
    """A run's TensorBoard scalars, each as (step, value, seconds since the run's first scalar)."""

    val: list[tuple[int, float, float]]
    shown: list[tuple[int, float, float]]  # the tag the report plots (`curve_tag`; else the validation loss)
    train: list[tuple[int, float, float]]
    bpc: list[tuple[int, float, float]]
    health: dict[str, list[tuple[int, float]]]
    tokens_per_s: float | None


def _curves(scalars: Any | None, curve_tag: str | None) -> _Curves:
    if scalars is None or scalars.empty:
        return _Curves([], [], [], [], {}, None)
    start = float(scalars.wall_time.min())

    def since_start(tags: str | Sequence[str]) -> list[tuple[int, float, float]]:
        return [(s, v, w - start) for s, v, w in _series(scalars, tags)]

    val = since_start(_VAL_LOSS)
    health = {
        str(tag): [(step, value) for step, value, _ in _series(scalars, str(tag))]
        for tag in scalars.tag.unique()
        if str(tag).startswith(HEALTH_PREFIX)
    }
    shown = since_start(curve_tag) if curve_tag else val
    return _Curves(
        val, shown, since_start(_TRAIN_LOSS), since_start(_VAL_BPC), health, _tokens_per_second(scalars)
    )


def _window_losses(record: dict[str, Any]) -> list[float] | None:
    windows = record.get(FINAL_WINDOW_LOSSES)
    return [float(v) for v in windows] if isinstance(windows, list) else None


def _evaluated(record: dict[str, Any], final: float | None, last: float | None) -> str:
    """Which evaluation the final loss is: `final, 960 of 7,477 validation windows`, `last validation`, `—`."""
    if final is None:
        return "—" if last is None else LAST_VALIDATION
    count, available = len(_window_losses(record) or []), record.get(FINAL_SPLIT_WINDOWS)
    if not count:
        return "final"
    return f"final, {evaluated_windows(count, available if isinstance(available, int) else None)}"


def _last_bpc(record: dict[str, Any], curves: _Curves) -> float | None:
    """The bits per character of the last validation: logged beside its loss, or recorded without TensorBoard."""
    if curves.val:
        return curves.bpc[-1][1] if curves.bpc else None
    return _recorded(record, _VAL_BPC)


def _best_val_loss(record: dict[str, Any], val: list[tuple[int, float, float]]) -> float | None:
    if val:
        return min((v for _, v, _ in val if math.isfinite(v)), default=None)
    return _recorded(record, _BEST_VAL_LOSS)


def _steps(record: dict[str, Any], train: list[tuple[int, float, float]]) -> int | None:
    if isinstance(record.get("step"), int):
        return record["step"]
    return train[-1][0] + 1 if train else None


def summarize_run(
    run_dir: Path,
    sweep_dir: Path,
    scalars: Any | None,
    curve_tag: str | None = None,
    metric: Metric = FINAL_LOSS,
) -> RunSummary:
    """One run from its composed config (Hydra's copy), its record (metrics.json; none: `unfinished`) and its
    TensorBoard `scalars`; without TensorBoard its record's last validation stands for the curve's."""
    config = OmegaConf.load(run_dir / HYDRA_DIR / CONFIG_FILE)
    record = read_run_record(run_dir) or {}
    curves = _curves(scalars, curve_tag)
    final = _number(record.get(FINAL_VAL_LOSS))  # its evaluation after the last step; None: it made none
    last = curves.val[-1][1] if curves.val else _recorded(record, _VAL_LOSS)
    return RunSummary(
        path=run_dir,
        name=_short_name(run_dir, sweep_dir),
        status=str(record["status"]) if record else "unfinished",
        choices={
            **read_overrides(run_dir),
            **{n: str(_config_value(config, f"model.{n}")) for n in DESIGN_CHOICES},
        },
        seed=str(_config_value(config, "seed")),
        max_steps=_integer(_config_value(config, "trainer.max_steps")),
        chars_per_step=_chars_per_step(config),
        steps=_steps(record, curves.train),
        params=int(record["params"]) if _number(record.get("params")) is not None else None,
        final_val_loss=last if final is None else final,
        best_val_loss=_best_val_loss(record, curves.val),
        final_bpc=_last_bpc(record, curves) if final is None else final / math.log(2),
        tokens_per_s=curves.tokens_per_s,
        wall_time_s=_number(record.get("wall_time_s")),
        error=record.get("error"),
        window_losses=None if final is None else _window_losses(record),
        evaluated=_evaluated(record, final, last),
        baseline=_text(_config_value(config, "baseline")),
        ladder=_text(_config_value(config, "ladder")),
        reference=_reference(record.get(REFERENCE_LEVELS)),
        model=_buildable_model(config),
        val_curve=curves.val,
        curve=curves.shown,
        train_curve=[(step, value) for step, value, _ in curves.train],
        health=curves.health,
        val_in_training=_number(record.get(VAL_IN_TRAINING, record.get(VAL_WINDOWS_IN_TRAINING))),
        diverged_at=_integer(record.get(DIVERGED_AT)),
        targets={
            k: float(v) for k, v in record.items() if k.startswith(TARGET_PREFIX) and _number(v) is not None
        },
        watched=_levels(_config_value(config, "callbacks.targets.levels")),
        metric=metric,
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _text(value: Any) -> str | None:
    return str(value) if value else None


def _reference(levels: Any) -> dict[str, float] | None:
    return {k: float(v) for k, v in levels.items()} if isinstance(levels, dict) else None


def _recorded(record: dict[str, Any], names: Sequence[str]) -> float | None:
    return next((_number(record[n]) for n in names if n in record), None)


def read_runs(
    sweep_dir: str | Path, curve_tag: str | None = None, metric: Metric = FINAL_LOSS
) -> list[RunSummary]:
    """Every run of the sweep, in job order, its `result` by `metric`; `curve_tag` picks the scalar kept as
    each run's `curve`."""
    sweep_dir = Path(sweep_dir)
    run_dirs = find_run_dirs(sweep_dir)
    scalars = read_scalars(sweep_dir, run_dirs)
    return [
        summarize_run(run_dir, sweep_dir, scalars.get(run_dir), curve_tag, metric) for run_dir in run_dirs
    ]


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


def runs_frame(runs: Sequence[RunSummary], columns: Sequence[str]) -> pd.DataFrame:
    """The runs as a tidy table, a row per run in the order given (its index is the run's position): a
    column per choice in `columns` (its typed value, "—" where a run has none), then its seed and `result`
    (+inf diverged, NaN none). What the report groups into settings and what the figures aggregate."""
    return pd.DataFrame(
        {
            **{c: pd.Series([run.choices.get(c, "—") for run in runs], dtype=object) for c in columns},
            "seed": [run.seed for run in runs],
            "result": [math.nan if run.result is None else run.result for run in runs],
        },
        index=range(len(runs)),
    )
