"""The speed settings on by default change no result: bf16 autocast only where the machine multiplies bf16
natively, attention in fp32 under CPU autocast, gradient clipping under bf16 with a fused AdamW; and what a
run logs (losses, learning rate, throughput) lands on the steps the logger writes. Speed itself is measured
by benchmarks/bench.py (docs/performance.md)."""

from __future__ import annotations

import io
import logging
import re
import sys
from types import SimpleNamespace

import lightning.pytorch as L
import pytest
import tbparse
import torch
import torch.nn.functional as F
from conftest import compose_train
from hydra import compose, initialize_config_module
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.profilers import SimpleProfiler
from omegaconf import OmegaConf

from tinylm.model import GPT, ModelConfig
from tinylm.training.callbacks import StepProgressBar
from tinylm.training.module import CharLM
from tinylm.training.precision import (
    CPU_BF16_PROBES,
    compute_dtype,
    multiplies_bf16_natively,
    resolve_precision,
)
from tinylm.training.run import run

# --- trainer.precision=auto ------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed", 32])
def test_an_explicit_precision_is_passed_through(precision):
    assert resolve_precision(precision, "cpu") == precision


@pytest.mark.parametrize(("avx512_bf16", "amx", "expected"), [
    (True, False, "bf16-mixed"),
    (False, True, "bf16-mixed"),
    (False, False, "32-true"),
])  # fmt: skip
def test_auto_picks_bf16_only_on_a_cpu_that_multiplies_bf16_natively(monkeypatch, avx512_bf16, amx, expected):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert resolve_precision("auto", "cpu") == expected


def test_this_torch_still_has_the_private_bf16_probes_auto_relies_on():
    # If an upgrade removes them, `auto` silently keeps fp32 on bf16 hardware (docs/internals.md): say so here.
    assert all(callable(getattr(torch.cpu, name, None)) for name in CPU_BF16_PROBES)


def test_auto_keeps_fp32_when_torch_cannot_tell(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert not multiplies_bf16_natively("cpu")
    assert resolve_precision("auto", "cpu") == "32-true"


@pytest.mark.parametrize(("precision", "dtype"), [
    ("32-true", torch.float32),
    ("bf16-mixed", torch.bfloat16),
    ("bf16-true", torch.bfloat16),
    ("16-mixed", torch.float16),
    ("64-true", torch.float64),
])  # fmt: skip
def test_the_peak_flops_are_those_of_the_dtype_the_precision_multiplies_in(precision, dtype):
    assert compute_dtype(precision) == dtype


class _ProfilerSeen(L.Callback):
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.profiler = trainer.profiler


@pytest.fixture(scope="module")
def auto_profiled(tmp_path_factory) -> SimpleNamespace:
    """One real run at `trainer.precision=auto` (SHRINK pins 32-true) with the simple profiler: its config,
    its directory and the profiler its Trainer had."""
    seen, run_dir = _ProfilerSeen(), tmp_path_factory.mktemp("auto_profiled") / "run"
    overrides = [
        "trainer.max_steps=3",
        "sample.chars=0",
        "trainer.precision=auto",
        "+trainer.profiler=simple",
    ]
    cfg = compose_train(run_dir, overrides)
    run(cfg, observers=[seen])
    return SimpleNamespace(cfg=cfg, run_dir=run_dir, profiler=seen.profiler)


def test_a_run_saves_the_precision_it_really_used(auto_profiled):
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        assert compose("train").trainer.precision == "auto"  # the CPU preset's default
    saved = OmegaConf.load(auto_profiled.run_dir / "config.yaml")
    assert saved.trainer.precision == resolve_precision("auto", "cpu") != "auto"
    assert auto_profiled.cfg.trainer.precision == "auto", "run(cfg) must not change the caller's config"


# --- attention under CPU autocast ------------------------------------------------------------------------


def test_attention_runs_in_fp32_under_cpu_autocast_and_matches_fp32(monkeypatch):
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, d_model=32))
    idx = torch.randint(0, 20, (3, 16))
    _, loss_fp32 = model(idx, idx)

    dtypes = []
    sdpa = F.scaled_dot_product_attention

    def recording_sdpa(q, k, v, **kwargs):
        dtypes.append((q.dtype, k.dtype, v.dtype, torch.is_autocast_enabled("cpu")))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording_sdpa)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss_bf16 = model(idx, idx)
    loss_bf16.backward()

    assert dtypes == [(torch.float32, torch.float32, torch.float32, False)] * 2  # one call per block
    assert logits.dtype == torch.bfloat16  # the projections around it did run in bf16
    assert loss_bf16.dtype == torch.float32
    assert loss_bf16.item() == pytest.approx(loss_fp32.item(), abs=0.02)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_attention_is_left_alone_without_autocast(monkeypatch):
    model = GPT(ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, d_model=16)).to(torch.float64)
    seen = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(
        F, "scaled_dot_product_attention", lambda q, k, v, **kw: seen.append(q.dtype) or sdpa(q, k, v, **kw)
    )
    model(torch.zeros(1, 8, dtype=torch.long))
    assert seen == [torch.float64]  # the probe's float64 runs are not cast down


