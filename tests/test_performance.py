"""The speed-ups kept on by default (issue E) change no result: bf16 autocast only where the machine multiplies
bf16 natively, attention in fp32 under CPU autocast, clipping under bf16 with a fused AdamW, logging only on
the steps the logger writes, and a throttled progress bar. Speed itself is measured by scripts/bench.py."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as L
import pytest
import tbparse
import torch
import torch.nn.functional as F
from conftest import compose_train
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.profilers import SimpleProfiler
from omegaconf import OmegaConf

import tinylm.callbacks
from tinylm.callbacks import StepProgressBar, TokenThroughput
from tinylm.gradients import ContiguousGradients, clip_grad_norm_
from tinylm.model import GPT, ModelConfig
from tinylm.module import LitGPT
from tinylm.precision import compute_dtype, multiplies_bf16_natively, resolve_precision
from tinylm.train import QuietProfiler, run

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


def test_a_run_saves_the_precision_it_really_used(tmp_path):
    cfg = compose_train(tmp_path / "run", ["sample.chars=0"])
    assert cfg.trainer.precision == "auto"  # the CPU preset's default
    run(cfg)
    saved = OmegaConf.load(tmp_path / "run" / "config.yaml")
    assert saved.trainer.precision == resolve_precision("auto", "cpu") != "auto"
    assert cfg.trainer.precision == "auto", "run(cfg) must not change the caller's config"


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
    run(cfg, extra_callbacks=[norms])
    # Steps 2..6 see the previous step's gradients (kept through validations by the contiguous buffer).
    assert len(norms.norms) >= 3
    assert all(n <= clip * (1 + 1e-4) for n in norms.norms), norms.norms
    assert max(norms.norms) == pytest.approx(clip, rel=1e-4)  # at this clip value every step is clipped


def test_lightnings_hook_name_skips_module_setattr_and_everything_else_still_registers():
    module = _module_with_gradients()
    module._current_fx_name = "training_step"  # what Lightning sets around every hook it calls
    assert module._current_fx_name == "training_step"
    assert "_current_fx_name" not in {*module._parameters, *module._buffers, *module._modules}
    module.probe = torch.nn.Linear(2, 2)
    module.scale = torch.nn.Parameter(torch.ones(1))
    assert "probe" in module._modules and "scale" in module._parameters
    assert "scale" in dict(module.named_parameters())


@pytest.mark.parametrize("max_norm", [1e-3, 1e3])  # clipped / left alone
def test_clip_grad_norm_gives_exactly_what_torch_gives(max_norm):
    module = _module_with_gradients()
    ours = [p.grad.clone() for p in module.parameters()]
    reference = _torch_clipped(module, max_norm)
    clip_grad_norm_(ours, max_norm)
    for mine, theirs in zip(ours, reference, strict=True):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
@pytest.mark.parametrize("max_norm", [1e-3, 1e3])  # clipped / left alone
def test_clipping_gives_what_clip_grad_norm_gives_from_one_buffer(precision, max_norm):
    module = _module_with_gradients(precision)
    reference = _torch_clipped(module, max_norm)
    optimizer = torch.optim.AdamW(module.parameters(), fused=True)
    threads = torch.get_num_threads()
    module.configure_gradient_clipping(optimizer, gradient_clip_val=max_norm, gradient_clip_algorithm="norm")
    # The same norm summed in another order: equal to float rounding, not bit for bit.
    for ours, theirs in zip(module.parameters(), reference, strict=True):
        torch.testing.assert_close(ours.grad, theirs, rtol=1e-5, atol=0)
    assert len({p.grad.untyped_storage().data_ptr() for p in module.parameters()}) == 1
    assert torch.get_num_threads() == threads  # the scaling ran on one thread; the setting is restored


def _torch_clipped(module: LitGPT, max_norm: float) -> list[torch.Tensor]:
    """The module's gradients as `torch.nn.utils.clip_grad_norm_` clips them (the module's are left as is)."""
    twins = []
    for p in module.parameters():
        twin = p.detach().clone().requires_grad_()
        twin.grad = p.grad.clone()
        twins.append(twin)
    torch.nn.utils.clip_grad_norm_(twins, max_norm)
    return [twin.grad for twin in twins]


def test_gradients_stay_in_one_buffer_through_backward_and_are_taken_back_when_replaced():
    model = GPT(ModelConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, d_model=16))
    optimizer = torch.optim.AdamW(model.parameters())
    idx = torch.randint(0, 20, (4, 8))
    model(idx, idx)[1].backward()
    first = [p.grad.clone() for p in model.parameters()]
    contiguous = ContiguousGradients(optimizer)
    assert not contiguous.holds_all()
    assert contiguous.adopt() and contiguous.holds_all()
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), first, strict=True))

    model(idx, idx)[1].backward()  # autograd adds into the views in place
    assert contiguous.holds_all()
    assert all(torch.equal(p.grad, 2 * g) for p, g in zip(model.parameters(), first, strict=True))
    contiguous.zero_()
    assert all(not p.grad.any() for p in model.parameters())

    optimizer.zero_grad()  # torch's: frees every gradient
    assert not contiguous.holds_all() and not contiguous.adopt()  # nothing to take: no gradients
    model(idx, idx)[1].backward()
    assert not contiguous.holds_all() and contiguous.adopt() and contiguous.holds_all()
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), first, strict=True))


class GradientStorages(L.Callback):
    """How many storages the gradients lived in at each step's end, and the final weights."""

    def __init__(self) -> None:
        self.storages: list[int] = []
        self.weights: dict[str, torch.Tensor] = {}

    def on_before_zero_grad(self, trainer: L.Trainer, pl_module: L.LightningModule, *_) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.storages.append(len({g.untyped_storage().data_ptr() for g in grads}))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


