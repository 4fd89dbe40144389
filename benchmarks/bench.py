"""Training throughput of tinylm's real path against a bare PyTorch loop, measured side by side:
`python benchmarks/bench.py [--json] [any train.py override]` (docs/performance.md).

(a) tinylm: `tinylm.training.run.run(cfg)` exactly as a user runs it: Lightning Trainer, datamodule, logging,
    checkpointing and callbacks at the config's settings.
(b) bare: the plain reference every speed-up is judged against: the same architecture, batches already in
    memory, forward + backward + AdamW step + zero_grad, nothing else, fp32, eager. It ignores tinylm's
    optimisation flags (fused norms and AdamW, bf16, compile), so `ratio` is tinylm at the given settings
    against plain PyTorch: with `bench.reference=plain` (the default) the norms written out as formulas and
    PyTorch's default AdamW; with `bench.reference=fast` the fastest plain loop of this model (fused norm
    kernels, `AdamW(fused=True)`).

The two take turns step by step in one process: after each tinylm step a callback runs one bare step on its
own model and optimizer, and each path's clock runs only during its own work. A machine whose speed drifts
(this project's 2-core VM moves between ~15k and ~20k tok/s from one half-minute to the next) then slows
both alike, where timing one path's run after the other's made single ratios swing by ±15%. Each path
reports its median step time after warm-up, and the time tinylm adds to a step is the median of the paired
differences (`PairedStepTimer.added_step_time`); a repetition is one training run. FLOPs per step are
counted with `torch.utils.flop_counter` and compared with this machine's matmul peak, measured in the same
process.

With `bench.control=true` a second bare loop, identical to the first, runs right after it each step: its
ratio to the first is what this pairing reads for two loops that differ in nothing, the noise floor of one
repetition's ratio. tinylm's steps then follow two foreign steps instead of one, so leave it off for the
ratio itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import hydra
import lightning.pytorch as L
import torch
from omegaconf import DictConfig, open_dict
from step_profile import StepProfile  # benchmarks/, beside this file
from torch.utils.flop_counter import FlopCounterMode

import tinylm.training.resolvers  # noqa: F401  (registers the resolvers conf/train.yaml uses)
from tinylm.data import CharDataModule, RandomWindows
from tinylm.errors import ConfigError
from tinylm.model import GPT, ModelConfig
from tinylm.training.optimizers import OptimConfig, decays, weight_decay_groups
from tinylm.training.precision import compute_dtype
from tinylm.training.settings import RunSettings


class BareLoop:
    """The reference: forward, backward, AdamW step, zero_grad; nothing else, in fp32 eager. `fast=False`:
    the norms' formulas and PyTorch's default AdamW; `fast=True`: the fastest such loop torch offers on CPU,
    the fused norm kernels and `AdamW(fused=True)` (the model's one QKV projection and SDPA either way)."""

    def __init__(self, model_config: ModelConfig, optim: OptimConfig, fast: bool = False) -> None:
        torch.manual_seed(0)
        self.model = GPT(replace(model_config, fused_norms=fast))
        groups = weight_decay_groups(self.model.named_parameters(), decays(self.model), optim.weight_decay)
        self.optimizer = torch.optim.AdamW(
            groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), fused=True if fast else None
        )

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        start = time.perf_counter()
        _, loss = self.model(inputs, targets)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start


class PairedStepTimer(L.Callback):
    """Wall time of every tinylm training step, from one step's end to the next (data, forward, backward,
    optimizer, logging and callbacks included: everything the user waits for), with one bare step run and
    timed in between, outside tinylm's clock."""

    def __init__(
        self,
        bare: BareLoop,
        batches: list[tuple[torch.Tensor, torch.Tensor]],
        control: BareLoop | None = None,
    ) -> None:
        self.bare = bare
        self.control = control
        self.batches = batches
        self.step_times: list[float] = []
        self.bare_step_times: list[float] = []
        self.control_step_times: list[float] = []
        self._last: float | None = None

    def on_train_batch_end(self, *_: Any) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.step_times.append(now - self._last)
        if len(self.bare_step_times) < len(self.batches):
            batch = self.batches[len(self.bare_step_times)]
            self.bare_step_times.append(self.bare.step(*batch))
            if self.control is not None:
                self.control_step_times.append(self.control.step(*batch))
        self._last = time.perf_counter()

    def added_step_time(self, warmup: int) -> float:
        """Median over the timed steps of (tinylm's step - the bare step run right after it), in seconds.

        `step_times[i]` is tinylm's step i + 1 (step 0 has no start to time from), and the bare step run right
        after it is `bare_step_times[i + 1]`. Each pair ran back to back, at whatever speed the machine ran
        then, so this is what tinylm adds to a step; the ratio also moves with that speed (the same 2 ms are
        5% of a 41 ms step and 4% of a 52 ms one).
        """
        return _median_difference(self.step_times[warmup:], self.bare_step_times[warmup + 1 :], warmup)

    def control_minus_bare(self, warmup: int) -> float:
        """Median over the timed steps of (the control's step - the bare step run right before it), in
        seconds: what the pairing reads for two identical loops."""
        return _median_difference(self.control_step_times[warmup:], self.bare_step_times[warmup:], warmup)


