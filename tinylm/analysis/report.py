"""A sweep at a glance: a ranked markdown table of its runs and a PNG of their validation-loss curves.

`python scripts/report.py SWEEP_DIR` finds every run of a sweep (any directory below SWEEP_DIR with a
`.hydra/overrides.yaml`, so a grid's `runs/multirun/<date>/<time>/` or a whole Optuna study directory with
one sweep directory per invocation), reads all their TensorBoard event files in one pass with tbparse, and
adds what is not a curve from each run's `metrics.json` (status, parameter count, wall time). It writes
`SWEEP_DIR/report.md` (also printed) and `SWEEP_DIR/report.png`.

A run without `metrics.json` is `unfinished` (still running, or killed); `failed` and `diverged` runs are
marked as their record says. None of them is ranked, but each gets its row and whatever curve it logged.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from tinylm.errors import UserError
from tinylm.training.run_record import read_run_record

REPORT_MD = "report.md"
REPORT_PNG = "report.png"
# Always shown: the design choices tinylm exists to compare.
DESIGN_CHOICES = ("norm", "norm_type", "act")
# Overrides that name where a run writes, not what it is.
_NOT_CHOICES = ("run_dir", "run_name", "hydra.")
_THROUGHPUT_TAGS = ("train/items_per_sec", "train/device/items_per_sec")


class ReportError(UserError, ValueError):
    """The directory cannot be reported on: missing, empty, or not a sweep."""


@dataclass
class RunSummary:
    """One run of a sweep, as the report shows it."""

    path: Path
    name: str
    status: str
    choices: dict[str, str]
    max_steps: int | None = None
    steps: int | None = None
    params: int | None = None
    final_val_loss: float | None = None
    best_val_loss: float | None = None
    final_bpc: float | None = None
    tokens_per_s: float | None = None
    wall_time_s: float | None = None
    error: str | None = None
    val_curve: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class SweepReport:
    sweep_dir: Path
    runs: list[RunSummary]  # ranked: completed runs by final val loss, then the rest
    columns: list[str]  # the choices shown per run: the design choices, then every override that varies
    common: dict[str, str]  # overrides every run shares


# --- finding the runs ------------------------------------------------------------------------------------


def find_run_dirs(sweep_dir: str | Path) -> list[Path]:
    """Every run directory below `sweep_dir`, in job order; a clear ReportError if there is none."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ReportError(
            f"{str(sweep_dir)!r} is not a directory; pass a sweep directory (runs/multirun/...)"
        )
    if (sweep_dir / ".hydra" / "overrides.yaml").is_file():
        raise ReportError(
            f"{str(sweep_dir)!r} is a single run's directory, not a sweep; pass the sweep directory above it "
            "(made by `scripts/train.py -m ...`)"
        )
    runs = [p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")]
    if not runs:
        raise ReportError(
            f"no runs in {str(sweep_dir)!r} (no */.hydra/overrides.yaml); pass a sweep directory made by "
            "`scripts/train.py -m ...`, e.g. runs/multirun/<date>/<time>"
        )
    return sorted(runs, key=lambda p: _natural_key(p.relative_to(sweep_dir).as_posix()))


def _natural_key(text: str) -> list[Any]:
    """`2_x` before `10_x`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _short_name(run_dir: Path, sweep_dir: Path) -> str:
    """The run's path below the sweep, its own directory cut to the job number Hydra prefixes it with."""
    relative = run_dir.relative_to(sweep_dir)
    number = re.match(r"(\d+)_", relative.name)
    return (relative.parent / number[1]).as_posix() if number else relative.as_posix()


def read_overrides(run_dir: Path) -> dict[str, str]:
    """The run's command-line overrides (Hydra's record of them) as key -> value text."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra" / "overrides.yaml"))
    parsed = OverridesParser.create().parse_overrides([str(line) for line in lines or []])
    overrides = {}
    for override in parsed:
        key = override.get_key_element()
        if not key.lstrip("+~").startswith(_NOT_CHOICES):
            overrides[key] = _display_value(override.get_value_element_as_str())
    return overrides


def _display_value(text: str) -> str:
    """Sampled floats (an Optuna trial's 0.0012502860637525488) shortened to 4 significant digits."""
    try:
        number = float(text)
    except ValueError:
        return text
    if number.is_integer() and "e" not in text.lower() and "." not in text:
        return text
    short = f"{number:.4g}"
    return short if len(short) < len(text) else text


def _design_choices(run_dir: Path) -> tuple[dict[str, str], int | None]:
    """norm / norm_type / act and max_steps from the run's composed config (Hydra's copy, always there)."""
    config = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    choices = {name: str(OmegaConf.select(config, f"model.{name}", default="?")) for name in DESIGN_CHOICES}
    max_steps = OmegaConf.select(config, "trainer.max_steps", default=None, throw_on_resolution_failure=False)
    return choices, max_steps if isinstance(max_steps, int) else None


# --- reading the curves ----------------------------------------------------------------------------------


def read_scalars(sweep_dir: Path, run_dirs: Sequence[Path]) -> dict[Path, Any]:
    """Every run's TensorBoard scalars (a pandas DataFrame: step, tag, value, wall_time), read in one pass."""
    import tbparse

    frame = tbparse.SummaryReader(
        str(sweep_dir), extra_columns={"dir_name", "wall_time"}, event_types={"scalars"}
    ).scalars
    if frame.empty:
        return {}
    import pandas as pd

    owners = set(run_dirs)
    parts: dict[Path, list[Any]] = {}
    for dir_name, rows in frame.groupby("dir_name"):
        event_dir = sweep_dir / str(dir_name)
        owner = next((p for p in (event_dir, *event_dir.parents) if p in owners), None)
        if owner is not None:  # a run may log into more than one TensorBoard directory
            parts.setdefault(owner, []).append(rows)
    return {owner: pd.concat(frames, ignore_index=True) for owner, frames in parts.items()}


def _series(scalars: Any, tag: str) -> list[tuple[int, float]]:
    """One tag's (step, value) pairs by step; a step logged twice (a resumed run) keeps its latest value."""
    rows = scalars[scalars.tag == tag].sort_values(["step", "wall_time"])
    latest = rows.drop_duplicates("step", keep="last")
    return [(int(s), float(v)) for s, v in zip(latest.step, latest.value, strict=True)]


def _tokens_per_second(scalars: Any) -> float | None:
    """Median of Lightning's rolling throughput, or, for runs too short to fill its window, the mean rate
    between the first and last logged step from its cumulative counters."""
    for tag in _THROUGHPUT_TAGS:
        values = [v for _, v in _series(scalars, tag) if math.isfinite(v)]
        if values:
            return statistics.median(values)
    lengths, times = _series(scalars, "train/lengths"), _series(scalars, "train/time")
    if len(lengths) >= 2 and len(times) >= 2 and times[-1][1] > times[0][1]:
        return (lengths[-1][1] - lengths[0][1]) / (times[-1][1] - times[0][1])
    return None


# --- one run, the whole sweep ----------------------------------------------------------------------------


def summarize_run(run_dir: Path, sweep_dir: Path, scalars: Any | None) -> RunSummary:
    design, max_steps = _design_choices(run_dir)
    choices = {**read_overrides(run_dir), **design}
    record = read_run_record(run_dir)
    run = RunSummary(
        path=run_dir,
        name=_short_name(run_dir, sweep_dir),
        status=str(record["status"]) if record else "unfinished",
        choices=choices,
        max_steps=max_steps,
    )
    if record:
        run.params = int(record["params"]) if isinstance(record.get("params"), int | float) else None
        run.wall_time_s = _number(record.get("wall_time_s"))
        run.error = record.get("error")
    if scalars is not None and not scalars.empty:
        run.val_curve = _series(scalars, "val/loss")
        finite = [v for _, v in run.val_curve if math.isfinite(v)]
        if run.val_curve:
            run.final_val_loss = run.val_curve[-1][1]
        run.best_val_loss = min(finite) if finite else None
        bpc = _series(scalars, "val/bpc")
        run.final_bpc = bpc[-1][1] if bpc else None
        run.tokens_per_s = _tokens_per_second(scalars)
        train = _series(scalars, "train/loss")
        run.steps = train[-1][0] + 1 if train else None
    if record and run.final_val_loss is None:  # a run logged without TensorBoard still has its record
        run.final_val_loss = _number(record.get("val/loss"))
        run.best_val_loss = _number(record.get("best/val_loss"))
        run.final_bpc = _number(record.get("val/bpc"))
    if record and isinstance(record.get("step"), int):
        run.steps = record["step"]
    return run


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def build_report(sweep_dir: str | Path) -> SweepReport:
    sweep_dir = Path(sweep_dir)
    run_dirs = find_run_dirs(sweep_dir)
    scalars = read_scalars(sweep_dir, run_dirs)
    runs = [summarize_run(run_dir, sweep_dir, scalars.get(run_dir)) for run_dir in run_dirs]

    keys = list(DESIGN_CHOICES) + sorted({k for r in runs for k in r.choices} - set(DESIGN_CHOICES))
    varying = [k for k in keys if len({r.choices.get(k) for r in runs}) > 1]
    columns = list(DESIGN_CHOICES) + [k for k in varying if k not in DESIGN_CHOICES]
    common = {k: str(runs[0].choices[k]) for k in keys if k not in varying and k in runs[0].choices}
    for key in DESIGN_CHOICES:
        common.pop(key, None)

    def rank_key(run: RunSummary) -> tuple[int, float]:
        ranked = run.status == "completed" and run.final_val_loss is not None
        loss = run.final_val_loss if run.final_val_loss is not None and ranked else math.inf
        return (0 if ranked else 1, loss if math.isfinite(loss) else math.inf)

    runs.sort(key=rank_key)  # stable: unranked runs keep their job order
    return SweepReport(sweep_dir=sweep_dir, runs=runs, columns=columns, common=common)


# --- output ----------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "—"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}f}"


def _fmt_wall_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(report: SweepReport) -> str:
    """The ranked table, plus the overrides all runs share and, when seeds vary, the mean over seeds."""
    header = ["rank", "run", *report.columns, "params", "final val loss", "best val loss", "bits/char"]
    header += ["tokens/s", "wall time", "steps", "status"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    rank = 0
    for run in report.runs:
        ranked = run.status == "completed" and run.final_val_loss is not None
        rank += ranked
        steps = "—" if run.steps is None else f"{run.steps}" + (f"/{run.max_steps}" if run.max_steps else "")
        status = run.status if not run.error else f"{run.status}: {run.error}"
        cells = [
            str(rank) if ranked else "—",
            run.name,
            *(run.choices.get(c, "—") for c in report.columns),
            "—" if run.params is None else f"{run.params:,}",
            _fmt(run.final_val_loss),
            _fmt(run.best_val_loss),
            _fmt(run.final_bpc, 3),
            "—" if run.tokens_per_s is None else f"{run.tokens_per_s:,.0f}",
            _fmt_wall_time(run.wall_time_s),
            steps,
            status if len(status) <= 120 else status[:117] + "...",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")

    text = [f"# Sweep report: {report.sweep_dir}", "", *lines, ""]
    counts = {
        s: sum(r.status == s for r in report.runs) for s in dict.fromkeys(r.status for r in report.runs)
    }
    text.append(
        f"{len(report.runs)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items())
        + ". Ranked by final val loss (nats/char; bits/char = nats / ln 2); params without position embeddings."
    )  # fmt: skip
    if report.common:
        text += ["", "Shared by every run: " + " ".join(f"`{k}={v}`" for k, v in report.common.items())]
    seed_table = _across_seeds(report)
    if seed_table:
        text += ["", *seed_table]
    return "\n".join(text) + "\n"


def _across_seeds(report: SweepReport) -> list[str]:
    """Completed runs grouped by every shown choice but the seed: how far the seed alone moves the result."""
    if "seed" not in report.columns:
        return []
    group_by = [c for c in report.columns if c != "seed"]
    groups: dict[tuple[str, ...], list[float]] = {}
    for run in report.runs:
        if run.status == "completed" and run.final_val_loss is not None and math.isfinite(run.final_val_loss):
            groups.setdefault(tuple(run.choices.get(c, "—") for c in group_by), []).append(run.final_val_loss)
    if not groups:
        return []
    header = [*group_by, "seeds", "mean final val loss", "min", "max"]
    lines = ["Across seeds (completed runs):", "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    for choices, losses in sorted(groups.items(), key=lambda item: statistics.fmean(item[1])):
        cells = [
            *choices,
            str(len(losses)),
            _fmt(statistics.fmean(losses)),
            _fmt(min(losses)),
            _fmt(max(losses)),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def legend_label(run: RunSummary, columns: Iterable[str], report: SweepReport) -> str:
    """A legend entry: the choices that tell this run apart from the others in the sweep."""
    varying = [c for c in columns if len({r.choices.get(c) for r in report.runs}) > 1]
    label = " ".join(f"{c}={run.choices.get(c, '—')}" for c in varying) or run.name
    return label if run.status == "completed" else f"{label} ({run.status})"


def _setting(run: RunSummary, report: SweepReport) -> tuple[str, ...]:
    """What a run was set to, apart from its seed."""
    return tuple(str(run.choices.get(c)) for c in report.columns if c != "seed")


def plot_curves(report: SweepReport, path: Path) -> Path:
    """Validation loss against optimizer step, one line per run labelled by its choices.

    Runs that differ only in their seed share a colour and differ in line style, so a setting's spread over
    seeds reads at a glance. Runs that did not complete are drawn faded, and listed even without a curve.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    labels = [legend_label(run, report.columns, report) for run in report.runs]
    settings = list(dict.fromkeys(_setting(run, report) for run in report.runs))
    seeds = sorted({run.choices.get("seed", "") for run in report.runs}, key=_natural_key)
    colours = plt.get_cmap("tab10" if len(settings) <= 10 else "tab20")
    line_styles = ["-", "--", ":", "-."]
    columns = 1 if max(map(len, labels)) > 45 else 2
    legend_rows = math.ceil(len(labels) / columns)
    figure, axes = plt.subplots(figsize=(10, 5 + 0.2 * legend_rows), layout="constrained")
    for run, label in zip(report.runs, labels, strict=True):
        style = {
            "color": colours(settings.index(_setting(run, report)) % colours.N),
            "linestyle": line_styles[seeds.index(run.choices.get("seed", "")) % len(line_styles)],
            "alpha": 1.0 if run.status == "completed" else 0.45,
        }
        points = [(s, v) for s, v in run.val_curve if math.isfinite(v)]
        if points:
            steps, values = zip(*points, strict=True)
            axes.plot(steps, values, label=label, marker=".", markersize=3, **style)
        else:  # keep it in the legend so a failed run is not silently missing
            axes.plot([], [], label=f"{label}, no val/loss", **style)
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("validation loss (nats / char)")
    axes.set_title(f"{report.sweep_dir.name}: validation loss, {len(report.runs)} runs")
    axes.grid(alpha=0.3)
    figure.legend(fontsize="small", loc="outside lower center", ncols=columns, frameon=False)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def write_report(sweep_dir: str | Path) -> tuple[str, Path, Path]:
    """Build the report and write `report.md` and `report.png` into the sweep directory."""
    report = build_report(sweep_dir)
    text = markdown_table(report)
    markdown = report.sweep_dir / REPORT_MD
    markdown.write_text(text, encoding="utf-8")
    png = plot_curves(report, report.sweep_dir / REPORT_PNG)
    return text, markdown, png
