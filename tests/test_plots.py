"""The report's pictures, on made-up runs: the title names the axes the sweep varies (from the report value),
no two tick labels of the forest plot overlap once laid out, and a why figure says which setting and run each
point is."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from test_stats import fake_run

from tinylm.analysis.present.plots import RunCurve, health_figure, report_figure, report_title
from tinylm.analysis.report import build_report


def made_up_sweep(root: Path, axes: dict[str, list[str]], seeds: str = "123") -> Path:
    """A run per combination of `axes`' values and seed; the first value of each axis is best by 0.05."""
    sweep = root / "sweep"
    for number, (values, seed) in enumerate(itertools.product(itertools.product(*axes.values()), seeds)):
        loss = 2.0 + sum(0.05 * options.index(v) for options, v in zip(axes.values(), values, strict=True))
        fake_run(sweep, number, "completed", loss + 0.01 * int(seed), **dict(zip(axes, values, strict=True)),
                 seed=seed)  # fmt: skip
    return sweep


@pytest.mark.parametrize(
    ("axes", "baseline", "title"),
    [
        ({"act": ["gelu", "swiglu"], "optim.lr": ["1e-3", "1e-2"]}, "act=gelu",
         "act × optim.lr, final validation loss against act=gelu, each at its tuned optim.lr"),
        ({"norm": ["pre", "post"], "act": ["gelu", "swiglu"]}, "norm=pre,act=gelu",
         "norm × act, final validation loss against norm=pre act=gelu"),
        ({"act": ["gelu", "swiglu"]}, None, "act, final validation loss (no baseline named)"),
    ],
)  # fmt: skip
def test_the_title_names_exactly_the_axes_the_sweep_varies(tmp_path, axes, baseline, title):
    report = build_report(made_up_sweep(tmp_path, axes, seeds="12"), baseline=baseline)
    assert report.swept_columns == list(axes)  # norm and norm_type, shared by every run, are no axis
    assert report_title(report) == title


def overlapping(labels: list) -> list[tuple[str, str]]:
    """Pairs of drawn tick labels whose boxes on the canvas overlap."""
    boxes = [(label.get_text(), label.get_window_extent()) for label in labels if label.get_text()]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


def test_no_two_tick_labels_of_the_forest_plot_overlap(tmp_path):
    """A sweep over act and optim.lr, not yet judged: the forest plot spans ±δ, whose default ticks (-0.0100,
    -0.0075, …) overlapped beside the rows' names and verdicts."""
    axes = {"act": ["gelu", "swiglu"], "optim.lr": ["1e-3", "1e-2"]}
    report = build_report(made_up_sweep(tmp_path, axes, seeds="12"), baseline="act=gelu")
    figure = report_figure(report)
    assert figure.get_suptitle() == report_title(report)
    FigureCanvasAgg(figure).draw()  # laid out as savefig lays it out
    forest = figure.axes[0]
    (verdicts,) = forest.child_axes
    low, high = sorted(forest.get_xlim())
    drawn = [label for label in forest.get_xticklabels() if low <= label.get_position()[0] <= high]
    assert len(drawn) >= 3 and not overlapping(drawn)
    assert not overlapping(forest.get_yticklabels()) and not overlapping(verdicts.get_yticklabels())


def test_a_why_figure_names_the_setting_and_the_seed_of_every_point():
    """Dead units read once per run (one column of points), a healthy baseline's at 0: every run is drawn,
    in its setting's colour with its seed's marker, and both are named in a legend; the axes are labelled."""
    tag = "training_health/dead_units/block_1"
    curves = {
        "act=relu": [
            RunCurve(seed, tag, [(300, value)]) for seed, value in (("1", 0.2), ("2", 0.45), ("3", 0.6))
        ],
        "act=gelu (baseline)": [RunCurve(seed, tag, [(300, 0.0)]) for seed in ("1", "2", "3")],
    }
    figure = health_figure(curves, "dead_units")
    (axes,) = figure.axes
    assert axes.get_yscale() == "linear"  # the baseline's zeros are drawn, not dropped by a log axis
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("optimizer step", tag)
    drawn = [line for line in axes.get_lines() if len(line.get_xdata())]
    assert len(drawn) == 6
    by_legend = {}
    for legend in figure.legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            by_legend[text.get_text()] = handle
    assert {"act=relu (3 runs)", "act=gelu (baseline) (3 runs)"} <= set(by_legend)
    seeds = {seed: by_legend[f"seed {seed}"].get_marker() for seed in ("1", "2", "3")}
    assert len(set(seeds.values())) == 3  # a marker per seed
    colours = {line.get_color() for line in drawn}
    assert len(colours) == 2 and {line.get_marker() for line in drawn} == set(seeds.values())
    for label, runs in curves.items():
        colour = by_legend[f"{label} (3 runs)"].get_color()
        mine = [line for line in drawn if line.get_color() == colour]
        assert sorted((line.get_marker(), line.get_ydata()[0]) for line in mine) == sorted(
            (seeds[run.seed], run.points[0][1]) for run in runs
        )
