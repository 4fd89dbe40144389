"""Muon against AdamW: the baby model's optimizer step and whole training step with `optim=adamw` and
`optim=muon`, paired and alternated (benchmarks/paired.py), fp32 forward and backward (`--precision bf16`:
under CPU autocast, as `trainer.precision=bf16-mixed`).

    OMP_NUM_THREADS=1 python benchmarks/optim_speed.py [adamw muon] [--steps 60] [--repeats 5] [--clock thread]

The two setups are `adamw`, `muon` (Newton–Schulz in the dtype `optim.muon_ns_dtype=auto` picks here),
`muon-bf16` (torch.optim.Muon's own step) or `muon-fp32` (tinylm's fp32 orthogonalisation); e.g.
`muon-fp32 muon-bf16` decides what `auto` should pick on this CPU (docs/performance.md).
"""

from __future__ import annotations

import argparse

import torch
from norm_speed import BABY, batches, setup  # benchmarks/, beside this file
from paired import Setup, compare, print_summary

from tinylm.training.optimizers import OptimConfig

SETUPS = {
    "adamw": OptimConfig(),
    "muon": OptimConfig(name="muon"),
    "muon-bf16": OptimConfig(name="muon", muon_ns_dtype="bf16"),
    "muon-fp32": OptimConfig(name="muon", muon_ns_dtype="fp32"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setups", nargs="*", help=f"two of {', '.join(SETUPS)}; default: adamw muon")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument(
        "--clock", choices=("wall", "thread"), default="wall", help="thread: CPU time (a shared machine)"
    )
    parser.add_argument(
        "--precision", choices=("32", "bf16"), default="32", help="bf16: forward under CPU autocast"
    )
    parser.add_argument("--json", help="also write the result to this file")
    args = parser.parse_args()
    args.setups = args.setups or ["adamw", "muon"]
    if len(args.setups) != 2 or not set(args.setups) <= set(SETUPS):
        parser.error(f"name two setups of {', '.join(SETUPS)}")
    torch.set_num_threads(args.threads)
    names = (args.setups[0], args.setups[1])
    autocast = torch.bfloat16 if args.precision == "bf16" else None

    def make(name: str) -> Setup:
        made = setup(name, BABY, SETUPS[name])
        made.autocast = autocast
        return made

    result = compare(
        make,
        names, batches(BABY, args.batch_size), args.steps, args.warmup, args.repeats, args.clock,
    )  # fmt: skip
    result["model"] = {
        "norm_type": BABY.norm_type,
        "batch_size": args.batch_size,
        "precision": args.precision,
    }
    print_summary(result, names, args.json)


if __name__ == "__main__":
    main()
