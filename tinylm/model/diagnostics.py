"""Measurements of a transformer's inner state, shared by the depth probe and the health callback. Every
function returns tensors (no host sync), so a caller can bring many to the host at once.
"""

from __future__ import annotations

import torch

from tinylm.model.block import Block

WEIGHTS_OF_ATTENTION = ("w_q", "w_k", "w_v", "w_o")


def stream_rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square of the residual stream `x` (batch, time, d) over all its entries."""
    return x.detach().pow(2).mean().sqrt()


def token_spread(x: torch.Tensor) -> torch.Tensor:
    """RMS of `x` (batch, time, d) less each sequence's mean token, over `stream_rms(x)`: about 1 for
    independent tokens, 0 at rank collapse (docs/probe.md). The mean is per sequence because tokens only
    interact within their own sequence."""
    x = x.detach()
    centred = x - x.mean(dim=1, keepdim=True)
    return centred.pow(2).mean().sqrt() / stream_rms(x)


def attention_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the attention distributions `probs` (batch, head, query, key): 0 when every
    query attends to a single key, log(keys) when uniform. Masked keys contribute 0 (entr(0) = 0)."""
    return torch.special.entr(probs).sum(dim=-1).mean()


def dead_fraction(pre_activation: torch.Tensor) -> torch.Tensor:
    """Fraction of FFN units (the last dimension of `pre_activation`, the nonlinearity's input) that are never
    above 0 on any token: a ReLU unit there outputs 0 and gets no gradient; a GELU or SiLU one almost so."""
    fired = (pre_activation.detach().flatten(0, -2) > 0).any(dim=0)
    return 1.0 - fired.float().mean()


def block_weight_grad_norms(block: Block) -> dict[str, torch.Tensor]:
    """Frobenius norms of one block's weight gradients (0-dim tensors): `w_q`, `w_k`, `w_v` (row blocks of the
    fused qkv), `w_o`, and `ffn_<name>` per FFN weight matrix, named after its layer (`ffn_up`, `ffn_net_0`). A
    weight without a gradient gives NaN, so a missing measurement never reads as "zero gradient"."""
    attention = block.attn.sublayer
    d_model = attention.proj.weight.shape[0]
    norms: dict[str, torch.Tensor] = {}
    qkv_grad = attention.qkv.weight.grad
    for index, name in enumerate(("w_q", "w_k", "w_v")):
        rows = None if qkv_grad is None else qkv_grad[index * d_model : (index + 1) * d_model]
        norms[name] = _norm_or_nan(rows, attention.qkv.weight)
    norms["w_o"] = _norm_or_nan(attention.proj.weight.grad, attention.proj.weight)
    # Every matrix, however the FFN names or nests its layers, so a new FFN's weights are never left out.
    for name, weight in block.ffn.sublayer.named_parameters():
        if weight.dim() >= 2:
            key = "ffn_" + name.removesuffix(".weight").replace(".", "_")
            norms[key] = _norm_or_nan(weight.grad, weight)
    return norms


def _norm_or_nan(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if grad is None:
        return torch.full((), float("nan"), device=like.device)
    # At least float32, so that bf16/fp16 gradients do not overflow while being squared and summed.
    return torch.linalg.vector_norm(grad.detach(), dtype=torch.promote_types(grad.dtype, torch.float32))
