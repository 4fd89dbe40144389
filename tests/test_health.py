"""The training-time health callback: real shrunk Trainer runs, scalars read back from TensorBoard."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tbparse
import torch
from conftest import compose_train

from tinylm.model.diagnostics import stream_rms, token_spread
from tinylm.training.callbacks import TrainingHealth
from tinylm.training.module import CharLM
from tinylm.training.run import run

QUANTITIES = (
    "stream_rms",
    "token_spread",
    "attn_entropy",
    "attn_max_logit",
    "grad_w_q",
    "grad_w_k",
    "grad_w_v",
    "grad_w_o",
    "grad_ffn_up",
    "grad_ffn_down",
    "dead_units",
)


def _scalars(run_dir: Path):
    return tbparse.SummaryReader(str(run_dir / "tb")).scalars


def _train(tmp_path: Path, *overrides: str) -> tuple[dict, object]:
    metrics = run(compose_train(tmp_path, list(overrides)))
    return metrics, _scalars(tmp_path)


def test_health_scalars_reach_tensorboard(tmp_path):
    # SHRINK: 2 blocks, 6 steps, context 32; logging every 2 steps gives steps 0, 2 and 4.
    _, scalars = _train(tmp_path, "callbacks.health.every_n_steps=2")
    health = scalars[scalars.tag.str.startswith("training_health/")]
    expected = {f"training_health/{quantity}/block_{k}" for quantity in QUANTITIES for k in (1, 2)}
    assert set(health.tag) == expected
    for tag in expected:
        assert sorted(health[health.tag == tag].step) == [0, 2, 4], tag
    values = {
        (tag, step): value for tag, step, value in zip(health.tag, health.step, health.value, strict=True)
    }
    assert all(math.isfinite(value) for value in values.values())
    for k in (1, 2):
        for step in (0, 2, 4):
            assert all(
                values[(f"training_health/grad_{w}/block_{k}", step)] > 0
                for w in ("w_q", "w_k", "w_v", "w_o")
            )
            assert 0 < values[(f"training_health/token_spread/block_{k}", step)] <= 1
            # Causal attention over 32 positions: query t has t + 1 keys, so entropy <= mean log(t + 1).
            mean_max_entropy = sum(math.log(t + 1) for t in range(32)) / 32
            assert 0 < values[(f"training_health/attn_entropy/block_{k}", step)] <= mean_max_entropy + 1e-6
    # The stream of a pre-norm model is the sum of its branches, so it grows from block to block.
    assert (
        values[("training_health/stream_rms/block_2", 4)] > values[("training_health/stream_rms/block_1", 4)]
    )


def test_health_off_logs_nothing_and_training_is_unchanged(tmp_path):
    # The activations are measured in an extra pass without dropout or gradients: training is bit for bit
    # the same with the callback logging every step as with it off. Dropout is on to make this strict.
    common = ["model.dropout=0.1"]
    _, logged = _train(tmp_path / "on", *common, "callbacks.health.every_n_steps=1")
    _, silent = _train(tmp_path / "off", *common, "callbacks.health.every_n_steps=0")
    assert not silent.tag.str.startswith("training_health/").any()
    assert sorted(set(logged[logged.tag.str.startswith("training_health/")].step)) == list(range(6))

    def losses(scalars):
        rows = scalars[scalars.tag == "loss/train"]
        return dict(zip(rows.step, rows.value, strict=True))

    assert losses(logged) == losses(silent)


def test_health_can_be_removed_from_the_config(tmp_path):
    cfg = compose_train(tmp_path, ["~callbacks.health"])
    assert "health" not in cfg.callbacks
    run(cfg)
    assert not _scalars(tmp_path).tag.str.startswith("training_health/").any()


def _module_after_backward(**model) -> tuple[CharLM, torch.Tensor]:
    torch.manual_seed(0)
    module = CharLM(
        model={"vocab_size": 20, "block_size": 8, "n_layer": 3, "n_head": 2, "d_model": 16, **model}
    )
    inputs = torch.randint(0, 20, (2, 8))
    _, loss = module(inputs, torch.randint(0, 20, (2, 8)))
    loss.backward()
    return module, inputs


def test_measure_matches_a_hand_computation_block_by_block():
    module, inputs = _module_after_backward()
    callback = TrainingHealth(every_n_steps=1)
    callback.setup(None, module, "fit")
    values = callback.measure(module, inputs)
    gpt = module.model
    d = 16
    with torch.no_grad():
        x = gpt.tok_emb(inputs) + gpt.pos_emb(torch.arange(8))
        for k, block in enumerate(gpt.blocks, start=1):
            attention = block.attn.sublayer
            logits = attention.attention_logits(block.attn.before_branch(x))
            x = block(x)
            assert values[f"training_health/stream_rms/block_{k}"].item() == pytest.approx(
                stream_rms(x).item()
            )
            assert values[f"training_health/token_spread/block_{k}"].item() == pytest.approx(
                token_spread(x).item()
            )
            assert values[f"training_health/attn_max_logit/block_{k}"].item() == pytest.approx(
                logits.max().item()
            )
            grad = attention.qkv.weight.grad
            assert values[f"training_health/grad_w_k/block_{k}"].item() == pytest.approx(
                grad[d : 2 * d].norm().item()
            )
            assert values[f"training_health/grad_ffn_down/block_{k}"].item() == pytest.approx(
                block.ffn.sublayer.down.weight.grad.norm().item()
            )


def test_measure_leaves_no_hooks_and_restores_modes():
    module, inputs = _module_after_backward(dropout=0.1)
    module.train()
    module.model.blocks[0].eval()  # a deliberately frozen part must stay as it was
    callback = TrainingHealth(every_n_steps=1)
    callback.setup(None, module, "fit")
    callback.measure(module, inputs)
    assert all(not m._forward_hooks for m in module.modules())
    assert module.training and module.model.blocks[1].training
    assert not module.model.blocks[0].training


def test_block_numbers_are_padded_for_deep_models():
    module, inputs = _module_after_backward(n_layer=10)
    callback = TrainingHealth()
    callback.setup(None, module, "fit")
    tags = callback.measure(module, inputs)
    assert "training_health/stream_rms/block_01" in tags and "training_health/stream_rms/block_10" in tags


@pytest.mark.parametrize("every_n_steps", [-1, 2.5, True])
def test_bad_frequency_is_rejected(every_n_steps):
    with pytest.raises(ValueError, match="every_n_steps"):
        TrainingHealth(every_n_steps=every_n_steps)


@pytest.mark.parametrize(("act", "layer"), [("relu", "up"), ("swiglu", "gate")])
def test_dead_units_are_the_units_whose_nonlinearity_input_never_exceeds_0_on_the_fixed_batch(act, layer):
    """Units forced dead (a bias of -1e3 at the nonlinearity's input: for a gated FFN, the gate) are counted
    in their block, on the fixed batch and not on the step's own."""
    module, inputs = _module_after_backward(act=act)
    callback = TrainingHealth(every_n_steps=1)
    callback.setup(None, module, "fit")
    ffn = module.model.blocks[1].ffn.sublayer
    width = getattr(ffn, layer).out_features
    with torch.no_grad():
        getattr(ffn, layer).bias[: width // 4] = -1e3
    values = callback.measure(module, inputs, fixed_inputs=inputs[:1])
    assert values["training_health/dead_units/block_2"].item() == pytest.approx(0.25, abs=1 / width)
    assert values["training_health/dead_units/block_1"].item() < 0.25
    # The same count by hand, on the fixed batch: units whose input to the nonlinearity is never > 0.
    captured = {}
    handle = getattr(ffn, layer).register_forward_hook(lambda m, a, out: captured.setdefault("x", out))
    with torch.no_grad():
        module.eval()
        module(inputs[:1])
    handle.remove()
    never = (captured["x"].flatten(0, -2) <= 0).all(dim=0).float().mean().item()
    assert values["training_health/dead_units/block_2"].item() == pytest.approx(never)