def _median_difference(ours: list[float], theirs: list[float], warmup: int) -> float:
    pairs = list(zip(ours, theirs, strict=True))
    if not pairs:
        raise ConfigError(f"no steps left to pair after {warmup} warm-up steps; raise bench.steps")
    return statistics.median(a - b for a, b in pairs)


@dataclass
class PathResult:
    median_step_s: float
    tokens_per_s: float
    steps_timed: int


def _median_result(step_times: list[float], warmup: int, tokens_per_step: int) -> PathResult:
    timed = step_times[warmup:]
    if not timed:
        raise ConfigError(f"no steps left to time after {warmup} warm-up steps; raise bench.steps")
    median = statistics.median(timed)
    return PathResult(median, tokens_per_step / median, len(timed))


def tinylm_run(cfg: DictConfig, steps: int, *observers: L.Callback) -> None:
    """One real training run of `steps` steps into a temporary directory, watched by `observers`."""
    from tinylm.training.run import run  # the real entry point, imported late to keep this module light

    with tempfile.TemporaryDirectory(prefix="tinylm-bench-") as run_dir:
        cfg = cfg.copy()
        with open_dict(cfg):
            cfg.run_dir = run_dir
            cfg.run_name = "bench"
            cfg.trainer.max_steps = steps
            cfg.sample.chars = 0
            cfg.latest_link = None  # a benchmark leaves no trace, runs/latest included
        run(cfg, observers=list(observers))


