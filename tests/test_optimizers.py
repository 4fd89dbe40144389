"""optim=muon: Muon on the blocks' weight matrices, AdamW on the rest, one optimizer whose state is whole."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import REPO
from omegaconf import OmegaConf

from tinylm.model import ModelConfig
from tinylm.training.module import CharLM
from tinylm.training.optimizers import (
    OPTIMIZERS,
    Muon,
    MuonWithAdamW,
    OptimConfig,
    fewer_flops_on_gram,
    gram_orthogonalize,
    orthogonalize,
)

NEWTON_SCHULZ = (3.4445, -4.775, 2.0315)  # torch.optim.Muon's coefficients
SHAPES = [(24, 24), (16, 40), (40, 16)]  # square, wide, tall (transposed inside Newton–Schulz)
SETTINGS = {
    "lr": 0.02,
    "weight_decay": 0.1,
    "momentum": 0.95,
    "nesterov": True,
    "adjust_lr_fn": "match_rms_adamw",
}


def matrices(seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in SHAPES]


def train(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: int = 5) -> None:
    """`steps` steps on fixed pseudo-random gradients (the same for every optimizer given the same params)."""
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator) + 0.1 * p.detach()
        optimizer.step()


def test_orthogonalize_is_torch_muons_iteration_and_fp32_is_nearer_the_exact_polar_factor():
    grad = torch.randn(32, 48, generator=torch.Generator().manual_seed(0))
    # From zero, with lr 1 and no momentum or decay, torch's Muon leaves exactly minus its orthogonalised step.
    param = torch.nn.Parameter(torch.zeros(32, 48))
    param.grad = grad.clone()
    torch.optim.Muon([param], lr=1.0, weight_decay=0.0, momentum=0.0, nesterov=False).step()
    assert torch.equal(
        -param.detach(), orthogonalize(grad, (3.4445, -4.775, 2.0315), 5, 1e-7, torch.bfloat16)
    )
    # fp32 and float64 run the same polynomial: fp32 agrees with float64 far better than bf16 does.
    exact = orthogonalize(grad.double(), (3.4445, -4.775, 2.0315), 5, 1e-7, torch.float64)
    fp32 = orthogonalize(grad, (3.4445, -4.775, 2.0315), 5, 1e-7, torch.float32)
    bf16 = orthogonalize(grad, (3.4445, -4.775, 2.0315), 5, 1e-7, torch.bfloat16)
    assert (fp32.double() - exact).abs().max() < 1e-5 < (bf16.double() - exact).abs().max()


def test_gram_newton_schulz_gives_the_plain_iterations_result_where_it_multiplies_less():
    generator = torch.Generator().manual_seed(0)
    low_rank = torch.randn(120, 4, generator=generator) @ torch.randn(4, 40, generator=generator)
    for matrix in (
        torch.randn(40, 120, generator=generator),
        torch.randn(120, 40, generator=generator),
        low_rank,
    ):
        exact = orthogonalize(matrix.double(), NEWTON_SCHULZ, 5, 1e-7, torch.float64)
        gram = gram_orthogonalize(matrix, NEWTON_SCHULZ, 5, 1e-7, torch.float32)
        bf16 = orthogonalize(matrix, NEWTON_SCHULZ, 5, 1e-7, torch.bfloat16)
        # Rounding only: the rank-deficient matrix's null space amplifies it most, still far below bf16's.
        assert (gram.double() - exact).abs().max() < 1e-4 < (bf16.double() - exact).abs().max()
    # The baby model's matrices: the attention's and the FFN's rectangles go through the Gram matrix.
    assert fewer_flops_on_gram(torch.Size((384, 128)), 5) and fewer_flops_on_gram(torch.Size((128, 512)), 5)
    assert not fewer_flops_on_gram(torch.Size((128, 128)), 5)


def test_muon_steps_like_torch_muon_in_bf16_and_close_to_it_in_fp32():
    reference = matrices()
    train(torch.optim.Muon(reference, **SETTINGS), reference)
    own_bf16 = matrices()
    muon = Muon(own_bf16, ns_dtype=torch.float32, **SETTINGS)
    # The update written out (the fp32 path's code), in bf16: bit for bit torch's step, momentum included.
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        for p in own_bf16:
            p.grad = torch.randn(p.shape, generator=generator) + 0.1 * p.detach()
        muon.step_in(torch.bfloat16)
    for ours, theirs in zip(own_bf16, reference, strict=True):
        assert torch.equal(ours, theirs)
    fp32 = matrices()
    train(Muon(fp32, ns_dtype=torch.float32, **SETTINGS), fp32)
    start = matrices()
    for ours, theirs, before in zip(fp32, reference, start, strict=True):
        moved = (theirs - before).abs().max()
        assert not torch.equal(ours, theirs)  # a different dtype, so not bit for bit...
        assert (ours - theirs).abs().max() < 0.05 * moved  # ...but the same steps to bf16's precision


def muon_module() -> CharLM:
    config = ModelConfig(vocab_size=20, n_layer=2, n_head=2, d_model=16, block_size=8)
    return CharLM(config, OptimConfig(name="muon", implementation="foreach", muon_ns_dtype="fp32"))


def test_muon_gets_the_blocks_matrices_and_adamw_everything_else_once():
    module = muon_module()
    optimizer = module.configure_optimizers()
    assert isinstance(optimizer, MuonWithAdamW)
    names = {id(p): n for n, p in module.model.named_parameters()}
    muon = [names[id(p)] for g in optimizer.param_groups if g["muon"] for p in g["params"]]
    adamw = [names[id(p)] for g in optimizer.param_groups if not g["muon"] for p in g["params"]]
    assert sorted(muon + adamw) == sorted(names.values())  # every parameter, once
    assert muon and all(n.startswith("blocks.") and n.endswith(".weight") for n in muon)
    assert {"tok_emb.weight", "pos_emb.weight"} <= set(adamw)
    assert all(module.model.get_parameter(n).dim() == 1 for n in adamw if n.startswith("blocks."))
    # Muon follows AdamW's schedule from its own peak.
    assert module.learning_rate(10_000, muon=True) == pytest.approx(3e-4)
    assert module.learning_rate(99, muon=True) / module.learning_rate(99) == pytest.approx(3.0)


def test_muon_with_adamw_state_dict_resumes_both_optimizers_exactly():
    module = muon_module()
    optimizer = module.configure_optimizers()
    params = list(module.model.parameters())
    train(optimizer, params, steps=3)
    saved = copy.deepcopy(optimizer.state_dict())
    assert len(saved["state"]) == len(params)  # momentum buffers and AdamW's moments: every parameter's state
    twin = copy.deepcopy(module)
    restored = twin.configure_optimizers()
    twin_params = list(twin.model.parameters())
    restored.load_state_dict(saved)
    train(optimizer, params, steps=2)
    train(restored, twin_params, steps=2)
    for a, b in zip(params, twin_params, strict=True):
        assert torch.equal(a, b)


def test_every_optimizer_has_its_conf_file_naming_it():
    files = sorted((REPO / "conf" / "optim").glob("*.yaml"))
    assert {path.stem for path in files} == set(OPTIMIZERS)
    for path in files:
        assert OmegaConf.load(path).name == path.stem, path
