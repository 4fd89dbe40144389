"""The plan of `scripts/add_seeds.py`, which adds seeds, in rounds, to the settings whose comparison with the
baseline is still open (and to the baseline; on a ladder, to the open rows of each level and that level's
baseline), until every comparison is `better`, `worse` or `equivalent`, or the budget is spent (docs/sweeps.md).

The sweep's own seeds were judged by its report at α: those verdicts stand, and the seeds added are a second
experiment, a group-sequential design written to SWEEP_DIR/sequential.json before its first run starts. Its
first look is the sweep as it was (it judges nothing); every later look judges the added seeds alone, at
the level the design's boundary gives it, so that its family-wise error over all the looks stays at α. The
report, reading that file, judges the added seeds by the same looks.

This module decides, from the report: the design, each look, which settings get which seeds into which
directory under SWEEP_DIR/added/ (where the report finds them), and whether the budget allows a round.
`tinylm.seed_rounds.rounds` starts the runs it plans.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from tinylm.analysis.grouping import LR, Setting, setting_label
from tinylm.analysis.options import named_baseline, parse_choices
from tinylm.analysis.report import ReportError, SweepReport, build_report
from tinylm.analysis.runs import RunSummary, natural_key, read_runs
from tinylm.analysis.sequential_design import Design, Round, read_design, write_design
from tinylm.layout import DESIGN_FILE, HYDRA_DIR

ADDED_DIR = "added"  # below the sweep: where its rounds run, and the report finds them


@dataclass(frozen=True)
class Budget:
    max_seeds: int = 16  # per setting, the design's horizon: α is spent over up to this many seeds
    per_round: int = 2
    max_minutes: float | None = None  # of this command's wall time; a round that would overrun is not started


@dataclass(frozen=True)
class Launch:
    """One multirun of a round: `seeds` of a setting (`label`), made with the overrides of its run in
    `template`, into the new directory `target`."""

    label: str
    template: Path
    seeds: tuple[str, ...]
    target: Path


def next_round(
    sweep_dir: Path,
    design: Design,
    report: SweepReport,
    budget: Budget,
    minutes_spent: Callable[[], float],
    echo: Callable[[str], Any] = print,
) -> tuple[Design, SweepReport, bool]:
    """Look at the sweep as it is now (no round open): record the look in the design if it has new seeds,
    then either stop (every comparison resolved, or the budget spent: True) or write the next round into
    the design before any of its runs starts (False). Returns the design, the report of the look, and that.
    `minutes_spent` is this command's wall time so far (the budget's)."""
    # Every seed a baseline (on a ladder, any level's) has a result for, those that chose its rate included.
    seeds = tuple(
        sorted(
            {run.seed for base in report.baselines for run in base.runs if run.result is not None},
            key=natural_key,
        )
    )
    if design.looks and design.looks[-1] == seeds and design.rounds_since_look:
        raise ReportError(
            f"the last round added no result to the baseline (its runs failed: see their metrics.json under "
            f"{sweep_dir / ADDED_DIR}); fix the cause, then rerun the same command"
        )
    if not design.looks or design.looks[-1] != seeds:
        design = replace(design, looks=(*design.looks, seeds), rounds_since_look=0)
        write_design(sweep_dir, design)
        report = build_report(sweep_dir)
    open_rows = [s for s in report.family if s.answer is not None and not s.answer.resolved]
    for line in look_lines(design, report):
        echo(line)
    if not open_rows:
        echo("every comparison is resolved")
        return design, report, True
    if len(seeds) >= budget.max_seeds:
        echo(f"stopped: the baseline has {len(seeds)} seeds, the most this design allows (--max-seeds)")
        return design, report, True
    new_seeds = next_seeds(report.runs, min(budget.per_round, budget.max_seeds - len(seeds)))
    settings = round_settings(report, open_rows)
    minutes = round_minutes(report, settings, len(new_seeds))
    elapsed = minutes_spent()
    if budget.max_minutes is not None and elapsed + minutes > budget.max_minutes:
        echo(
            f"stopped: the next round would take about {minutes:.2g} min, past --max-minutes "
            f"{budget.max_minutes:g} ({elapsed:.2g} min spent)"
        )
        return design, report, True
    design = replace(design, round=Round(tuple(new_seeds), tuple(dict(s.choices) for s in settings)))
    write_design(sweep_dir, design)
    return design, report, False


def look_lines(design: Design, report: SweepReport) -> list[str]:
    """What add_seeds says at a look, counted and worded as the report says it: the seeds it judges (the sweep's
    own at look 1, else those added since, as `look 2 (2 added seeds)` counts them), how many comparisons are
    open, and the verdict each has reached (on a ladder, each design's word across levels too)."""
    look = len(design.looks)
    if look <= 1:
        seeds = f"the sweep's own {len(design.first_seeds)} seeds"
    else:
        count = len(design.added_seeds(look - 1))
        seeds = f"{count} added seed{'s' if count != 1 else ''}"
    rows = [
        s for s in report.family if s.answer is not None and not any(s is b for b in report.baselines)
    ]  # fmt: skip
    still = sum(not s.answer.resolved for s in rows)
    columns = report.shown_family_columns
    lines = [f"look {look}: {seeds}; {still} of {len(rows)} comparisons open"]
    lines += [f"- {s.label(columns)}: {s.answer.judgement.verdict}" for s in rows]
    if report.ladder is not None:
        shown = report.ladder.shown_columns
        lines += [
            f"- across levels, {setting_label(t.design, shown)}: {t.verdict}" for t in report.ladder.trends
        ]
    return lines


def start_design(
    sweep_dir: Path,
    baseline: str | None,
    min_effect: float,
    alpha: float,
    budget: Budget,
    ladder: str | None = None,
) -> Design:
    """The design on disk, checked against the flags; or a new one, written before any run starts."""
    path = sweep_dir / DESIGN_FILE
    if path.is_file():
        build_report(sweep_dir, ladder=ladder)  # validates the file, the baseline and the ladder
        design = read_design(sweep_dir)
        fixed = {"min_effect": min_effect, "alpha": alpha, "max_seeds": budget.max_seeds}
        for key, value in fixed.items():
            if not math.isclose(float(getattr(design, key)), float(value)):
                raise ReportError(
                    f"--{key.replace('_', '-')} {value:g}: this sweep's design ({path}) has "
                    f"{getattr(design, key):g}; a design cannot change between its looks (drop the flag to carry on)"
                )
        if baseline and parse_choices(baseline) != parse_choices(design.baseline):
            raise ReportError(f"--baseline {baseline}: this sweep's design ({path}) has {design.baseline}")
        return design
    named, source = named_baseline(baseline, read_runs(sweep_dir), None)
    if named is None:
        raise ReportError(
            "name the baseline: --baseline key=value[,key=value] (the experiment preset names none)"
        )
    # Refuses a baseline that matches no setting, and reads the ladder's axis the design then keeps.
    first = build_report(sweep_dir, named, min_effect=min_effect, ladder=ladder)
    design = Design(alpha, min_effect, budget.max_seeds, named, (), source, ladder=tuple(first.axis))
    write_design(sweep_dir, design)
    return design


def round_settings(report: SweepReport, open_rows: Sequence[Setting]) -> list[Setting]:
    """The settings a round adds seeds to: the open rows and their baselines (on a ladder, the baseline of
    each level with an open row, and no other level's)."""
    bases = [report.baseline_of(s) for s in open_rows]
    return [b for b in report.baselines if any(b is base for base in bases)] + list(open_rows)


def next_seeds(runs: Sequence[RunSummary], count: int) -> list[str]:
    """`count` seeds above every seed the sweep has used, so that every setting gets the same new ones."""
    used = [int(run.seed) for run in runs if run.seed.lstrip("-").isdigit()]
    top = max(used, default=0)
    return [str(top + i) for i in range(1, count + 1)]


def runs_of(report: SweepReport, setting: Setting) -> list[Setting]:
    """The settings a family row stands for: itself, or with the learning rate varying, the one at the rate
    its tuning seeds chose (where its judging seeds run)."""
    key = setting.key(report.family_columns)
    group = [s for s in report.settings if s.key(report.family_columns) == key]  # every seed's result
    if not report.lr_varies:
        return group
    return [s for s in group if s.choices[LR] == setting.rate]


def round_minutes(report: SweepReport, settings: Sequence[Setting], seeds: int) -> float:
    """A round's expected wall time: its runs at the sweep's median run time, as many at once as its
    launcher ran."""
    runs = [run for s in settings for raw in runs_of(report, s) for run in raw.runs]
    times = [run.wall_time_s for run in runs if run.wall_time_s is not None]
    count = seeds * sum(len(runs_of(report, s)) for s in settings)
    parallel = max(1, launcher_jobs(runs[0].path)) if runs else 1
    return count * (statistics.median(times) if times else 0.0) / parallel / 60


def launcher_jobs(run_dir: Path) -> int:
    """How many runs the sweep's launcher ran at once (`round_minutes`' estimate)."""
    hydra = OmegaConf.load(run_dir / HYDRA_DIR / "hydra.yaml")
    jobs = OmegaConf.select(hydra, "hydra.launcher.n_jobs", default=1)
    return int(jobs) if isinstance(jobs, int) and jobs > 0 else os.cpu_count() or 1


def round_launches(report: SweepReport, design: Design, sweep_dir: Path) -> list[Launch]:
    """The round's runs that have no result yet, one multirun per setting (its seeds in parallel as its
    launcher allows), each into its own new directory under SWEEP_DIR/added/."""
    assert design.round is not None
    seeds, wanted = list(design.round.seeds), list(design.round.settings)
    rows = [s for s in report.family if s.choices in wanted]
    added = sweep_dir / ADDED_DIR
    look = len(design.looks)
    launches: list[Launch] = []
    for row in rows:
        for setting in runs_of(report, row):
            missing = [seed for seed in seeds if seed not in setting.results]
            if not missing:
                continue
            attempt = 1
            taken = {launch.target for launch in launches}  # made by an earlier launch of this round
            while (target := added / f"look{look}_{slug(setting)}_{attempt}").exists() or target in taken:
                attempt += 1
            label = setting.label(report.setting_columns)
            launches.append(Launch(label, setting.runs[0].path, tuple(missing), target))
    return launches


def slug(setting: Setting) -> str:
    """`act-gelu_optim.lr-0.01`: a directory name that a Hydra override can carry unquoted."""
    text = "_".join(f"{k}-{v}" for k, v in setting.choices.items())
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)[:100]
