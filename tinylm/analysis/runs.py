"""A sweep's runs as the report reads them: each directory below it with a `.hydra/overrides.yaml`, its
choices, how it ended (`metrics.json`; none: `unfinished`) and its TensorBoard curves."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from tinylm import layout
from tinylm.analysis.metric import FINAL_LOSS, Metric
from tinylm.errors import ConfigError, UserError
from tinylm.overrides import choices

# Always shown: the design choices tinylm exists to compare.
DESIGN_CHOICES = ("norm", "norm_type", "act")
_THROUGHPUT_TAGS = ("train/device/items_per_sec", "train/items_per_sec")
# A run's last validation, by its key in the record: read there when it logged no validation curve.
_RECORDED = {
    "final_val_loss": layout.VAL_LOSS,
    "best_val_loss": layout.BEST_VAL_LOSS,
    "final_bpc": layout.VAL_BPC,
}
HEALTH_PREFIX = "training_health/"
Curve = list[tuple[int, float, float]]  # (step, value, seconds since the run's first scalar)


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
        """What a comparison counts, by `metric`: +inf for a failure (diverged, or a level never reached);
        None for a run that crashed or never finished."""
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
    if (sweep_dir / layout.HYDRA_DIR / "overrides.yaml").is_file():
        above = sweep_dir.parent
        if (above / layout.SWEEP_RECORD).is_file():
            raise ReportError(
                f"{str(sweep_dir)!r} is one run of the sweep {str(above)!r}: report the sweep, "
                f"`python scripts/report.py {above}`"
            )
        raise ReportError(
            f"{str(sweep_dir)!r} is a single run, not a sweep: a report compares settings over seeds; its curves "
            f"are in `tensorboard --logdir {sweep_dir}` and how it ended in its metrics.json"
        )
    marked = {p.parent for name in (layout.SWEEP_RECORD, layout.DESIGN_FILE) for p in sweep_dir.rglob(name)}
    # Less those inside another: a sweep's added seeds are launched as sweeps of their own in its added/.
    sweeps = sorted(d for d in marked if not any(other in d.parents for other in marked))
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


def natural_key(text: str) -> list[Any]:
    """`2_x` before `10_x`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def read_overrides(run_dir: Path) -> dict[str, Any]:
    """The run's command-line choices, key -> value as Hydra types it: two Optuna trials at 0.00125029 and
    0.00125039 stay two settings, however they are printed."""
    lines = OmegaConf.to_container(OmegaConf.load(run_dir / layout.HYDRA_DIR / "overrides.yaml")) or []
    return {choice.key: choice.typed for choice in choices([str(line) for line in lines])}


def _buildable_model(config: Any) -> dict[str, Any] | None:
    """The model section where `ModelConfig` accepts it: a job refused for its model settings has none."""
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


def _series(scalars: Any, tag: str) -> Curve:
    """`tag` as (step, value, wall time) by step; a step logged twice (a resumed run) keeps its latest value."""
    latest = (
        scalars[scalars.tag == tag].sort_values(["step", "wall_time"]).drop_duplicates("step", keep="last")
    )
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


def _logged(scalars: Any | None, curve_tag: str | None) -> dict[str, Any]:
    """A run's fields its TensorBoard scalars give: its curves (`curve`: `curve_tag`'s, else the validation
    loss), throughput and, if it logged a validation curve, its last validation."""
    if scalars is None or scalars.empty:
        return {}
    start = float(scalars.wall_time.min())

    def since_start(tag: str) -> Curve:
        return [(s, v, w - start) for s, v, w in _series(scalars, tag)]

    val, bpc = since_start(layout.VAL_LOSS), _series(scalars, layout.VAL_BPC)
    health = [str(tag) for tag in scalars.tag.unique() if str(tag).startswith(HEALTH_PREFIX)]
    logged = {
        "val_curve": val,
        "curve": since_start(curve_tag) if curve_tag else val,
        "train_curve": [(step, value) for step, value, _ in _series(scalars, layout.TRAIN_LOSS)],
        "health": {tag: [(step, value) for step, value, _ in _series(scalars, tag)] for tag in health},
        "tokens_per_s": _tokens_per_second(scalars),
    }
    if not val:
        return logged
    best = min((v for _, v, _ in val if math.isfinite(v)), default=None)
    return logged | {
        "final_val_loss": val[-1][1],
        "best_val_loss": best,
        "final_bpc": bpc[-1][1] if bpc else None,
    }


