"""The rounds of `scripts/add_seeds.py`: look and plan (`tinylm.seed_rounds.plan`), start the round's runs
(`tinylm.training.launch`), look again, until the plan stops."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tinylm.analysis.estimates import MIN_EFFECT
from tinylm.analysis.report import SweepReport, build_report
from tinylm.analysis.sequential_design import Design, write_design
from tinylm.analysis.verdicts import ALPHA
from tinylm.seed_rounds.plan import Budget, next_round, round_launches, start_design
from tinylm.training.launch import command_for, launch


def add_seeds(
    sweep_dir: str | Path,
    train_command: Sequence[str],
    baseline: str | None = None,
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    budget: Budget = Budget(),  # noqa: B008 (frozen: one shared default is safe)
    echo: Callable[[str], Any] = print,
    ladder: str | None = None,
) -> SweepReport:
    """Run rounds until every comparison is resolved or the budget ends; returns the final report. Safe to
    interrupt: rerun the same command and it carries on from the files (the design, the runs)."""
    sweep_dir = Path(sweep_dir)
    design = start_design(sweep_dir, baseline, min_effect, alpha, budget, ladder)
    started = time.monotonic()

    def minutes_spent() -> float:
        return (time.monotonic() - started) / 60

    while True:
        report = build_report(sweep_dir)
        if design.round is not None:  # a round was interrupted: finish it before looking
            run_round(report, design, sweep_dir, train_command, echo)
            design = replace(design, round=None, rounds_since_look=design.rounds_since_look + 1)
            continue
        design, report, stop = next_round(sweep_dir, design, report, budget, minutes_spent, echo)
        if stop:
            return report
        run_round(report, design, sweep_dir, train_command, echo)
        design = replace(design, round=None, rounds_since_look=design.rounds_since_look + 1)
        write_design(sweep_dir, design)


def run_round(
    report: SweepReport,
    design: Design,
    sweep_dir: Path,
    train_command: Sequence[str],
    echo: Callable[[str], Any],
) -> None:
    """Start the round's multiruns one after the other, each to its end."""
    for planned in round_launches(report, design, sweep_dir):
        echo(f"  {planned.label}: seeds {', '.join(planned.seeds)} -> {planned.target}")
        command = [*train_command, *command_for(planned.template, planned.seeds, planned.target)]
        launch(command, planned.target)