def profiled_shares(cfg: DictConfig, steps: int) -> dict[str, Any]:
    """Data loading, logging and health as shares of the training step (benchmarks/step_profile.py), from one
    more run of the same path."""
    profile = StepProfile()
    try:
        tinylm_run(cfg, steps, profile)
    finally:
        profile.teardown()
    shares = profile.result
    return {
        "method": "wall-clock timers around each part, inside Lightning's training steps",
        "steps": shares.steps,
        "data_loading_share": shares.share("data loading"),
        "logging_share": shares.share("logging"),
        "health_share": shares.share("health"),
        "parts_share": {name: t / shares.step_s for name, t in shares.parts_s.items()},
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
        raise ConfigError(
            f"bench.steps - bench.warmup = {steps - warmup}: at least 50 timed steps are needed"
        )
    if bench.reference not in ("plain", "fast"):
        raise ConfigError(f"bench.reference={bench.reference}: expected plain or fast")
    settings = RunSettings.from_cfg(cfg)  # the settings run(cfg) will use, precision resolved
    cfg, precision = settings.cfg, settings.trainer["precision"]

    datamodule = CharDataModule(settings.data)
    tokenizer = datamodule.prepare()
    model_config = dataclasses.replace(settings.model, vocab_size=tokenizer.vocab_size)
    optim = settings.optim
    batch_size = int(cfg.data.batch_size)
    tokens_per_step = batch_size * model_config.block_size
    assert datamodule.train_tokens is not None
    windows = RandomWindows(datamodule.train_tokens, model_config.block_size, batch_size, int(cfg.seed))
    batches = [windows.batch(i) for i in range(steps)]

    with_control = bool(bench.get("control", False))
    fast = bench.reference == "fast"
    bare, ours, added, controls, control_added = [], [], [], [], []
    for _ in range(repeats):
        control = BareLoop(model_config, optim, fast) if with_control else None
        timer = PairedStepTimer(BareLoop(model_config, optim, fast), batches, control)
        tinylm_run(cfg, steps, timer)
        bare.append(_median_result(timer.bare_step_times, warmup, tokens_per_step))
        ours.append(_median_result(timer.step_times, warmup, tokens_per_step))
        added.append(timer.added_step_time(warmup))
        if with_control:
            controls.append(_median_result(timer.control_step_times, warmup, tokens_per_step))
            control_added.append(timer.control_minus_bare(warmup))
    shares = profiled_shares(cfg, steps) if bench.get("profile", True) else None

    flops = flops_per_step(model_config, batch_size)
    peak_seconds = float(bench.get("peak_seconds", 2.0))
    peak = matmul_peak_flops(seconds=peak_seconds)
    # Autocast and half-precision runs multiply in another dtype: its peak is the one to compare with.
    dtype = compute_dtype(str(precision))
    peak_in_use = peak if dtype == torch.float32 else matmul_peak_flops(dtype, seconds=peak_seconds)
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
            "bias": model_config.bias,
            "reference": str(bench.reference),
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
        "tinylm_minus_bare_ms": [seconds * 1e3 for seconds in added],
        "control": {
            "ratio": [c.tokens_per_s / b.tokens_per_s for c, b in zip(controls, bare, strict=True)],
            "control_minus_bare_ms": [seconds * 1e3 for seconds in control_added],
        }
        if with_control
        else None,
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
        f"optimizer={c['optimizer']}, bias={c['bias']}; bare loop: {c['reference']}",
        f"machine: {result['machine']['threads']} torch threads, torch {result['machine']['torch']}",
        f"median over {result['steps'] - result['warmup']} steps after {result['warmup']} warm-up, "
        f"{result['repeats']} repetitions:",
        "  rep  bare tok/s  tinylm tok/s  ratio  tinylm - bare (ms/step, median of paired steps)",
    ]
    for i, (b, o, r, d) in enumerate(
        zip(
            result["bare_tokens_per_s"],
            result["tinylm_tokens_per_s"],
            result["ratio"],
            result["tinylm_minus_bare_ms"],
            strict=True,
        )
    ):
        lines.append(f"  {i + 1:>3}  {b:>10,.0f}  {o:>12,.0f}  {r:5.3f}  {d:+.2f}")
    control = result["control"]
    if control is not None:
        ratios = " / ".join(f"{r:.3f}" for r in control["ratio"])
        differences = " / ".join(f"{d:+.2f}" for d in control["control_minus_bare_ms"])
        lines.append(
            f"  control (an identical bare loop, run after the bare one): ratio {ratios}, "
            f"{differences} ms/step: the noise of one repetition's ratio"
        )
    lines += [
        f"FLOPs/step {result['flops_per_step'] / 1e9:.3f} GFLOP; tinylm achieves "
        f"{result['tinylm_flops_per_s'] / 1e9:.2f} GFLOP/s = {result['fraction_of_matmul_peak']:.1%} of the "
        f"measured fp32 matmul peak ({result['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s)",
    ]
    if result["matmul_peak_in_use_flops_per_s"] != result["matmul_peak_flops_per_s"]:
        lines.append(
            f"  = {result['fraction_of_matmul_peak_in_use']:.1%} of the measured {c['precision']} matmul peak "
            f"({result['matmul_peak_in_use_flops_per_s'] / 1e9:.1f} GFLOP/s), the precision its matmuls run in"
        )
    profile = result["step_profile"]
    if profile is not None:
        parts = ", ".join(f"{name} {share:.2%}" for name, share in profile["parts_share"].items())
        lines.append(
            f"step profile ({profile['steps']} steps, {profile['method']}): data loading "
            f"{profile['data_loading_share']:.2%} + logging {profile['logging_share']:.2%} = "
            f"{profile['data_loading_share'] + profile['logging_share']:.2%} of step time; health "
            f"{profile['health_share']:.2%} ({parts})"
        )
    lines.append(f"peak RSS of this process: {result['peak_rss_mb']:.0f} MB")
    return "\n".join(lines)


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(
        result, indent=2, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o)
    )


# `--json` is not Hydra syntax: the script takes it off the command line before Hydra parses it.
AS_JSON = False


@hydra.main(version_base="1.3", config_path="conf", config_name="bench")
def main(cfg: DictConfig) -> None:
    if cfg.get("threads") is not None:
        torch.set_num_threads(int(cfg.threads))  # `threads=N`, as train.py takes it
    if AS_JSON:
        # Keep stdout for the JSON alone: the training run's progress and summaries go to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            result = run(cfg)
        print(to_json(result))
    else:
        print(format_report(run(cfg)))


if __name__ == "__main__":
    if "--json" in sys.argv:
        sys.argv.remove("--json")
        AS_JSON = True
    main()
