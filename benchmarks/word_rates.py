"""The rates docs/sweeps.md states for the ladder's trend words and the sequential design's power, and
docs/diagnosis.md for two findings, re-measured through the same simulations the tests run (tests/conftest.py
`simulated_words`, tests/test_verdicts.py `sequential_sweeps`, tests/test_diagnosis.py `simulated_findings`),
with each figure's scenario and Monte Carlo interval:

    python benchmarks/word_rates.py trend --seeds 6 --sd 0.03 --constant 0 -0.05 -0.1 [--replicates 2000]
    python benchmarks/word_rates.py sequential --shift 0.02 0.04 [--sweeps 2000]
    python benchmarks/word_rates.py diagnosis [--replicates 2000] [--against OLD_DIAGNOSIS.py]

`trend`: one design at three ordered levels (`trainer.max_steps`) whose difference from each level's baseline is
the same constant there, `--seeds` seeds a level, paired sd `--sd`, each replicate through the report's paired
tests, `judge` and `trends`; every word but `holds` and `not resolved` is then a false call (tests/test_trend_words.py
has the scenarios where the difference changes). `sequential`: a family of 3 rows against a baseline, paired sd
0.05, looks every 2 seeds up to 16, a true difference `--shift` in every row; each row's chance to be found
`worse` by the group-sequential design and by the 16 seeds judged at once, on the same sweeps. Prints one JSON
line per case; intervals are 95% (Wilson for a rate; for the power gap, normal over sweeps, whose three rows
share a baseline). `diagnosis`: docs/diagnosis.md's rates for `still improving` and `distribution shift`,
through `diagnose` on tests/test_diagnosis.py's simulated 600-step runs (`simulated_findings`): flat curves
with validation noise of sd 0.0025-0.015 validated every 20 and every 100 steps (every `still improving` a
false call), curves still falling 0.02 and 0.05 per 100 steps (its power), one flattening in its last third,
and the shift run with its look-alikes; `--against` measures another version of diagnosis.py on the same
runs (e.g. `git show <commit>:tinylm/analysis/diagnosis.py > /tmp/old.py`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from statsmodels.stats.proportion import proportion_confint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import simulated_words
from test_diagnosis import simulated_findings
from test_verdicts import sequential_sweeps

from tinylm.analysis import diagnosis
from tinylm.analysis.diagnosis import STILL_IMPROVING
from tinylm.analysis.ladder import TrendWord
from tinylm.analysis.verdicts import Outcome

TRUE_UNDER_A_CONSTANT = {TrendWord.HOLDS, TrendWord.UNRESOLVED}
SHIFT = "distribution shift"  # by name: a diagnosis.py from before it (--against) has no constant for it
# (scenario, slope per 100 steps, validation noise sds): each validated every 20 and every 100 steps.
DIAGNOSIS_CASES = [
    ("flat", 0.0, (0.0025, 0.005, 0.01, 0.015)),
    ("falling", 0.02, (0.0025, 0.005, 0.01, 0.015)),
    ("falling", 0.05, (0.0025, 0.005, 0.01, 0.015)),
    ("flattening", 0.0, (0.005, 0.015)),
    *((scenario, 0.0, (0.005, 0.015)) for scenario in ("normal", "widening", "overfitting", "shift")),
]


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


def diagnosed(scenario: str, slope: float, every: int, sd: float, replicates: int, seed: int, rules) -> dict:
    """How often `rules.diagnose` says `still improving` and `distribution shift` on one scenario's runs."""
    counts = simulated_findings(scenario, every, sd, replicates, slope, seed, rules)
    row: dict = {"scenario": scenario, "slope_per_100": slope, "every": every, "val_sd": sd}
    row |= {"replicates": replicates, "rng_seed": seed, "counts": counts}
    for key, kind in (("still_improving", STILL_IMPROVING), ("shift", SHIFT)):
        row[f"{key}_rate"] = round(counts.get(kind, 0) / replicates, 4)
        row[f"{key}_interval"] = wilson(counts.get(kind, 0), replicates)
    return row


def load_diagnosis(path: Path):
    """Another version of tinylm/analysis/diagnosis.py, as a module of its own."""
    spec = importlib.util.spec_from_file_location("diagnosis_against", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


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
    d = sub.add_parser("diagnosis")
    d.add_argument("--replicates", type=int, default=2000)
    d.add_argument("--rng-seed", type=int, default=64, help="tests/test_diagnosis.py uses 64")
    d.add_argument("--against", type=Path, help="a diagnosis.py to measure instead of this one")
    args = parser.parse_args()
    if args.what == "diagnosis":
        rules = load_diagnosis(args.against) if args.against else diagnosis
        for scenario, slope, sds in DIAGNOSIS_CASES:
            for every in (20, 100):
                for sd in sds:
                    row = diagnosed(scenario, slope, every, sd, args.replicates, args.rng_seed, rules)
                    print(json.dumps(row), flush=True)
        return
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
