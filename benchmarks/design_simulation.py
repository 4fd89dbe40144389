"""The whole tune-then-judge procedure, simulated through the project's own functions (docs/sweeps.md):

    python benchmarks/design_simulation.py [--sweeps 4000] [--out design_simulation.json]
        [--tuning-seeds 4] [--rows 1 3] [--null-only]

A sweep tunes each setting's rate on 4 seeds over a grid around an optimum (1e-3, 3e-3, 1e-2; at 1e-2, the
edge of stability, a run collapses with chance 0.25, and a collapsed run fails); `add_seeds` then adds 2
judging seeds a round at the chosen rates, up to 16 seeds in all (12 judging), and the report judges them
by the group-sequential design. The settings' losses share a per-seed effect (sd 0.1), and each run has its
own noise, so that the paired sd of two settings is 0.01. The procedure is the report's: `tuned_settings`
chooses each rate (`chosen_rate`), `judge_family` gives the sweep's own (no) verdicts, `judge_added` the
sequential design's, with `Design` and `sequential.t_levels` as add_seeds writes and reads them.

Two cases, each under no difference (every setting the same) and at a true difference of 0.02 in every row:
one row against its baseline (swiglu_vs_gelu's shape) and three rows (a placement × FFN family's). Reported:
the chance of any false `better`/`worse` in a family (with its 95% Wilson interval), the power of each row to
be found `better` within 8 judging seeds and within 12, and the expected runs per resolved comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from tinylm.analysis.grouping import LR, Rules, Setting, tuned_settings
from tinylm.analysis.judging import judge_family
from tinylm.analysis.sequential_design import Design, judge_added
from tinylm.analysis.verdicts import Outcome

RATES = (1e-3, 3e-3, 1e-2)
RATE_PENALTY = {1e-3: 0.06, 3e-3: 0.0, 1e-2: 0.01}  # nats/char above the optimum at each rate
EDGE_RATE, COLLAPSE = 1e-2, 0.25  # the rate at the edge of stability, and the chance a run there collapses
SEED_SD = 0.1  # what the settings' runs of one seed share (data order)
PAIRED_SD = 0.01  # of two settings' paired difference
TUNING_SEEDS, JUDGING_SEEDS, PER_ROUND = 4, 12, 2  # add_seeds' default horizon: 16 seeds in all
JUDGING_SEEDS_FOR_POWER = 8
COLUMNS = ["act"]


def run_loss(rng: np.random.Generator, seed_effect: float, rate: float, shift: float) -> float:
    if rate == EDGE_RATE and rng.random() < COLLAPSE:
        return math.inf  # collapsed: a failure
    return 2.0 + seed_effect + RATE_PENALTY[rate] + shift + rng.normal(0, PAIRED_SD / math.sqrt(2))


def one_sweep(
    rng: np.random.Generator, rows: int, shift: float, tuning_seeds: int = TUNING_SEEDS
) -> tuple[list[Outcome], list[int], int, bool]:
    """One sweep and its added seeds: each row's outcome, the judging seeds it was resolved on (0: open at
    the horizon), the runs the procedure took, and whether every setting chose the same rate."""
    max_seeds = tuning_seeds + JUDGING_SEEDS
    names = ["base", *(f"row{i}" for i in range(1, rows + 1))]
    seeds = [str(s) for s in range(1, max_seeds + 1)]
    seed_effects = dict(zip(seeds, rng.normal(0, SEED_SD, max_seeds), strict=True))
    shifts = {name: (shift if name != "base" else 0.0) for name in names}
    tuning = seeds[:tuning_seeds]
    results = {
        (name, rate): {s: run_loss(rng, seed_effects[s], rate, shifts[name]) for s in tuning}
        for name in names
        for rate in RATES
    }

    def settings() -> list[Setting]:
        return [
            Setting({"act": name, LR: rate}, [], dict(values)) for (name, rate), values in results.items()
        ]

    rules = Rules(0.95, 0.05, 0.01, lr_varies=True)
    tuned = tuned_settings(settings(), COLUMNS, 0.95, tuning)
    judged = judge_family(tuned, {"act": "base"}, COLUMNS, rules, (), None, tuned)
    family, base = judged.rows, judged.baseline
    chosen = {s.choices["act"]: s.rate for s in tuned}
    for s in seeds[tuning_seeds:]:  # add_seeds runs judging seeds at the chosen rates only
        for name in names:
            results[(name, chosen[name])][s] = run_loss(rng, seed_effects[s], chosen[name], shifts[name])
    looks = tuple(tuple(seeds[:n]) for n in range(tuning_seeds, max_seeds + 1, PER_ROUND))
    design = Design(0.05, 0.01, max_seeds, "act=base", looks)
    bases = {s.key(COLUMNS): base.key(COLUMNS) for s in family if s is not base}  # every row is open
    added = judge_added(bases, settings(), COLUMNS, rules, design)
    outcomes, resolved_on = [], []
    for s in family:
        if s is base:
            continue
        c = added[s.key(COLUMNS)]
        outcomes.append(c.judgement.verdict.outcome)
        resolved_on.append(len(c.tests.seeds) if c.resolved else 0)
    # add_seeds adds seeds to the open rows and the baseline until each is resolved or the horizon.
    runs = len(names) * len(RATES) * tuning_seeds
    for judged in range(PER_ROUND, JUDGING_SEEDS + 1, PER_ROUND):
        still = sum(1 for n in resolved_on if n == 0 or n >= judged)
        if still == 0:
            break
        runs += PER_ROUND * (still + 1)
    return outcomes, resolved_on, runs, len(set(chosen.values())) == 1


def simulate(
    sweeps: int, rows: int, shift: float, seed: int, tuning_seeds: int = TUNING_SEEDS
) -> dict[str, float]:
    """`sweeps` sweeps of a family of `rows` rows at a true difference `shift` in every row, each rate chosen
    on `tuning_seeds` seeds."""
    rng = np.random.default_rng(seed)
    false_family, found_8, found_all, resolved, runs = 0, 0, 0, 0, 0
    same_rates, false_same_rates = 0, 0
    for _ in range(sweeps):
        outcomes, resolved_on, cost, same = one_sweep(rng, rows, shift, tuning_seeds)
        claims = [o in (Outcome.BETTER, Outcome.WORSE) for o in outcomes]
        same_rates += same
        if shift == 0:
            false_family += any(claims)
            false_same_rates += same and any(claims)
        else:
            better = [o is Outcome.BETTER for o in outcomes]
            found_8 += sum(
                b and 0 < n <= JUDGING_SEEDS_FOR_POWER for b, n in zip(better, resolved_on, strict=True)
            )
            found_all += sum(better)
        resolved += sum(n > 0 for n in resolved_on)
        runs += cost
    low, high = proportion_confint(false_family, sweeps, method="wilson")
    return {
        "sweeps": sweeps,
        "tuning_seeds": tuning_seeds,
        "rows": rows,
        "shift": shift,
        "family_wise_false_claims": false_family / sweeps if shift == 0 else None,
        "family_wise_interval": [float(low), float(high)] if shift == 0 else None,
        # Where every setting chose the same rate the designs are also equal at the chosen rates: the error
        # of the judging alone; elsewhere a setting tuned to a worse rate is worse where it is judged.
        "same_rate_share": same_rates / sweeps,
        "family_wise_false_claims_same_rate": false_same_rates / same_rates
        if shift == 0 and same_rates
        else None,
        "power_within_8_judging_seeds": found_8 / (sweeps * rows) if shift else None,
        "power_within_12_judging_seeds": found_all / (sweeps * rows) if shift else None,
        "resolved_share": resolved / (sweeps * rows),
        "runs_per_resolved_comparison": runs / resolved if resolved else math.inf,
        "runs_per_sweep": runs / sweeps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path("design_simulation.json"))
    parser.add_argument("--tuning-seeds", type=int, default=TUNING_SEEDS, help="judging seeds stay 12")
    parser.add_argument("--rows", type=int, choices=(1, 3), nargs="+", default=[1, 3])
    parser.add_argument("--null-only", action="store_true", help="only the cases with no true difference")
    args = parser.parse_args()
    table = []
    for number, (rows, shift) in enumerate([(1, 0.0), (3, 0.0), (1, -0.02), (3, -0.02)]):
        if rows not in args.rows or (args.null_only and shift):
            continue
        started = time.perf_counter()
        row = simulate(args.sweeps, rows, shift, seed=100 + number, tuning_seeds=args.tuning_seeds)
        row["seconds"] = time.perf_counter() - started
        table.append(row)
        print(json.dumps(row))
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