# --- gradient clipping with a fused AdamW ------------------------------------------------------------------


class GradientNormAfterClipping(L.Callback):
    """The total gradient norm each optimizer step used: read before the next step zeroes the gradients."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_zero_grad(self, trainer: L.Trainer, pl_module: L.LightningModule, *_) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self.norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_gradients_are_clipped_with_the_fused_adamw(tmp_path, precision):
    # Lightning's mixed-precision plugin refuses to clip for a fused optimizer at all; bf16 has no loss
    # scale, so tinylm clips there as in fp32.
    clip = 0.05
    cfg = compose_train(
        tmp_path / "run",
        [f"trainer.precision={precision}", "optim.implementation=fused", f"trainer.gradient_clip_val={clip}",
         "sample.chars=0"],
    )  # fmt: skip
    norms = GradientNormAfterClipping()
    run(cfg, observers=[norms])
    assert len(norms.norms) >= 3
    assert all(n <= clip * (1 + 1e-4) for n in norms.norms), norms.norms
    assert max(norms.norms) == pytest.approx(clip, rel=1e-4)  # at this clip value every step is clipped


def _module_with_gradients(precision: str = "32-true") -> CharLM:
    torch.manual_seed(0)
    module = CharLM(model={"vocab_size": 20, "block_size": 8, "n_layer": 1, "n_head": 2, "d_model": 16})
    module.trainer = L.Trainer(accelerator="cpu", precision=precision, logger=False)
    idx = torch.randint(0, 20, (4, 8))
    module(idx, idx)[1].backward()
    return module


@pytest.mark.parametrize(
    ("precision", "algorithm", "fp16_scaler", "lightning_clips"),
    [
        ("bf16-mixed", "norm", False, False),
        ("bf16-mixed", "value", False, True),
        ("32-true", "norm", False, True),
        ("32-true", "norm", True, True),
    ],
)
def test_only_bf16_norm_clipping_bypasses_lightning(
    monkeypatch, precision, algorithm, fp16_scaler, lightning_clips
):
    module = _module_with_gradients(precision)
    if fp16_scaler:
        module.trainer.strategy.precision_plugin = MixedPrecision(
            "16-mixed", "cpu", torch.amp.GradScaler("cpu")
        )
    calls = []
    monkeypatch.setattr(module, "clip_gradients", lambda *args: calls.append(args))
    before = [p.grad.clone() for p in module.parameters()]
    optimizer = torch.optim.AdamW(module.parameters(), fused=True)
    module.configure_gradient_clipping(optimizer, gradient_clip_val=1e-3, gradient_clip_algorithm=algorithm)
    assert calls == ([(optimizer, 1e-3, algorithm)] if lightning_clips else [])
    if not lightning_clips:  # clipped with torch's clip_grad_norm_, as fp32 is
        twins = [p.detach().clone().requires_grad_() for p in module.parameters()]
        for twin, grad in zip(twins, before, strict=True):
            twin.grad = grad.clone()
        torch.nn.utils.clip_grad_norm_(twins, 1e-3)
        for p, twin in zip(module.parameters(), twins, strict=True):
            assert torch.equal(p.grad, twin.grad)


# --- what a run logs, and where ------------------------------------------------------------------


@pytest.fixture(scope="module")
def logged_every_2(tmp_path_factory) -> SimpleNamespace:
    """One real 7-step run logging every 2 steps, throughput over a 4-step window: its config, the metrics
    run() returned and its TensorBoard scalars."""
    run_dir = tmp_path_factory.mktemp("logged_every_2") / "run"
    overrides = [
        "trainer.max_steps=7",
        "trainer.log_every_n_steps=2",
        "callbacks.throughput.window_size=4",
        "sample.chars=0",
    ]
    cfg = compose_train(run_dir, overrides)
    metrics = run(cfg)
    return SimpleNamespace(
        cfg=cfg, metrics=metrics, scalars=tbparse.SummaryReader(str(run_dir / "tb")).scalars
    )


def test_train_metrics_are_written_every_n_steps_and_at_the_last(logged_every_2):
    scalars = logged_every_2.scalars
    for tag in ("loss/train", "lr"):  # steps 1, 3, 5 every 2 steps; 6, the last, off that grid
        assert sorted(int(s) for s in scalars[scalars.tag == tag].step) == [1, 3, 5, 6], tag
    last_loss = scalars[(scalars.tag == "loss/train") & (scalars.step == 6)].value.item()
    # The final step's, not a stale one.
    assert logged_every_2.metrics["loss/train"] == pytest.approx(last_loss, rel=1e-6)


def test_a_run_profiles_its_steps_when_asked(auto_profiled):
    assert isinstance(auto_profiled.profiler, SimpleProfiler)
    assert len(auto_profiled.profiler.recorded_durations["[Strategy]SingleDeviceStrategy.training_step"]) == 3


def test_a_run_writes_throughput_where_it_writes_the_loss(logged_every_2):
    cfg, scalars = logged_every_2.cfg, logged_every_2.scalars
    loss_steps = sorted(int(s) for s in scalars[scalars.tag == "loss/train"].step)
    assert loss_steps == [1, 3, 5, 6]
    lengths = scalars[scalars.tag == "train/lengths"].sort_values("step")
    tokens_per_step = cfg.data.batch_size * cfg.model.block_size
    assert list(lengths.step) == loss_steps
    assert list(lengths.value) == [(s + 1) * tokens_per_step for s in loss_steps]
    rates = scalars[scalars.tag == "train/device/items_per_sec"]
    # Rates once the 4-step window is full: the logged steps from index 3 on.
    assert list(rates.step) == [3, 5, 6] and (rates.value > 0).all()


# --- progress bar ------------------------------------------------------------------------------------------


class _Bar:
    def __init__(self) -> None:
        self.n = 0
        self.redraws: list[int] = []

    def set_postfix(self, metrics, refresh: bool) -> None:
        self.redraws.append(self.n)


def test_progress_bar_counts_optimizer_steps_every_refresh_rate_and_on_the_last(monkeypatch):
    bar = StepProgressBar(refresh_rate=10)
    monkeypatch.setattr(bar, "get_metrics", lambda *_: {})
    bar._train_progress_bar = _Bar()
    for step in range(1, 26):
        bar.on_train_batch_end(SimpleNamespace(global_step=step, max_steps=25), None)
    assert bar._train_progress_bar.redraws == [10, 20, 25]


class _Console(io.StringIO):
    """stdout as the run sees it: a terminal, or a pipe into a file or `tee`."""

    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def _trainer(step: int) -> SimpleNamespace:
    return SimpleNamespace(
        is_global_zero=True, global_step=step, max_steps=20, sanity_checking=False,
        state=SimpleNamespace(fn="fit"), loggers=[], progress_bar_metrics={"loss/train": 3.8, "loss/val": 3.75},
    )  # fmt: skip


@pytest.fixture
def console(monkeypatch):
    """Hydra's console handler on a stdout that is a terminal or not (`console(terminal)`), INFO and up."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def make(terminal: bool) -> _Console:
        stream = _Console(terminal)
        monkeypatch.setattr(sys, "stdout", stream)
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("[%(name)s][%(levelname)s] - %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        return stream

    yield make
    root.handlers[:] = handlers
    root.setLevel(level)


class _Clock:
    """A clock the test moves: `StepProgressBar(clock=...)` reads it instead of the machine's."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _started_bar(clock: _Clock | None = None) -> StepProgressBar:
    bar = StepProgressBar(refresh_rate=5, clock=clock or _Clock())
    bar.setup(_trainer(0), None, "fit")
    bar.on_train_start(_trainer(0), None)
    return bar


def _validate(bar: StepProgressBar, step: int) -> None:
    trainer = _trainer(step)
    bar.on_validation_start(trainer, None)
    bar.on_validation_end(trainer, None)


def _train(
    bar: StepProgressBar, clock: _Clock, steps: int, seconds_per_step: float, validate_every: int
) -> None:
    """`steps` optimizer steps through the bar's hooks in Lightning's order, each `seconds_per_step` long, a
    validation after every `validate_every`-th, and the end of training."""
    for step in range(1, steps + 1):
        bar.on_train_batch_start(_trainer(step - 1), None)
        clock.now += seconds_per_step
        bar.on_train_batch_end(_trainer(step), None)
        if step % validate_every == 0:
            _validate(bar, step)
    bar.on_train_end(_trainer(steps), None)
    bar.teardown(_trainer(steps), None, "fit")


def test_on_a_terminal_a_log_line_starts_a_line_of_its_own_above_the_bar(console):
    """Lightning logs `Trainer.fit stopped` while the bar is still drawn: it once ran on from the bar's end
    (`…loss/val=1.640][2026-12-05 …][INFO] - Trainer.fit stopped`)."""
    terminal = console(terminal=True)
    bar = _started_bar()
    for step in range(1, 11):
        bar.on_train_batch_end(_trainer(step), None)
    _validate(bar, 10)
    logging.getLogger("lightning.pytorch").info("`Trainer.fit` stopped: `max_steps=10` reached.")
    bar.on_train_end(_trainer(10), None)
    bar.teardown(_trainer(10), None, "fit")
    lines = re.split(r"[\r\n]", terminal.getvalue())
    assert "[lightning.pytorch][INFO] - `Trainer.fit` stopped: `max_steps=10` reached." in lines
    assert any(line.startswith("Training:") and "10/20" in line for line in lines)  # the bar was drawn
    assert logging.getLogger().handlers[-1].stream is terminal  # the console handler is back after the run


def test_piped_the_bar_draws_nothing_and_a_line_is_logged_every_tenth_of_the_run_and_per_validation(console):
    """Into a file or `tee` every redraw stays as a frame (41 for a 200-step run) and validation bars leave
    raw cursor-up codes: instead, plain lines. Issue 67: only one per validation made the main job silent for
    its first 100 steps; now a line at every tenth of the run too (every 2 of 20 steps), with the training
    loss only (the last validation's would read as measured at that step), the rate and the time left; a
    validation's step gets the validation's line alone."""
    piped, clock = console(terminal=False), _Clock()
    bar = _started_bar(clock)
    _train(bar, clock, steps=20, seconds_per_step=0.5, validate_every=10)
    assert "\r" not in piped.getvalue() and "\x1b" not in piped.getvalue()
    prefix = "[tinylm.training.callbacks.progress][INFO] - "
    assert piped.getvalue().splitlines() == [
        prefix + f"step {step}/20: loss/train=3.8000{', loss/val=3.7500' * (step % 10 == 0)}"
        f" (0m{step // 2:02d}s, 2.00 steps/s{f', 0m{(20 - step) // 2:02d}s left' * (step < 20)})"
        for step in range(2, 21, 2)
    ]


def test_the_log_gets_a_line_at_most_30_seconds_after_the_last_when_a_tenth_takes_longer(console):
    """A tenth of the main job is 70 steps, minutes on a loaded machine: the rhythm is every 10% of the run or
    every 30 s, whichever comes first. At 11 s a step, a line every 3rd step (33 s), and at 100, a tenth of
    the run (11 s after the line at 99), from which the next 30 s count."""
    piped, clock = console(terminal=False), _Clock()
    bar = StepProgressBar(refresh_rate=5, clock=clock)
    trainer = _trainer(0)
    trainer.max_steps = 1000
    bar.setup(trainer, None, "fit")
    bar.on_train_start(trainer, None)
    for step in range(1, 105):
        bar.on_train_batch_start(trainer, None)
        clock.now += 11
        trainer.global_step = step
        bar.on_train_batch_end(trainer, None)
    lines = piped.getvalue().splitlines()
    steps = [int(re.search(r" - step (\d+)/1000: ", line)[1]) for line in lines]
    assert steps == [*range(3, 100, 3), 100, 103]
    # 3 steps in 33 s: 0.09 steps/s, and the 997 left take 10,967 s.
    assert lines[0].endswith("- step 3/1000: loss/train=3.8000 (0m33s, 0.09 steps/s, 182m47s left)")


def test_on_a_terminal_the_bar_shows_progress_and_the_log_file_gets_the_lines(console, tmp_path):
    """Issue 67: train.log held the per-validation lines only when no terminal was attached. On a terminal the
    console keeps its bar alone, and the run's log file (Hydra's file handler) gets the same lines as piped."""
    terminal, clock = console(terminal=True), _Clock()
    log_file = logging.FileHandler(tmp_path / "train.log", delay=True)
    log_file.setFormatter(logging.Formatter("[%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(log_file)
    try:
        bar = _started_bar(clock)
        _train(bar, clock, steps=20, seconds_per_step=0.5, validate_every=10)
    finally:
        log_file.close()
    assert " - step " not in terminal.getvalue()
    assert any(line.startswith("Training:") for line in re.split(r"[\r\n]", terminal.getvalue()))
    written = (tmp_path / "train.log").read_text(encoding="utf-8").splitlines()
    steps = [int(re.search(r" - step (\d+)/20: ", line)[1]) for line in written]
    assert steps == list(range(2, 21, 2))
    assert written[-1].endswith("- step 20/20: loss/train=3.8000, loss/val=3.7500 (0m10s, 2.00 steps/s)")