def test_a_run_trains_the_same_with_its_gradients_in_one_buffer(tmp_path, monkeypatch):
    # Gradient accumulation (no zeroing between the two backward passes) and validations (before which
    # Lightning frees the gradients, unless they are in the buffer) included; a small clip value, so that
    # every step is clipped.
    overrides = ["trainer.max_steps=7", "+trainer.accumulate_grad_batches=2", "trainer.gradient_clip_val=0.05",
                 "trainer.precision=32-true", "optim.implementation=loop", "sample.chars=0"]  # fmt: skip
    contiguous = GradientStorages()
    run(compose_train(tmp_path / "contiguous", overrides), extra_callbacks=[contiguous])

    monkeypatch.setattr(LitGPT, "_gradients_in_one_buffer", lambda self, optimizer: None)
    monkeypatch.setattr(LitGPT, "optimizer_zero_grad", L.LightningModule.optimizer_zero_grad)
    apart = GradientStorages()
    run(compose_train(tmp_path / "apart", overrides), extra_callbacks=[apart])

    # None before the first step, then one buffer, kept through the validations at steps 3 and 6.
    assert contiguous.storages == [0, 1, 1, 1, 1, 1, 1]
    # Without it: one storage per gradient, freed before each validation.
    assert [n > 1 for n in apart.storages] == [False, True, True, False, True, True, False]
    assert contiguous.weights.keys() == apart.weights.keys()
    for name, weight in contiguous.weights.items():
        torch.testing.assert_close(weight, apart.weights[name], rtol=1e-4, atol=1e-6, msg=name)


def _module_with_gradients(precision: str = "32-true") -> LitGPT:
    torch.manual_seed(0)
    module = LitGPT(model={"vocab_size": 20, "block_size": 8, "n_layer": 1, "n_head": 2, "d_model": 16})
    module.trainer = L.Trainer(accelerator="cpu", precision=precision, logger=False)
    idx = torch.randint(0, 20, (4, 8))
    module(idx, idx)[1].backward()
    return module


