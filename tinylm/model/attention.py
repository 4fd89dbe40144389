"""Multi-head self-attention through PyTorch's fused scaled-dot-product kernel; causal unless told otherwise."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.model.norms import RMSNorm


class CausalSelfAttention(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_head: int,
        bias: bool = True,
        dropout: float = 0.0,
        qk_norm: bool = False,
        norm_eps: float = 1e-5,
        causal: bool = True,
    ) -> None:
        super().__init__()
        if d_model % n_head != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_head={n_head}")
        self.n_head = n_head
        # The language model is always causal; the depth probe (tinylm.probe.depth) studies blocks without a mask.
        self.causal = causal
        self.head_size = d_model // n_head
        # One matmul for q, k and v; rows [0:d) are W_q, [d:2d) W_k, [2d:3d) W_v.
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout
        self.proj_dropout = nn.Dropout(dropout)
        # QK-norm normalises each head's queries and keys, which bounds the attention logits.
        self.q_norm = RMSNorm(self.head_size, eps=norm_eps) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_size, eps=norm_eps) if qk_norm else nn.Identity()

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, time, channels = x.shape
        q, k, v = self.qkv(x).split(channels, dim=-1)
        q, k, v = (t.view(batch, time, self.n_head, self.head_size).transpose(1, 2) for t in (q, k, v))
        return self.q_norm(q), self.k_norm(k), v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, channels = x.shape
        q, k, v = self._heads(x)
        dropout_p = self.dropout if self.training else 0.0
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            # PyTorch's CPU flash-attention backward is several times slower in bf16 than in fp32, more than
            # the bf16 matmuls around it save (docs/performance.md): the attention itself runs in fp32.
            with torch.autocast("cpu", enabled=False):
                y = F.scaled_dot_product_attention(
                    q.float(), k.float(), v.float(), is_causal=self.causal, dropout_p=dropout_p
                )
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, dropout_p=dropout_p)
        return self.proj_dropout(self.proj(y.transpose(1, 2).reshape(batch, time, channels)))

    @torch.no_grad()
    def attention_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The (batch, head, query, key) scaled scores q·k/√head_size that `forward` feeds to its softmax,
        for diagnostics; keys a causal query may not see are -inf.

        The fused kernel never materialises them, so this recomputes them explicitly.
        """
        q, k, _ = self._heads(x)
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.head_size)
        if not self.causal:
            return logits
        time = x.shape[1]
        causal = torch.ones(time, time, dtype=torch.bool, device=x.device).tril()
        return logits.masked_fill(~causal, float("-inf"))

    @torch.no_grad()
    def attention_probs(self, x: torch.Tensor) -> torch.Tensor:
        """The (batch, head, query, key) attention weights that `forward` uses, for diagnostics."""
        return self.attention_logits(x).softmax(dim=-1)
