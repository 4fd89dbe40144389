"""The clock rule for compiled runs (docs/performance.md, "The speedrun"): a compiled run trains a few steps
before its clock starts, so that compiling is not counted as training, then puts back everything those steps
changed, so that the run is the one it would have been without them, bit for bit.

Compiling takes about a minute on a small CPU, so the default tests warm up an uncompiled model: the same
steps and the same restore; the compiled run itself is tested under `-m slow`."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as L
import pytest
import tbparse
import torch
from conftest import compose_train
from test_fault_tolerance import STEPS, assert_same_training_state, corpus, settings, train_losses

from tinylm.layout import COMPILE_WARMUP, read_run_record
from tinylm.training.callbacks import CompileWarmUp
from tinylm.training.callbacks import warmup as warmup_module
from tinylm.training.run import prepare, run, summary_line

__all__ = ["corpus"]  # test_fault_tolerance's fixture, a small local corpus, used here under its name

MUON = ("optim=muon",)


class ClockStart(L.Callback):
    """Notes, when the training clocks start (`on_train_start`), whether the warm-up had already ended."""

    def __init__(self, warmup: CompileWarmUp) -> None:
        self.warmup = warmup
        self.warmed_up_before_the_clock: bool | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.warmed_up_before_the_clock = self.warmup.seconds is not None


def train(run_dir, corpus, *extra: str, observers: tuple[L.Callback, ...] = ()) -> dict[str, Any]:
    return run(compose_train(run_dir, settings(corpus, f"trainer.max_steps={STEPS}", *extra)), observers)


@pytest.fixture(scope="module", params=[(), MUON], ids=["adamw", "muon"])
def plain(request, corpus, tmp_path_factory):
    """A run without a warm-up, which every warmed-up run must repeat; its optimizer."""
    run_dir = tmp_path_factory.mktemp("plain") / "run"
    train(run_dir, corpus, *request.param)
    return run_dir, request.param


def test_a_warmed_up_run_trains_bit_for_bit_as_the_run_without_the_warm_up(tmp_path, corpus, plain):
    # An uncompiled model warmed up exactly as a compiled one is: 3 real steps (dropout 0.3 draws from the
    # random stream, Muon's and AdamW's state fills), then everything put back.
    expected, optim = plain
    warmup = CompileWarmUp(steps=3)
    clock = ClockStart(warmup)
    metrics = train(tmp_path / "warmed", corpus, *optim, observers=(warmup, clock))

    assert sorted(train_losses(expected)) == list(range(STEPS))
    # Exactly equal float32 losses at every step: weights, optimizer, data and dropout masks as without it.
    assert train_losses(tmp_path / "warmed") == train_losses(expected)
    assert_same_training_state(
        tmp_path / "warmed" / "checkpoints" / "last.ckpt", expected / "checkpoints" / "last.ckpt"
    )
    # Its time is recorded apart, once, and the training clocks start after it.
    assert clock.warmed_up_before_the_clock
    assert metrics[COMPILE_WARMUP] == warmup.seconds > 0
    assert read_run_record(tmp_path / "warmed")[COMPILE_WARMUP] == warmup.seconds
    scalars = tbparse.SummaryReader(str(tmp_path / "warmed" / "tb")).scalars
    assert list(scalars[scalars.tag == COMPILE_WARMUP].step) == [0]
    assert COMPILE_WARMUP not in read_run_record(expected)
    # The run's last line says how much of its time went to compiling before training.
    line = summary_line(metrics, tmp_path, tensorboard=False)
    assert f", {warmup.seconds:.1f} s of it compiling before training; " in line


def test_without_the_restore_the_warm_up_would_change_the_run(tmp_path, corpus, plain, monkeypatch):
    # The check above can fail: the warm-up's steps do train, and only putting their changes back hides them.
    expected, optim = plain
    monkeypatch.setattr(warmup_module.TrainingState, "restore", lambda *args: None)
    train(tmp_path / "kept", corpus, *optim, observers=(CompileWarmUp(steps=3),))
    kept, plain_losses = train_losses(tmp_path / "kept"), train_losses(expected)
    assert kept[0] != plain_losses[0]


def test_a_compiled_run_warms_up_as_many_steps_as_set(tmp_path, corpus):
    def warmups(*overrides: str) -> list[int]:
        trainer = prepare(compose_train(tmp_path, settings(corpus, *overrides))).trainer
        return [c.steps for c in trainer.callbacks if isinstance(c, CompileWarmUp)]

    # prepare() builds the trainer; the model is compiled only once fit() configures it.
    assert warmups("compile=true") == [2]
    assert warmups("compile=true", "compile_warmup_steps=5") == [5]
    assert warmups("compile=true", "compile_warmup_steps=0") == [0]
    assert warmups() == []


class NoRecompileInSteps(L.Callback):
    """Fails any compilation during a training step or a validation batch: the warm-up compiled them all."""

    def on_train_batch_start(self, *args: Any) -> None:
        torch.compiler.set_stance("fail_on_recompile")

    def on_validation_batch_start(self, *args: Any) -> None:
        torch.compiler.set_stance("fail_on_recompile")

    def on_train_batch_end(self, *args: Any) -> None:
        torch.compiler.set_stance("default")

    def on_validation_batch_end(self, *args: Any) -> None:
        torch.compiler.set_stance("default")

    def on_exception(self, *args: Any) -> None:
        torch.compiler.set_stance("default")


@pytest.mark.slow  # inductor compiles the forward, the backward, the validation's and the health reading's
@pytest.mark.parametrize("optim", [(), MUON], ids=["adamw", "muon"])
def test_a_compiled_run_compiles_before_the_clock_and_trains_as_without_the_warm_up(tmp_path, corpus, optim):
    torch.compiler.reset()  # nothing compiled by an earlier test: this run compiles every graph it uses
    metrics = train(tmp_path / "warm", corpus, "compile=true", *optim, observers=(NoRecompileInSteps(),))
    train(tmp_path / "cold", corpus, "compile=true", "compile_warmup_steps=0", *optim)

    assert train_losses(tmp_path / "warm") == train_losses(tmp_path / "cold")
    assert_same_training_state(
        tmp_path / "warm" / "checkpoints" / "last.ckpt", tmp_path / "cold" / "checkpoints" / "last.ckpt"
    )
    assert metrics[COMPILE_WARMUP] > 0
    assert COMPILE_WARMUP not in read_run_record(tmp_path / "cold")
