"""Training throughput of tinylm's real path against a bare PyTorch loop, measured side by side.

(a) tinylm: `tinylm.train.run(cfg)` exactly as a user runs it: Lightning Trainer, datamodule, logging,
    checkpointing and callbacks at the config's settings; step times come from a callback.
(b) bare: the plain reference every speed-up is judged against: the same architecture with the norms written
    out as formulas, batches already in memory, forward + backward + PyTorch's default AdamW step + zero_grad,
    nothing else, fp32, eager. It ignores tinylm's optimisation flags (fused norms and AdamW, bf16, compile),
    so `ratio` is tinylm at the given settings against plain PyTorch.

Both report the median step time after warm-up. Repetitions alternate (bare, tinylm, bare, tinylm, ...), so
slow drifts of the machine hit both alike. FLOPs per step are counted with `torch.utils.flop_counter` and
compared with this machine's fp32 matmul peak, measured in the same process.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import lightning.pytorch as L
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.flop_counter import FlopCounterMode

from tinylm.data import CharDataModule, RandomWindows
from tinylm.model import GPT, ModelConfig
from tinylm.module import OptimConfig, matrix_names, weight_decay_groups
from tinylm.precision import resolve_precision
from tinylm.step_profile import step_shares


class StepTimer(L.Callback):
    """Wall time of every training step, from one step's end to the next (data, forward, backward, optimizer,
    logging and callbacks included: everything the user waits for)."""

    def __init__(self) -> None:
        self.step_times: list[float] = []
        self.callbacks: list[L.Callback] = []
        self._last: float | None = None

    def on_fit_start(self, trainer: L.Trainer, *_: Any) -> None:
        self.callbacks = list(trainer.callbacks)

    def on_train_batch_end(self, *_: Any) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.step_times.append(now - self._last)
        self._last = now


@dataclass
class PathResult:
    median_step_s: float
    tokens_per_s: float
    steps_timed: int


def _median_result(step_times: list[float], warmup: int, tokens_per_step: int) -> PathResult:
    timed = step_times[warmup:]
    if not timed:
        raise ValueError(f"no steps left to time after {warmup} warm-up steps; raise bench.steps")
    median = statistics.median(timed)
    return PathResult(median, tokens_per_step / median, len(timed))


def bare_loop(
    model_config: ModelConfig, optim: OptimConfig, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> list[float]:
    """The reference: forward, backward, AdamW step, zero_grad; nothing else, in plain fp32 eager."""
    torch.manual_seed(0)
    model = GPT(replace(model_config, fused_norms=False))
    groups = weight_decay_groups(model.named_parameters(), matrix_names(model), optim.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=optim.lr, betas=(optim.beta1, optim.beta2))
    times = []
    for inputs, targets in batches:
        start = time.perf_counter()
        _, loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times


def tinylm_path(cfg: DictConfig, steps: int, profile: cProfile.Profile | None = None) -> StepTimer:
    from tinylm.train import run  # the real entry point, imported late to keep this module light

    timer = StepTimer()
    with tempfile.TemporaryDirectory(prefix="tinylm-bench-") as run_dir:
        cfg = cfg.copy()
        with open_dict(cfg):
            cfg.run_dir = run_dir
            cfg.run_name = "bench"
            cfg.trainer.max_steps = steps
            cfg.sample.chars = 0
        with profile if profile is not None else contextlib.nullcontext():
            run(cfg, extra_callbacks=[timer])
    return timer


def profiled_shares(cfg: DictConfig, steps: int) -> dict[str, Any]:
    """Data loading and logging as shares of the training step (tinylm.step_profile), from one more run."""
    profile = cProfile.Profile()
    timer = tinylm_path(cfg, steps, profile)
    shares = step_shares(profile, timer.callbacks)
    return {
        "method": "cProfile over Lightning's training steps (upper bounds: the profiler slows Python code most)",
        "steps": shares.steps,
        "data_loading_share": shares.data_loading_share,
        "logging_share": shares.logging_share,
        "logging_parts_share": {name: t / shares.step_s for name, t in shares.logging_parts_s.items()},
    }


def flops_per_step(model_config: ModelConfig, batch_size: int) -> int:
    model = GPT(model_config)
    idx = torch.zeros(batch_size, model_config.block_size, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    return counter.get_total_flops()


def matmul_peak_flops(dtype: torch.dtype = torch.float32, size: int = 1024, seconds: float = 2.0) -> float:
    """Best FLOP/s of a square `dtype` matmul on this machine with the current thread setting."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(3):
        a @ b
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        best = max(best, 2 * size**3 / (time.perf_counter() - start))
    return best


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run(cfg: DictConfig) -> dict[str, Any]:
    bench = cfg.bench
    steps, warmup, repeats = int(bench.steps), int(bench.warmup), int(bench.repeats)
    if steps - warmup < 50 and not bench.get("allow_few_steps", False):
        raise ValueError(f"bench.steps - bench.warmup = {steps - warmup}: at least 50 timed steps are needed")
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    precision = resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator)

    datamodule = CharDataModule(**OmegaConf.to_container(cfg.data, resolve=True))
    tokenizer = datamodule.prepare()
    model_config = ModelConfig.from_dict(
        {**OmegaConf.to_container(cfg.model, resolve=True), "vocab_size": tokenizer.vocab_size}
    )
    optim = OptimConfig(**OmegaConf.to_container(cfg.optim, resolve=True))
    batch_size = int(cfg.data.batch_size)
    tokens_per_step = batch_size * model_config.block_size
    assert datamodule.train_tokens is not None
    windows = RandomWindows(
        datamodule.train_tokens.long(), model_config.block_size, batch_size, int(cfg.seed)
    )
    batches = [windows.batch(i) for i in range(steps)]

    bare, ours = [], []
    for _ in range(repeats):
        bare.append(_median_result(bare_loop(model_config, optim, batches), warmup, tokens_per_step))
        ours.append(_median_result(tinylm_path(cfg, steps).step_times, warmup, tokens_per_step))
    shares = profiled_shares(cfg, steps) if bench.get("profile", True) else None

    flops = flops_per_step(model_config, batch_size)
    peak = matmul_peak_flops()
    # bf16 autocast runs the matmuls in bf16: their peak is the one to compare with.
    peak_in_use = matmul_peak_flops(torch.bfloat16) if "bf16" in str(precision) else peak
    best_ours = max(r.tokens_per_s for r in ours)
    result = {
        "config": {
            "n_layer": model_config.n_layer,
            "n_head": model_config.n_head,
            "d_model": model_config.d_model,
            "block_size": model_config.block_size,
            "batch_size": batch_size,
            "norm": model_config.norm,
            "act": model_config.act,
            "params": GPT(model_config).num_params(),
            "precision": str(precision),
            "compile": bool(cfg.get("compile", False)),
            "fused_norms": model_config.fused_norms,
            "optimizer": optim.implementation,
        },
        "machine": {
            "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "processor": platform.processor() or platform.machine(),
        },
        "steps": steps,
        "warmup": warmup,
        "repeats": repeats,
        "bare_tokens_per_s": [r.tokens_per_s for r in bare],
        "tinylm_tokens_per_s": [r.tokens_per_s for r in ours],
        "ratio": [o.tokens_per_s / b.tokens_per_s for o, b in zip(ours, bare, strict=True)],
        "flops_per_step": flops,
        "tinylm_flops_per_s": flops * best_ours / tokens_per_step,
        "matmul_peak_flops_per_s": peak,
        "fraction_of_matmul_peak": flops * best_ours / tokens_per_step / peak,
        "matmul_peak_in_use_flops_per_s": peak_in_use,
        "fraction_of_matmul_peak_in_use": flops * best_ours / tokens_per_step / peak_in_use,
        "step_profile": shares,
        "peak_rss_mb": peak_rss_mb(),
    }
    return result