@pytest.mark.parametrize(
    "algorithm, fp16_scaler, lightning_clips",
    [("norm", False, False), ("value", False, True), ("norm", True, True)],
)
def test_clipping_leaves_value_clipping_and_fp16_to_lightning(
    monkeypatch, algorithm, fp16_scaler, lightning_clips
):
    module = _module_with_gradients()
    if fp16_scaler:
        module.trainer.strategy.precision_plugin = MixedPrecision(
            "16-mixed", "cpu", torch.amp.GradScaler("cpu")
        )
    calls = []
    monkeypatch.setattr(module, "clip_gradients", lambda *args: calls.append(args))
    before = [p.grad.clone() for p in module.parameters()]
    optimizer = torch.optim.AdamW(module.parameters())
    module.configure_gradient_clipping(optimizer, gradient_clip_val=1e-3, gradient_clip_algorithm=algorithm)
    assert calls == ([(optimizer, 1e-3, algorithm)] if lightning_clips else [])
    changed = any(not torch.equal(p.grad, g) for p, g in zip(module.parameters(), before, strict=True))
    assert changed is not lightning_clips  # clipped by tinylm itself, or left to the (stubbed) Lightning path


# --- logging only where the logger writes ------------------------------------------------------------------


def test_train_metrics_are_written_every_n_steps_and_at_the_last(tmp_path):
    cfg = compose_train(
        tmp_path / "run", ["trainer.max_steps=7", "trainer.log_every_n_steps=3", "sample.chars=0"]
    )
    metrics = run(cfg)
    scalars = tbparse.SummaryReader(str(tmp_path / "run" / "tb")).scalars
    for tag in ("train/loss", "lr"):
        assert sorted(int(s) for s in scalars[scalars.tag == tag].step) == [2, 5, 6], tag
    last_loss = scalars[(scalars.tag == "train/loss") & (scalars.step == 6)].value.item()
    assert metrics["train/loss"] == pytest.approx(last_loss, rel=1e-6)  # the final step's, not a stale one


class _ProfilerSeen(L.Callback):
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.profiler = trainer.profiler


@pytest.mark.parametrize(
    ("setting", "expected"), [([], QuietProfiler), (["+trainer.profiler=simple"], SimpleProfiler)]
)
def test_a_run_profiles_nothing_unless_asked_and_then_profiles_its_steps(tmp_path, setting, expected):
    seen = _ProfilerSeen()
    run(
        compose_train(tmp_path / "run", ["trainer.max_steps=3", "sample.chars=0", *setting]),
        extra_callbacks=[seen],
    )
    assert type(seen.profiler) is expected
    recorded = getattr(seen.profiler, "recorded_durations", {})
    steps = recorded.get("[Strategy]SingleDeviceStrategy.training_step", [])
    assert len(steps) == (3 if expected is SimpleProfiler else 0)


# --- throughput, computed on the written steps only --------------------------------------------------------


class _Logger:
    def __init__(self) -> None:
        self.written: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.written.setdefault(step, {}).update(metrics)


def _throughput_trainer(logger: _Logger, **settings) -> SimpleNamespace:
    defaults = dict(
        log_every_n_steps=2, max_steps=9, should_stop=False, global_step=0, is_global_zero=True,
        sanity_checking=False, world_size=1, precision="32-true",
        strategy=SimpleNamespace(root_device=torch.device("cpu")), loggers=[logger],
    )  # fmt: skip
    return SimpleNamespace(**{**defaults, **settings})


def test_throughput_is_computed_on_the_written_steps_over_the_window_leaving_validation_out(monkeypatch):
    clock = SimpleNamespace(now=100.0)
    monkeypatch.setattr(tinylm.callbacks, "get_available_flops", lambda device, dtype: 1e9)
    monitor = TokenThroughput(window_size=4, clock=lambda: clock.now)
    logger = _Logger()
    trainer = _throughput_trainer(logger)
    module = SimpleNamespace(flops_per_batch=5e6)
    batch = (torch.zeros(3, 8, dtype=torch.long), torch.zeros(3, 8, dtype=torch.long))  # 24 characters
    monitor.on_train_start(trainer, module)
    for step in range(1, 10):
        clock.now += 0.5  # every step takes 0.5 s
        trainer.global_step = step
        monitor.on_train_batch_end(trainer, module, None, batch, step - 1)
        if step == 4:  # a 30 s validation, which the rates must not count
            monitor.on_validation_start(trainer, module)
            clock.now += 30.0
            monitor.on_validation_end(trainer, module)

    # Steps 2, 4, 6, 8 and the last (9), each at the step index its train/loss is logged at.
    assert sorted(logger.written) == [1, 3, 5, 7, 8]
    assert [logger.written[s]["train/lengths"] for s in (1, 3, 5, 7, 8)] == [48, 96, 144, 192, 216]
    assert [logger.written[s]["train/time"] for s in (1, 3, 5, 7, 8)] == pytest.approx(
        [1.0, 2.0, 3.0, 4.0, 4.5]
    )
    # A window of 4 steps needs 3 updates 2 steps apart: rates from step index 5 on, at 24 chars / 0.5 s.
    assert "train/device/items_per_sec" not in logger.written[3]
    for step in (5, 7, 8):
        assert logger.written[step]["train/device/items_per_sec"] == pytest.approx(48.0)
        assert logger.written[step]["train/device/flops_per_sec"] == pytest.approx(1e7)
        assert logger.written[step]["train/device/mfu"] == pytest.approx(0.01)