def _evaluated(windows: list[float] | None, available: Any, final: float | None, last: float | None) -> str:
    """Which evaluation the final loss is: `final, 960 of 7,477 validation windows`, `last validation`."""
    if final is None:
        return "—" if last is None else "last validation"
    if not windows:
        return "final"
    return (
        f"final, {layout.evaluated_windows(len(windows), available if isinstance(available, int) else None)}"
    )


def _configured(config: Any) -> dict[str, Any]:
    """A run's fields its composed config (Hydra's copy) gives."""
    batch, block = _config_value(config, "data.batch_size"), _config_value(config, "model.block_size")
    accumulate = _config_value(config, "trainer.accumulate_grad_batches") or 1
    levels = _config_value(config, "callbacks.targets.levels")
    return {
        "seed": str(_config_value(config, "seed")),
        "max_steps": _integer(_config_value(config, "trainer.max_steps")),
        "chars_per_step": batch * block * accumulate
        if isinstance(batch, int) and isinstance(block, int)
        else None,
        "baseline": _text(_config_value(config, "baseline")),
        "ladder": _text(_config_value(config, "ladder")),
        "model": _buildable_model(config),
        "watched": tuple(float(v) for v in levels if isinstance(v, int | float))
        if OmegaConf.is_list(levels)
        else None,
    }


def summarize_run(
    run_dir: Path,
    sweep_dir: Path,
    scalars: Any | None,
    curve_tag: str | None = None,
    metric: Metric = FINAL_LOSS,
) -> RunSummary:
    """One run from its config, its record (metrics.json; none: `unfinished`) and its TensorBoard `scalars`;
    without TensorBoard its record's last validation stands for the curve's."""
    config = OmegaConf.load(run_dir / layout.HYDRA_DIR / layout.CONFIG_FILE)
    record = layout.read_run_record(run_dir) or {}
    logged = _logged(scalars, curve_tag)
    if not logged.get("val_curve"):
        logged |= {name: _number(record.get(key)) for name, key in _RECORDED.items()}
    last = logged["final_val_loss"]
    # Its evaluation after the last step (None: it made none) stands for its last validation.
    final = _number(record.get(layout.FINAL_VAL_LOSS))
    if final is not None:
        logged |= {"final_val_loss": final, "final_bpc": final / math.log(2)}
    windows = record.get(layout.FINAL_WINDOW_LOSSES)
    windows = [float(v) for v in windows] if isinstance(windows, list) and final is not None else None
    steps, train = _integer(record.get("step")), logged.get("train_curve")
    reference = record.get(layout.REFERENCE_LEVELS)
    number = re.match(r"(\d+)_", run_dir.name)  # Hydra prefixes a job's directory with its number
    return RunSummary(
        path=run_dir,
        name=(run_dir.parent / number[1] if number else run_dir).relative_to(sweep_dir).as_posix(),
        status=str(record["status"]) if record else "unfinished",
        choices={
            **read_overrides(run_dir),
            **{n: str(_config_value(config, f"model.{n}")) for n in DESIGN_CHOICES},
        },
        steps=steps if steps is not None or not train else train[-1][0] + 1,
        params=int(record["params"]) if _number(record.get("params")) is not None else None,
        wall_time_s=_number(record.get("wall_time_s")),
        error=record.get("error"),
        window_losses=windows,
        evaluated=_evaluated(windows, record.get(layout.FINAL_SPLIT_WINDOWS), final, last),
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
        **_configured(config),
    )


def _config_value(config: Any, key: str) -> Any:
    return OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _text(value: Any) -> str | None:
    return str(value) if value else None


def read_runs(
    sweep_dir: str | Path, curve_tag: str | None = None, metric: Metric = FINAL_LOSS
) -> list[RunSummary]:
    """Every run of the sweep in job order, its `result` by `metric`; `curve_tag` picks each run's `curve`."""
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
