"""Feed-forward sublayers: parameter counts from the formulas, matched budgets, and the forward maths."""

from typing import get_args

import pytest
import torch
import torch.nn.functional as F

from tinylm.model import FFNS, MLP, GatedMLP, ModelConfig, build_ffn
from tinylm.model.config import Activation


def _count(module):
    return sum(p.numel() for p in module.parameters())


def _ffn(d_model, act, bias=True):
    # The width comes from ModelConfig, as in the model, so the test covers default_ffn_width too.
    config = ModelConfig(d_model=d_model, n_head=1, act=act)
    return build_ffn(act, d_model, config.d_ff, bias=bias), config.d_ff


@pytest.mark.parametrize("d", [16, 64, 128, 384])
@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_plain_mlp_param_count(d, act):
    ffn, d_ff = _ffn(d, act)
    assert isinstance(ffn, MLP)
    assert d_ff == 4 * d
    # up: d·4d + 4d, down: 4d·d + d.
    assert _count(ffn) == 2 * d * 4 * d + 4 * d + d


@pytest.mark.parametrize("d", [16, 64, 128, 384])
@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_gated_mlp_param_count(d, act):
    ffn, d_ff = _ffn(d, act)
    assert isinstance(ffn, GatedMLP)
    h = round(8 * d / 3)
    assert d_ff == h
    # gate and up: d·h + h each, down: h·d + d.
    assert _count(ffn) == 3 * d * h + 2 * h + d


@pytest.mark.parametrize("act", ["relu", "gelu", "swiglu", "geglu"])
def test_param_count_without_bias(act):
    # Without biases only the weight matrices remain: 2·d·4d or 3·d·h.
    d = 64
    ffn, d_ff = _ffn(d, act, bias=False)
    n_matrices = 3 if act in ("swiglu", "geglu") else 2
    assert _count(ffn) == n_matrices * d * d_ff


@pytest.mark.parametrize("d", [64, 128, 384])
@pytest.mark.parametrize("gated_act", ["swiglu", "geglu"])
def test_gated_and_plain_ffn_budgets_match(d, gated_act):
    # The 2/3 width is what makes the SwiGLU vs GELU comparison fair: equal parameters within 0.5%.
    gated = _count(_ffn(d, gated_act)[0])
    plain = _count(_ffn(d, "gelu")[0])
    print(f"d_model={d}: {gated_act} FFN {gated} params, gelu FFN {plain} params ({gated / plain - 1:+.3%})")
    assert abs(gated - plain) / plain < 0.005


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_mlp_forward_formula(act):
    torch.manual_seed(0)
    ffn = build_ffn(act, 8, 32)
    x = torch.randn(2, 3, 8)
    nonlinearity = {"relu": F.relu, "gelu": F.gelu}[act]
    expected = F.linear(nonlinearity(F.linear(x, ffn.up.weight, ffn.up.bias)), ffn.down.weight, ffn.down.bias)
    torch.testing.assert_close(ffn(x), expected)


@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_gated_mlp_forward_formula(act):
    # SwiGLU gates with SiLU, GeGLU with GELU, and the gate goes through the nonlinearity, not `up`.
    torch.manual_seed(0)
    ffn = build_ffn(act, 8, 21)
    x = torch.randn(2, 3, 8)
    nonlinearity = {"swiglu": F.silu, "geglu": F.gelu}[act]
    gate = nonlinearity(F.linear(x, ffn.gate.weight, ffn.gate.bias))
    up = F.linear(x, ffn.up.weight, ffn.up.bias)
    expected = F.linear(gate * up, ffn.down.weight, ffn.down.bias)
    torch.testing.assert_close(ffn(x), expected)


def test_ffn_registry_covers_every_activation():
    # Every activation ModelConfig accepts must have an FFN to build, and no FFN may be unreachable.
    assert set(FFNS) == set(get_args(Activation)) == {"relu", "gelu", "swiglu", "geglu"}
