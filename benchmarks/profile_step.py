"""Where the baby model's fp32 training step spends its time: torch's profiler over plain training steps of
tinylm's `GPT` (forward, backward, gradient clipping, fused AdamW, zero_grad; no Lightning), self CPU time
grouped by kind of op (docs/performance.md).

    OMP_NUM_THREADS=1 python benchmarks/profile_step.py [--steps 20] [--bias false] [--norm-type rms]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
from norm_speed import BABY, batches  # benchmarks/, beside this file
from paired import cpu_name
from torch.profiler import ProfilerActivity, profile

from tinylm.training.module import CharLM
from tinylm.training.optimizers import OptimConfig

# Op name fragments -> the kind of work they are; the first match wins. (Under norm_type=rms, RMSNorm's own
# reduction is a linalg_vector_norm too, counted with clipping's.)
KINDS = {
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul"),
    "attention kernel": ("scaled_dot_product",),
    "GELU": ("gelu",),
    "norms": ("layer_norm", "RMSNormFunction"),
    "optimizer": ("adamw", "Optimizer", "muon"),
    "vector norms, clipping": ("vector_norm", "clamp", "_foreach"),
    "embedding and loss": ("embedding", "nll_loss", "log_softmax", "cross_entropy"),
}
# Ops that move or lay out data rather than compute (exact names).
LAYOUT = {"aten::copy_", "aten::cat", "aten::clone", "aten::contiguous", "aten::empty", "aten::empty_strided",
          "aten::fill_", "aten::zero_", "aten::zeros", "aten::as_strided", "aten::view", "aten::transpose",
          "aten::reshape", "aten::split", "aten::slice", "aten::t", "aten::expand", "aten::permute",
          "aten::_unsafe_view", "aten::unsafe_split", "aten::detach", "aten::resize_", "aten::empty_like"}  # fmt: skip


def kind(name: str) -> str:
    if name in LAYOUT:
        return "copies and layout"
    for label, fragments in KINDS.items():
        if any(fragment in name for fragment in fragments):
            return label
    return "other (elementwise, autograd)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bias", choices=("true", "false"), default="true")
    parser.add_argument("--norm-type", default="layer")
    parser.add_argument("--optim", choices=("adamw", "muon"), default="adamw")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_config = replace(BABY, bias=args.bias == "true", norm_type=args.norm_type)
    torch.manual_seed(0)
    module = CharLM(model_config, OptimConfig(name=args.optim))
    model, optimizer = module.model, module.configure_optimizers()
    data = batches(model_config, 12)

    def step(i: int) -> None:
        _, loss = model(*data[i % len(data)])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(args.warmup):
        step(i)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(args.steps):
            step(i)
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        if event.key.startswith(("autograd::engine", "ProfilerStep")):
            continue
        totals[kind(event.key)] = totals.get(kind(event.key), 0.0) + event.self_cpu_time_total
    whole = sum(totals.values())
    print(
        f"{cpu_name()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}; {args.steps} steps of "
        f"the baby model, bias={args.bias}, norm_type={args.norm_type}, optim={args.optim}, fp32"
    )
    print(f"self CPU time per step (under the profiler): {whole / args.steps / 1e3:.2f} ms")
    for label, total in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"  {label:20s} {total / args.steps / 1e3:7.2f} ms  {100 * total / whole:5.1f}%")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
