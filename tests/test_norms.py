"""Our LayerNorm / RMSNorm, on both the written-out and the fused path, against torch.nn's modules."""

import pytest
import torch
from torch import nn

from tinylm.model import NORMS, LayerNorm, RMSNorm

EPS = 1e-5
SHAPES = [(3, 8), (2, 5, 16), (4, 3, 7, 32)]


def _randomise(module, generator):
    # Non-trivial affine parameters, so a norm that ignored (or mis-applied) the weight or bias would be caught.
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5 + 1.0)


def _copy_params(source, target):
    with torch.no_grad():
        target.weight.copy_(source.weight)
        if getattr(source, "bias", None) is not None:
            target.bias.copy_(source.bias)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_matches_torch(shape, fused):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    ours = LayerNorm(shape[-1], eps=EPS, fused=fused)
    reference = nn.LayerNorm(shape[-1], eps=EPS)
    _randomise(ours, generator)
    _copy_params(ours, reference)
    # Inputs with an offset and a scale, so a missing centring or variance term shows.
    x = torch.randn(shape) * 3.0 + 2.0
    assert (ours(x) - reference(x)).abs().max().item() <= 1e-6


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_without_bias_matches_torch(shape, fused):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(2)
    ours = LayerNorm(shape[-1], eps=EPS, bias=False, fused=fused)
    reference = nn.LayerNorm(shape[-1], eps=EPS, bias=False)
    assert ours.bias is None
    _randomise(ours, generator)
    _copy_params(ours, reference)
    x = torch.randn(shape) * 3.0 + 2.0
    assert (ours(x) - reference(x)).abs().max().item() <= 1e-6


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_rmsnorm_matches_torch(shape, fused):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(3)
    ours = RMSNorm(shape[-1], eps=EPS, fused=fused)
    reference = nn.RMSNorm(shape[-1], eps=EPS)
    _randomise(ours, generator)
    _copy_params(ours, reference)
    # An offset mean matters here: RMSNorm must *not* centre, unlike LayerNorm.
    x = torch.randn(shape) * 3.0 + 2.0
    assert (ours(x) - reference(x)).abs().max().item() <= 1e-6


def _formula_rms(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [*SHAPES, (12, 64, 128)])
def test_fused_rmsnorm_equals_the_formula_and_torch_in_value_and_gradient(shape, dtype):
    """The fused path's hand-derived backward (tinylm.model.norms.rms_norm on CPU) against autograd through the
    written-out formula and through torch.nn.RMSNorm: output, input gradient and weight gradient."""
    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(shape, generator=generator) * 3.0 + 2.0).to(dtype)
    weight = (torch.randn(shape[-1], generator=generator) * 0.5 + 1.0).to(dtype)
    upstream = torch.randn(shape, generator=generator).to(dtype)
    ours = RMSNorm(shape[-1], eps=EPS, fused=True).to(dtype)
    reference = nn.RMSNorm(shape[-1], eps=EPS).to(dtype)
    results = []
    for forward, module in ((ours, ours), (reference, reference), (None, None)):
        xi = x.clone().requires_grad_(True)
        if module is None:
            wi = weight.clone().requires_grad_(True)
            y = _formula_rms(xi, wi)
        else:
            with torch.no_grad():
                module.weight.copy_(weight)
            wi = module.weight
            y = forward(xi)
        y.backward(upstream)
        results.append((y.detach(), xi.grad, wi.grad))
        if module is not None:
            module.zero_grad()
    # Relative to each tensor's size: the weight gradient sums over every row (768 of them at 12 x 64).
    for ours_result, other in ((results[0], results[2]), (results[0], results[1])):
        for a, b in zip(ours_result, other, strict=True):
            assert (a - b).abs().max() <= 1e-5 * max(1.0, b.abs().max())


@pytest.mark.parametrize("bias", [True, False])
def test_rmsnorm_has_only_a_weight(bias):
    # RMSNorm has no shift by definition, whatever `bias` says; only the weight is a parameter.
    norm = RMSNorm(16, bias=bias)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]


@pytest.mark.parametrize("fused", [False, True])
def test_layernorm_known_values(fused):
    # mean 4, centred [-3, -1, 1, 3], population variance 5: y = centred / sqrt(5).
    norm = LayerNorm(4, eps=EPS, fused=fused)
    y = norm(torch.tensor([1.0, 3.0, 5.0, 7.0]))
    expected = torch.tensor([-1.3416, -0.4472, 0.4472, 1.3416])
    torch.testing.assert_close(y, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("norm_type", sorted(NORMS))
def test_norm_acts_on_last_axis_only(norm_type, fused):
    # Tokens are normalised independently: editing one row along dim -2 must leave every other row alone.
    torch.manual_seed(0)
    norm = NORMS[norm_type](16, eps=EPS, fused=fused)
    _randomise(norm, torch.Generator().manual_seed(4))
    x = torch.randn(2, 5, 16)
    y = norm(x)
    perturbed = x.clone()
    perturbed[:, 3] = torch.randn(2, 16) * 10.0
    y_perturbed = norm(perturbed)
    others = [0, 1, 2, 4]
    assert torch.equal(y[:, others], y_perturbed[:, others])
    # The edited row itself does change, so this test could see a leak if there were one.
    assert not torch.allclose(y[:, 3], y_perturbed[:, 3])
