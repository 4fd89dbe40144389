"""The compute multiplier's coverage and the false-call rate of its words (docs/sweeps.md), measured by
simulation through the report's own `multiplier`:

    python benchmarks/multiplier_rates.py --true 0.7 0.85 1.0 1.15 --seeds 4 8 [--replicates 2000]
    python benchmarks/multiplier_rates.py --trend 0.8,0.8 1.0,1.0 0.8,1.25 0.7,0.9 --seeds 4 8

`--trend FIRST,LAST`: a ladder of two budgets whose true multipliers are FIRST and LAST, each budget its own
pair of settings on the same model of curves, judged by `multiplier_trends` as the report judges a design
across a ladder's budgets. Every word the truth does not bear is a false call: under a constant multiplier
all but `holds` and `not resolved` (at 1, all but `not resolved`); under a reversed one (0.8 then 1.25) all but
`flips`, `changes` and `not resolved`.

Each replicate is a sweep's pair of settings over `--seeds` seeds. A seed's baseline curve is a power law in
the step, `floor + A·s^-alpha` (at 300 steps: 1.85 nats/char, falling 0.1 nats per 100 steps: what the
Muon recipe's runs show at their end), and the design's is the same curve on a clock `--true` times as fast:
it reaches any loss in `true`× the baseline's steps. On top, per seed, an offset shared by both sides
(correlation `--rho`) of sd `--seed-sd`, and at every validation (every 5% of the run) independent noise of
sd `--val-sd`. The true multiplier is `true`; a reading `less` is false where true ≥ 1, `more` where true ≤ 1
(at true = 1 both can be false: `false_any` adds them). Coverage is over the replicates with an interval.
Prints one JSON line per case with Wilson 95% intervals.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from tinylm.analysis.ladder import TrendWord
from tinylm.analysis.multiplier import Cost, Multiplier, Reading, multiplier, multiplier_trends

STEPS, EVERY = 300, 15  # the budget and the validation interval (5% of it)
FLOOR, AT_END, SLOPE_AT_END = 1.5, 1.85, 0.001  # nats/char; the slope per step at the end
ALPHA = SLOPE_AT_END * STEPS / (AT_END - FLOOR)
SCALE = (AT_END - FLOOR) * STEPS**ALPHA


def curve(steps: np.ndarray, speed: float, offset: float, val_sd: float, rng: np.random.Generator) -> list:
    mean = FLOOR + SCALE * (steps / speed) ** -ALPHA + offset
    return list(zip(steps.tolist(), (mean + rng.normal(0, val_sd, steps.size)).tolist(), strict=True))


def wilson(count: int, n: int) -> list[float]:
    low, high = proportion_confint(count, n, method="wilson")
    return [round(float(low), 4), round(float(high), 4)]


def simulated(true: float, seeds: int, args: argparse.Namespace, rng: np.random.Generator) -> Multiplier:
    """One sweep's pair of settings whose true multiplier is `true`, through the report's `multiplier`."""
    steps = np.arange(EVERY, STEPS + 1, EVERY, dtype=float)
    shared = rng.normal(0, args.seed_sd, seeds)
    own = rng.normal(0, args.seed_sd, (2, seeds))
    offsets = args.rho**0.5 * shared + (1 - args.rho) ** 0.5 * own
    base = {s: curve(steps, 1.0, offsets[0, s], args.val_sd, rng) for s in range(seeds)}
    design = {s: curve(steps, true, offsets[1, s], args.val_sd, rng) for s in range(seeds)}
    return multiplier(design, base, Cost.STEPS)


def case(true: float, seeds: int, args: argparse.Namespace, rng: np.random.Generator) -> dict:
    readings = {r: 0 for r in Reading}
    covered = with_interval = all_reached = 0
    for _ in range(args.replicates):
        found = simulated(true, seeds, args, rng)
        readings[found.reading] += 1
        all_reached += not found.never_reached
        if found.ratio is not None and found.ratio.has_interval:
            with_interval += 1
            covered += found.ratio.low <= true <= found.ratio.high
    false_less = readings[Reading.LESS] if true >= 1 else 0
    false_more = readings[Reading.MORE] if true <= 1 else 0
    n = args.replicates
    return {
        "true": true,
        "seeds": seeds,
        "seed_sd": args.seed_sd,
        "val_sd": args.val_sd,
        "rho": args.rho,
        "replicates": n,
        "rng_seed": args.rng_seed,
        "readings": {r.value: c for r, c in readings.items()},
        "every_seed_reached": round(all_reached / n, 4),
        "coverage": round(covered / with_interval, 4) if with_interval else None,
        "coverage_interval": wilson(covered, with_interval) if with_interval else None,
        "false_less": round(false_less / n, 4),
        "false_less_interval": wilson(false_less, n),
        "false_more": round(false_more / n, 4),
        "false_more_interval": wilson(false_more, n),
        "false_any": round((false_less + false_more) / n, 4),
    }


def trend(
    truths: tuple[float, float], seeds: int, args: argparse.Namespace, rng: np.random.Generator
) -> dict:
    """Counts of every word across two budgets whose true multipliers are `truths`, and the false calls."""
    words = {w: 0 for w in TrendWord}
    for _ in range(args.replicates):
        levels = [(str(i), simulated(true, seeds, args, rng)) for i, true in enumerate(truths)]
        words[multiplier_trends([({}, levels)], alpha=0.05)[0].word] += 1
    first, last = truths
    if first == last:  # `holds` states the level's direction: false at 1
        true_words = {TrendWord.HOLDS, TrendWord.UNRESOLVED} if first != 1 else {TrendWord.UNRESOLVED}
    elif (first - 1) * (last - 1) < 0:
        true_words = {TrendWord.FLIPS, TrendWord.UNRESOLVED, TrendWord.CHANGES}
    else:
        true_words = {TrendWord.GROWS if abs(np.log(last)) > abs(np.log(first)) else TrendWord.SHRINKS}
        true_words |= {TrendWord.UNRESOLVED, TrendWord.CHANGES, TrendWord.HOLDS}
    false = sum(n for w, n in words.items() if w not in true_words)
    n = args.replicates
    return {
        "truths": list(truths),
        "seeds": seeds,
        "replicates": n,
        "rng_seed": args.rng_seed,
        "words": {w.value: c for w, c in words.items()},
        "false_rate": round(false / n, 4),
        "false_interval": wilson(false, n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--true", type=float, nargs="+", default=[0.7, 0.85, 1.0, 1.15])
    parser.add_argument("--seeds", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--seed-sd", type=float, default=0.01)
    parser.add_argument("--val-sd", type=float, default=0.005)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--rng-seed", type=int, default=0)
    parser.add_argument("--trend", nargs="+", metavar="FIRST,LAST", help="two budgets' true multipliers")
    args = parser.parse_args()
    rng = np.random.default_rng(args.rng_seed)
    if args.trend:
        for seeds in args.seeds:
            for pair in args.trend:
                first, last = (float(v) for v in pair.split(","))
                print(json.dumps(trend((first, last), seeds, args, rng)), flush=True)
        return
    for seeds in args.seeds:
        for true in args.true:
            print(json.dumps(case(true, seeds, args, rng)), flush=True)


if __name__ == "__main__":
    main()
