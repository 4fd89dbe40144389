"""RMSNorm against LayerNorm: the training step time of the baby model with each, paired and alternated
(benchmarks/paired.py), in fp32 with the fused norms and fused AdamW tinylm trains with by default.

    OMP_NUM_THREADS=1 python benchmarks/norm_speed.py [--steps 60] [--repeats 5] [--threads 1] [--clock thread]
        [--compile] [--json out.json]

Prints each norm's median step time, and per repetition the ratio rms / layer (docs/performance.md).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
import torch.nn.functional as F
from paired import Setup, compare, print_summary  # benchmarks/, beside this file

from tinylm.model import ModelConfig, norms
from tinylm.training.module import CharLM
from tinylm.training.optimizers import OptimConfig

BABY = ModelConfig(vocab_size=65, n_layer=4, n_head=4, d_model=128, block_size=64, fused_norms=True)


def batches(config: ModelConfig, batch_size: int, count: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    windows = [torch.randint(config.vocab_size, (batch_size, config.block_size + 1), generator=generator)
               for _ in range(count)]  # fmt: skip
    return [(w[:, :-1].contiguous(), w[:, 1:].contiguous()) for w in windows]


def setup(name: str, model: ModelConfig, optim: OptimConfig, compile: bool = False) -> Setup:
    torch.manual_seed(0)
    module = CharLM(model, optim)
    if compile:
        module.model.compile()  # as `compile=true` does: the forward and backward through inductor
    return Setup(name, module.model, module.configure_optimizers())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--fused-norms", choices=("true", "false"), default="true")
    parser.add_argument(
        "--clock", choices=("wall", "thread"), default="wall", help="thread: CPU time (a shared machine)"
    )
    parser.add_argument(
        "--rms-kernel", choices=("tinylm", "torch"), default="tinylm",
        help="torch: RMSNorm's fused path through F.rms_norm, as before tinylm's own (the 'before' figure)",
    )  # fmt: skip
    parser.add_argument("--compile", action="store_true", help="both models compiled, as `compile=true`")
    parser.add_argument("--json", help="also write the result to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.rms_kernel == "torch":
        norms.rms_norm = lambda x, weight, eps: F.rms_norm(x, weight.shape, weight, eps)
    model = replace(BABY, fused_norms=args.fused_norms == "true")
    optim = OptimConfig()
    names = ("layer", "rms")
    result = compare(
        lambda name: setup(name, replace(model, norm_type=name), optim, args.compile),
        names, batches(model, args.batch_size), args.steps, args.warmup, args.repeats, args.clock,
    )  # fmt: skip
    result["model"] = {"norm": model.norm, "fused_norms": model.fused_norms, "batch_size": args.batch_size}
    result["rms_kernel"] = args.rms_kernel
    result["compile"] = args.compile
    print_summary(result, names, args.json)


if __name__ == "__main__":
    main()
