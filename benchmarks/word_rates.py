"""The rates docs/sweeps.md states for the ladder's trend words and the sequential design's power, re-measured
through the same simulations the tests run (tests/conftest.py `simulated_words`, tests/test_verdicts.py
`sequential_sweeps`), with each figure's scenario and Monte Carlo interval:

    python benchmarks/word_rates.py trend --seeds 6 --sd 0.03 --constant 0 -0.05 -0.1 [--replicates 2000]
    python benchmarks/word_rates.py sequential --shift 0.02 0.04 [--sweeps 2000]

`trend`: one design at three ordered levels (`trainer.max_steps`) whose difference from each level's baseline is
the same constant there, `--seeds` seeds a level, paired sd `--sd`, each replicate through the report's paired
tests, `judge` and `trends`; every word but `holds` and `not resolved` is then a false call (tests/test_trend_words.py
has the scenarios where the difference changes). `sequential`: a family of 3 rows against a baseline, paired sd
0.05, looks every 2 seeds up to 16, a true difference `--shift` in every row; each row's chance to be found
`worse` by the group-sequential design and by the 16 seeds judged at once, on the same sweeps. Prints one JSON
line per case; intervals are 95% (Wilson for a rate; for the power gap, normal over sweeps, whose three rows
share a baseline).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from statsmodels.stats.proportion import proportion_confint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import simulated_words
from test_verdicts import sequential_sweeps

from tinylm.analysis.ladder import TrendWord
from tinylm.analysis.verdicts import Outcome

TRUE_UNDER_A_CONSTANT = {TrendWord.HOLDS, TrendWord.UNRESOLVED}


def wilson(count: int, n: int) -> list[float]:
    low, high = proportion_confint(count, n, method="wilson")
    return [round(float(low), 4), round(float(high), 4)]


def trend(means: tuple[float, ...], sd: float, seeds: int, replicates: int, seed: int) -> dict:
    """Counts of every word for a constant difference `means` at the three levels, and the false-call rate."""
    counts = simulated_words(means, sd, seeds, replicates, "trainer.max_steps", seed)
    row: dict = {"means": list(means), "seeds_a_level": seeds, "paired_sd": sd, "replicates": replicates}
    row["rng_seed"] = seed
    row["counts"] = {w.value: n for w, n in counts.items()}
    false = sum(n for w, n in counts.items() if w not in TRUE_UNDER_A_CONSTANT)
    row["false_calls"] = false
    row["false_rate"] = round(false / replicates, 4)
    row["false_interval"] = wilson(false, replicates)
    return row


def sequential(shift: float, sweeps: int, seed: int) -> dict:
    seq, fixed = sequential_sweeps(np.random.default_rng(seed), sweeps, shift=shift)
    found = np.array([[v is Outcome.WORSE for v in row] for row in seq], dtype=float)
    found_fixed = np.array([[v is Outcome.WORSE for v in row] for row in fixed], dtype=float)
    per_sweep_gap = (found - found_fixed).mean(axis=1)
    gap, se = per_sweep_gap.mean(), per_sweep_gap.std(ddof=1) / math.sqrt(sweeps)
    rows = found.size
    return {
        "shift": shift,
        "rows": found.shape[1],
        "paired_sd": 0.05,
        "looks": "every 2 seeds up to 16",
        "sweeps": sweeps,
        "rng_seed": seed,
        "sequential_power": round(found.mean(), 4),
        "sequential_interval": wilson(int(found.sum()), rows),
        "fixed_16_power": round(found_fixed.mean(), 4),
        "fixed_interval": wilson(int(found_fixed.sum()), rows),
        "gap_points": round(100 * gap, 2),
        "gap_interval_points": [round(100 * (gap - 1.96 * se), 2), round(100 * (gap + 1.96 * se), 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    t = sub.add_parser("trend")
    t.add_argument(
        "--constant", type=float, nargs="+", required=True, help="each a difference at every level"
    )
    t.add_argument("--seeds", type=int, default=3)
    t.add_argument("--sd", type=float, default=0.03)
    t.add_argument("--replicates", type=int, default=2000)
    t.add_argument("--rng-seed", type=int, default=49, help="tests/test_trend_words.py uses 49")
    s = sub.add_parser("sequential")
    s.add_argument("--shift", type=float, nargs="+", required=True)
    s.add_argument("--sweeps", type=int, default=2000)
    s.add_argument("--rng-seed", type=int, default=9, help="tests/test_verdicts.py uses 9")
    args = parser.parse_args()
    cases = args.constant if args.what == "trend" else args.shift
    for case in cases:
        started = time.perf_counter()
        if args.what == "trend":
            row = trend((case,) * 3, args.sd, args.seeds, args.replicates, args.rng_seed)
        else:
            row = sequential(case, args.sweeps, args.rng_seed)
        row["seconds"] = round(time.perf_counter() - started, 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
