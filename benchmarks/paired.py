"""Two training setups timed step for step in one process: the helper behind `norm_speed.py` and
`optim_speed.py`.

Each setup is a plain training step of tinylm's `GPT` (forward, backward, the optimizer tinylm trains with,
zero_grad) on batches already in memory: no Lightning, so the difference measured is the setups' own. The two
take turns step by step, in the order A B B A A B ... so that neither always runs first, and each step's
forward+backward and optimizer step are timed apart. A repetition is `steps` such turns after `warmup`; its
result is the ratio of the two medians (B / A). The machine's drift slows both setups of a turn alike, which
a comparison of one run after the other does not survive on a shared 2-core VM.

`clock="thread"` reads this thread's CPU time instead of the wall clock: with one intra-op thread all of a
step's work runs on it, and the time other processes hold the core is left out (their cache and memory
traffic still counts). Use it on a machine others are using, and say so beside the figures.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class Setup:
    """One side of the comparison: a model and its optimizer."""

    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    clock: Callable[[], float] = time.perf_counter
    autocast: torch.dtype | None = (
        None  # bf16: the forward under CPU autocast, as trainer.precision=bf16-mixed
    )
    forward_backward: list[float] = field(default_factory=list)
    optimizer_step: list[float] = field(default_factory=list)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor, record: bool) -> None:
        start = self.clock()
        with torch.autocast("cpu", dtype=self.autocast or torch.bfloat16, enabled=self.autocast is not None):
            _, loss = self.model(inputs, targets)
        loss.backward()
        middle = self.clock()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        end = self.clock()
        if record:
            self.forward_backward.append(middle - start)
            self.optimizer_step.append(end - middle)

    def medians_ms(self) -> dict[str, float]:
        total = [a + b for a, b in zip(self.forward_backward, self.optimizer_step, strict=True)]
        return {
            "step": 1e3 * statistics.median(total),
            "forward_backward": 1e3 * statistics.median(self.forward_backward),
            "optimizer_step": 1e3 * statistics.median(self.optimizer_step),
        }


def cpu_name() -> str:
    """The CPU's model name and whether it multiplies bf16 natively (the figures depend on both)."""
    name = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            lines = info.read().splitlines()
        name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
        flags = next(line for line in lines if line.startswith("flags")).split()
        bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
        name += f" ({', '.join(bf16) if bf16 else 'no native bf16: ' + ('avx2' if 'avx2' in flags else '?')})"
    except (OSError, StopIteration):
        pass
    return name


CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def compare(
    make: Callable[[str], Setup],
    names: tuple[str, str],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    warmup: int,
    repeats: int,
    clock: str = "wall",
) -> dict[str, object]:
    """Time setups `names` (built by `make`, fresh for each repetition) turn by turn; per repetition, each
    one's medians and the ratios B / A of step, forward+backward and optimizer step."""
    reps = []
    for repeat in range(repeats):
        a, b = make(names[0]), make(names[1])
        a.clock = b.clock = CLOCKS[clock]
        for turn in range(warmup + steps):
            inputs, targets = batches[turn % len(batches)]
            order = (a, b) if (turn + repeat) % 2 == 0 else (b, a)
            for setup in order:
                setup.step(inputs, targets, record=turn >= warmup)
        first, second = a.medians_ms(), b.medians_ms()
        reps.append({
            names[0]: first,
            names[1]: second,
            "ratio": {key: second[key] / first[key] for key in first},
        })  # fmt: skip
    summary = {}
    for key in ("step", "forward_backward", "optimizer_step"):
        ratios = [rep["ratio"][key] for rep in reps]
        summary[key] = {"median_ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        for name in names:
            summary[key][f"{name}_ms"] = statistics.median(rep[name][key] for rep in reps)
    return {
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "clock": clock,
        "torch": torch.__version__,
        "steps": steps,
        "warmup": warmup,
        "repeats": repeats,
        "summary": summary,
        "repetitions": reps,
    }


def print_summary(result: dict[str, object], names: tuple[str, str], json_path: str | None = None) -> None:
    """The result's summary on stdout, and the whole result as JSON into `json_path` when given."""
    print(
        f"{result['cpu']}, {result['threads']} thread(s), torch {result['torch']}, {result['clock']} clock; "
        f"{result['repeats']} repetitions of {result['steps']} alternated steps after {result['warmup']} warm-up"
    )
    for key, row in result["summary"].items():
        print(
            f"{key:17s} {names[0]} {row[f'{names[0]}_ms']:7.2f} ms  {names[1]} {row[f'{names[1]}_ms']:7.2f} ms  "
            f"{names[1]}/{names[0]} median {row['median_ratio']:.3f} [{row['min']:.3f}, {row['max']:.3f}]"
        )
    if json_path:
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)
