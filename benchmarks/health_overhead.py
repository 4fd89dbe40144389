"""What the health callback costs: `python benchmarks/health_overhead.py [repeats=N] [train overrides]`.

Runs the real training path (`tinylm.training.run.run`) on the composed training config, alternately with the
health callback off and on (off, on, on, off, ...: drift in machine load hits both alike), and times every
optimizer step from `on_train_batch_start` to `on_train_batch_end`: forward, backward, optimizer step and
all callbacks, including the health callback's logging work. Data loading and validation fall outside and
are the same for both variants, so the step time is if anything underestimated and the overhead
overestimated. Run it alone on the machine (other processes' load is noise of the same size as the effect).

Two estimates, both printed:
- amortised: (mean time of a logging step − median time of an ordinary step) / (every_n_steps × median
  ordinary step). Robust to noise, since it compares steps of the same runs.
- direct: mean step time with the callback / mean step time without − 1. The honest end-to-end number,
  but as noisy as the machine.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as L
import torch
from omegaconf import DictConfig, open_dict

import tinylm.training.resolvers  # noqa: F401  (registers the resolvers conf/train.yaml uses)
from tinylm.errors import ConfigError
from tinylm.training.run import run as train

# Steps before this one are warm-up (allocator, caches) and are left out of every statistic.
WARMUP_STEPS = 10


class StepTimer(L.Callback):
    """Wall time of each optimizer step, written to `<path>` as {step: seconds} when training ends."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.seconds: dict[int, float] = {}
        self._started = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        # global_step has already advanced past the step that just ran.
        self.seconds[trainer.global_step - 1] = time.perf_counter() - self._started

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.path.write_text(json.dumps(self.seconds), encoding="utf-8")


def summarise(
    off: list[tuple[int, float]], on: list[tuple[int, float]], every_n_steps: int
) -> dict[str, float]:
    """The overhead estimates (see the module docstring) from (step, seconds) pairs of the runs without and
    with the callback (several runs' pairs pooled)."""
    off = [(s, t) for s, t in off if s >= WARMUP_STEPS]
    on = [(s, t) for s, t in on if s >= WARMUP_STEPS]
    logging = [t for s, t in on if s % every_n_steps == 0]
    if not logging:
        raise ConfigError(f"no logging step after warm-up: train for more than {every_n_steps} steps")
    median_step = statistics.median(t for s, t in on if s % every_n_steps != 0)
    extra = statistics.fmean(logging) - median_step
    all_off, all_on = [t for _, t in off], [t for _, t in on]
    return {
        "median_step_ms_off": 1e3 * statistics.median(all_off),
        "median_step_ms_on": 1e3 * statistics.median(all_on),
        "mean_step_ms_off": 1e3 * statistics.fmean(all_off),
        "mean_step_ms_on": 1e3 * statistics.fmean(all_on),
        "logging_step_extra_ms": 1e3 * extra,
        "logging_steps": len(logging),
        "amortised_overhead": extra / (every_n_steps * median_step),
        "direct_overhead": statistics.fmean(all_on) / statistics.fmean(all_off) - 1,
    }


def run(cfg: DictConfig) -> dict[str, Any]:
    """Alternate `repeats` pairs of runs without and with the callback; print and return the estimates."""
    repeats = int(cfg.get("repeats", 2))
    every_n_steps = int(cfg.callbacks.health.every_n_steps) if cfg.callbacks.get("health") else 0
    if every_n_steps <= 0:
        raise ConfigError("the health callback must be on to measure it: callbacks.health.every_n_steps > 0")
    base = Path(cfg.run_dir)
    times: dict[str, list[tuple[int, float]]] = {"off": [], "on": []}
    order = [("off", "on") if repeat % 2 == 0 else ("on", "off") for repeat in range(repeats)]
    for repeat, variants in enumerate(order):
        for variant in variants:
            run_dir = base / f"{repeat}_{variant}"
            job = cfg.copy()
            with open_dict(job):
                job.run_dir = str(run_dir)
                job.run_name = f"health_{variant}_{repeat}"
                job.sample.chars = 0
                job.latest_link = None
                job.callbacks.health.every_n_steps = every_n_steps if variant == "on" else 0
                job.callbacks.step_timer = {
                    "_target_": f"{__name__}.StepTimer",
                    "path": str(run_dir / "step_times.json"),
                }
            train(job)
            seconds = json.loads((run_dir / "step_times.json").read_text(encoding="utf-8"))
            times[variant] += [(int(step), t) for step, t in seconds.items()]
    result = summarise(times["off"], times["on"], every_n_steps)
    result.update({"every_n_steps": every_n_steps, "repeats": repeats})
    (base / "health_overhead.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return result


@hydra.main(version_base="1.3", config_path="conf", config_name="health_overhead")
def main(cfg: DictConfig) -> None:
    if cfg.get("threads") is not None:
        torch.set_num_threads(int(cfg.threads))  # `threads=N`, as train.py takes it
    run(cfg)


if __name__ == "__main__":
    main()
