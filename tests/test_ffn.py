"""Feed-forward sublayers: parameter counts from the formulas, matched budgets, and the forward maths."""

import pytest
import torch
import torch.nn.functional as F

from tinylm.model import FFNS, MLP, GatedMLP, ModelConfig, build_ffn

PLAIN = [act for act, (ffn_class, _) in FFNS.items() if ffn_class is MLP]
GATED = [act for act, (ffn_class, _) in FFNS.items() if ffn_class is GatedMLP]


def _count(module):
    return sum(p.numel() for p in module.parameters())


def _ffn(d_model, act, bias=True):
    # The width comes from ModelConfig, as in the model, so the test covers default_ffn_width too.
    config = ModelConfig(d_model=d_model, n_head=1, act=act)
    return build_ffn(act, d_model, config.d_ff, bias=bias), config.d_ff


@pytest.mark.parametrize("d", [16, 64, 128, 384])
@pytest.mark.parametrize("act", PLAIN)
def test_plain_mlp_param_count(d, act):
    ffn, d_ff = _ffn(d, act)
    assert isinstance(ffn, MLP)
    assert d_ff == 4 * d
    # up: d·4d + 4d, down: 4d·d + d.
    assert _count(ffn) == 2 * d * 4 * d + 4 * d + d


@pytest.mark.parametrize("d", [16, 64, 128, 384])
@pytest.mark.parametrize("act", GATED)
def test_gated_mlp_param_count(d, act):
    ffn, d_ff = _ffn(d, act)
    assert isinstance(ffn, GatedMLP)
    h = round(8 * d / 3)
    assert d_ff == h
    # gate and up: d·h + h each, down: h·d + d.
    assert _count(ffn) == 3 * d * h + 2 * h + d


@pytest.mark.parametrize("act", list(FFNS))
def test_param_count_without_bias(act):
    # Without biases only the weight matrices remain, as many as the class says (which sets the width).
    d = 64
    ffn, d_ff = _ffn(d, act, bias=False)
    assert sum(p.dim() == 2 for p in ffn.parameters()) == type(ffn).matrices
    assert _count(ffn) == type(ffn).matrices * d * d_ff


@pytest.mark.parametrize("d", [64, 128, 384])
@pytest.mark.parametrize("act", list(FFNS))
def test_every_ffn_budget_matches_gelu(d, act):
    # The 2/3 width is what makes the SwiGLU vs GELU comparison fair: equal parameters within 0.5%.
    other = _count(_ffn(d, act)[0])
    plain = _count(_ffn(d, "gelu")[0])
    print(f"d_model={d}: {act} FFN {other} params, gelu FFN {plain} params ({other / plain - 1:+.3%})")
    assert abs(other - plain) / plain < 0.005


def test_each_act_is_its_nonlinearity():
    # What the names mean: SwiGLU gates with SiLU, GeGLU with GELU.
    expected = {"relu": F.relu, "gelu": F.gelu, "swiglu": F.silu, "geglu": F.gelu}
    assert {act: FFNS[act][1] for act in expected} == expected


@pytest.mark.parametrize("act", PLAIN)
def test_mlp_forward_formula(act):
    torch.manual_seed(0)
    ffn = build_ffn(act, 8, 32)
    x = torch.randn(2, 3, 8)
    nonlinearity = FFNS[act][1]
    expected = F.linear(nonlinearity(F.linear(x, ffn.up.weight, ffn.up.bias)), ffn.down.weight, ffn.down.bias)
    torch.testing.assert_close(ffn(x), expected)


@pytest.mark.parametrize("act", GATED)
def test_gated_mlp_forward_formula(act):
    # The gate goes through the nonlinearity, not `up`.
    torch.manual_seed(0)
    ffn = build_ffn(act, 8, 21)
    x = torch.randn(2, 3, 8)
    nonlinearity = FFNS[act][1]
    gate = nonlinearity(F.linear(x, ffn.gate.weight, ffn.gate.bias))
    up = F.linear(x, ffn.up.weight, ffn.up.bias)
    expected = F.linear(gate * up, ffn.down.weight, ffn.down.bias)
    torch.testing.assert_close(ffn(x), expected)


def test_the_names_mean_their_shapes():
    # Also keeps the registry-drawn parametrisations above from going empty, which pytest would only skip.
    assert {"relu", "gelu"} <= set(PLAIN) and {"swiglu", "geglu"} <= set(GATED)
