"""Measurements of a transformer's inner state, shared by the depth probe (`analysis.probe`) and the
training-time health callback (`analysis.health`). Plain PyTorch; every function returns tensors (no host
sync), so a caller can gather many measurements and bring them to the host at once.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.model import Block

WEIGHTS_OF_ATTENTION = ("w_q", "w_k", "w_v", "w_o")


def stream_rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square of the residual stream `x` (batch, time, d) over all its entries."""
    return x.detach().pow(2).mean().sqrt()


def token_spread(x: torch.Tensor) -> torch.Tensor:
    """How far the token vectors of a sequence are from their mean, relative to the stream's scale.

    For `x` of shape (batch, time, d), with m_b = the mean of x[b] over its `time` positions:

        spread = sqrt(mean over b, t, f of (x[b, t, f] − m_b[f])²) / stream_rms(x)

    Both numerator and denominator are RMS over (batch, time, feature) entries, so the ratio does not depend
    on the width d or on the stream's overall scale. It is about 1 for independent random tokens (exactly
    sqrt(1 − 1/time) in expectation for zero-mean i.i.d. entries) and 0 when every token of a sequence has
    collapsed onto the same vector (rank collapse), the state in which attention can no longer tell tokens
    apart and its query/key weights receive no gradient. The mean is taken per sequence because tokens only
    interact within their own sequence.
    """
    x = x.detach()
    centred = x - x.mean(dim=1, keepdim=True)
    return centred.pow(2).mean().sqrt() / stream_rms(x)


def attention_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the attention distributions `probs` (batch, head, query, key).

    0 means every query attends to a single key; log(keys) is uniform attention. Masked keys have
    probability 0 and contribute 0 (entr(0) = 0).
    """
    return torch.special.entr(probs).sum(dim=-1).mean()


def block_weight_grad_norms(block: Block) -> dict[str, torch.Tensor]:
    """Frobenius norms of the gradients of one block's weight matrices, as 0-dim tensors.

    `w_q`, `w_k`, `w_v` are the row slices [0:d), [d:2d), [2d:3d) of the fused `attn.sublayer.qkv.weight`
    gradient; `w_o` is the attention output projection; `ffn_<name>` is each linear layer of the FFN
    (`ffn_up`, `ffn_down`, and `ffn_gate` for gated FFNs). A weight without a gradient gives NaN, so a
    missing measurement never reads as "zero gradient".
    """
    attention = block.attn.sublayer
    d_model = attention.proj.weight.shape[0]
    norms: dict[str, torch.Tensor] = {}
    qkv_grad = attention.qkv.weight.grad
    for index, name in enumerate(("w_q", "w_k", "w_v")):
        rows = None if qkv_grad is None else qkv_grad[index * d_model : (index + 1) * d_model]
        norms[name] = _norm_or_nan(rows, attention.qkv.weight)
    norms["w_o"] = _norm_or_nan(attention.proj.weight.grad, attention.proj.weight)
    for name, layer in block.ffn.sublayer.named_children():
        if isinstance(layer, nn.Linear):
            norms[f"ffn_{name}"] = _norm_or_nan(layer.weight.grad, layer.weight)
    return norms


def _norm_or_nan(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if grad is None:
        return torch.full((), float("nan"), device=like.device)
    # At least float32, so that bf16/fp16 gradients do not overflow while being squared and summed.
    return torch.linalg.vector_norm(grad.detach(), dtype=torch.promote_types(grad.dtype, torch.float32))