def format_report(result: dict[str, Any]) -> str:
    c = result["config"]
    lines = [
        f"config: {c['n_layer']} layers, {c['n_head']} heads, d={c['d_model']}, block {c['block_size']}, "
        f"batch {c['batch_size']}, norm={c['norm']}, act={c['act']}, {c['params']:,} params; "
        f"precision {c['precision']}, compile={c['compile']}, fused_norms={c['fused_norms']}, "
        f"optimizer={c['optimizer']}",
        f"machine: {result['machine']['threads']} torch threads, torch {result['machine']['torch']}",
        f"median over {result['steps'] - result['warmup']} steps after {result['warmup']} warm-up, "
        f"{result['repeats']} repetitions:",
        "  rep  bare tok/s  tinylm tok/s  ratio",
    ]
    for i, (b, o, r) in enumerate(
        zip(result["bare_tokens_per_s"], result["tinylm_tokens_per_s"], result["ratio"], strict=True)
    ):
        lines.append(f"  {i + 1:>3}  {b:>10,.0f}  {o:>12,.0f}  {r:5.3f}")
    lines += [
        f"FLOPs/step {result['flops_per_step'] / 1e9:.3f} GFLOP; tinylm achieves "
        f"{result['tinylm_flops_per_s'] / 1e9:.2f} GFLOP/s = {result['fraction_of_matmul_peak']:.1%} of the "
        f"measured fp32 matmul peak ({result['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s)",
    ]
    if result["matmul_peak_in_use_flops_per_s"] != result["matmul_peak_flops_per_s"]:
        lines.append(
            f"  = {result['fraction_of_matmul_peak_in_use']:.1%} of the measured bf16 matmul peak "
            f"({result['matmul_peak_in_use_flops_per_s'] / 1e9:.1f} GFLOP/s), the precision its matmuls run in"
        )
    profile = result["step_profile"]
    if profile is not None:
        parts = ", ".join(f"{name} {share:.2%}" for name, share in profile["logging_parts_share"].items())
        lines.append(
            f"step profile ({profile['steps']} steps, {profile['method']}): data loading "
            f"{profile['data_loading_share']:.2%}, logging {profile['logging_share']:.2%} ({parts})"
        )
    lines.append(f"peak RSS of this process: {result['peak_rss_mb']:.0f} MB")
    return "\n".join(lines)


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(
        result, indent=2, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o)
    )