def test_throughput_writes_global_rates_across_ranks_and_nothing_on_other_ranks():
    clock = SimpleNamespace(now=0.0)
    written = {}
    for rank_zero in (True, False):
        logger = _Logger()
        trainer = _throughput_trainer(logger, is_global_zero=rank_zero, world_size=4)
        monitor = TokenThroughput(window_size=2, clock=lambda: clock.now)
        monitor.on_train_start(trainer, SimpleNamespace(flops_per_batch=None))
        for step in range(1, 7):
            clock.now += 1.0
            trainer.global_step = step
            monitor.on_train_batch_end(trainer, None, None, (torch.zeros(2, 5),), step - 1)
        written[rank_zero] = logger.written
    assert written[False] == {}
    assert written[True][5]["train/device/items_per_sec"] == pytest.approx(10.0)
    assert written[True][5]["train/items_per_sec"] == pytest.approx(40.0)
    assert not any("flops" in tag for tag in written[True][5])  # a module without a FLOP count


def test_a_run_writes_throughput_where_it_writes_the_loss(tmp_path):
    cfg = compose_train(
        tmp_path / "run",
        [
            "trainer.max_steps=7",
            "trainer.log_every_n_steps=2",
            "callbacks.throughput.window_size=4",
            "sample.chars=0",
        ],
    )
    run(cfg)
    scalars = tbparse.SummaryReader(str(tmp_path / "run" / "tb")).scalars
    loss_steps = sorted(int(s) for s in scalars[scalars.tag == "train/loss"].step)
    assert loss_steps == [1, 3, 5, 6]
    lengths = scalars[scalars.tag == "train/lengths"].sort_values("step")
    tokens_per_step = cfg.data.batch_size * cfg.model.block_size
    assert list(lengths.step) == loss_steps
    assert list(lengths.value) == [(s + 1) * tokens_per_step for s in loss_steps]
    rates = scalars[scalars.tag == "train/device/items_per_sec"]
    assert list(rates.step) == [5, 6] and (rates.value > 0).all()


# --- progress bar redraws ------------------------------------------------------------------------------------


class _Bar:
    def __init__(self) -> None:
        self.n = 0
        self.redraws: list[int] = []

    def set_postfix(self, metrics, refresh: bool) -> None:
        self.redraws.append(self.n)


def _drive(bar: StepProgressBar, monkeypatch, step_seconds: float, max_steps: int) -> list[int]:
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(tinylm.callbacks.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(bar, "get_metrics", lambda *_: {})
    bar._train_progress_bar = _Bar()
    for step in range(1, max_steps + 1):
        clock.now += step_seconds
        bar.on_train_batch_end(SimpleNamespace(global_step=step, max_steps=max_steps), None)
    return bar._train_progress_bar.redraws


def test_progress_bar_redraws_at_most_every_min_interval_and_on_the_last_step(monkeypatch):
    # 40 ms steps, 0.25 s between redraws: every 7th step (0.28 s), and the last.
    assert _drive(StepProgressBar(min_interval_s=0.25), monkeypatch, 0.04, 30) == [1, 8, 15, 22, 29, 30]
    # Steps slower than the interval redraw on every step, as before.
    assert _drive(StepProgressBar(min_interval_s=0.25), monkeypatch, 1.0, 4) == [1, 2, 3, 4]
