"""The GPT character model: embeddings -> blocks -> final norm (if the placement needs one) -> head."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.model.block import Block, make_norm
from tinylm.model.config import ModelConfig
from tinylm.model.placements import PLACEMENTS


def init_linear(module: nn.Linear, name: str, config: ModelConfig) -> None:
    """Initialise one linear layer (bias to zero) as `config.init` says; `name` is its module path.

    `gpt2`: N(0, 0.02), with the residual output projections (`...attn.sublayer.proj`,
    `...ffn.sublayer.down`) scaled by 1/sqrt(2·n_layer) so the stream's variance does not grow with depth.
    `xavier`: Xavier-uniform (2017), kept for placement experiments. The fused `qkv` layer holds three
    d×d projections, W_q, W_k and W_v; each is initialised as its own matrix, as the 2017 model's separate
    projections were. Xavier on the fused (3d × d) matrix would count a fan-out of 3d and shrink q, k and v
    by √2, which visibly changes how fast a post-norm stack's tokens collapse (see `tinylm.probe.depth`).
    Shared by `GPT` and the depth probe's bare stack of blocks.
    """
    if config.init == "xavier":
        fused_qkv = name.endswith("attn.sublayer.qkv")
        for projection in module.weight.split(config.d_model) if fused_qkv else [module.weight]:
            nn.init.xavier_uniform_(projection)
    elif name.endswith(("attn.sublayer.proj", "ffn.sublayer.down")):
        nn.init.normal_(module.weight, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
    else:
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


class GPT(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.block_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.final_norm = make_norm(config) if PLACEMENTS[config.norm].needs_final_norm else nn.Identity()
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.head.weight = self.tok_emb.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """`init_linear` for every linear layer, N(0, 0.02) for embeddings."""
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                init_linear(module, name, self.config)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if self.config.tie_weights and self.config.init == "xavier":
            # The head was just re-initialised through the shared tensor; embeddings keep the small init.
            nn.init.normal_(self.tok_emb.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count. With `non_embedding`, position embeddings are left out, and so are token
        embeddings unless they are tied to the head (then they are the head's weights, as in nanoGPT)."""
        total = sum(p.numel() for p in self.parameters())  # a tied tensor is counted once
        if non_embedding:
            total -= self.pos_emb.weight.numel()
            if not self.config.tie_weights:
                total -= self.tok_emb.weight.numel()
        return total

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, time = idx.shape
        if time > self.config.block_size:
            raise ValueError(f"sequence length {time} exceeds block_size={self.config.block_size}")
        positions = torch.arange(time, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.final_norm(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        on_token: Callable[[torch.Tensor], Any] | None = None,
    ) -> torch.Tensor:
        """Append `max_new_tokens` sampled tokens to `idx` (batch, time), feeding at most `block_size`;
        `on_token` sees each new (batch, 1) column as it is drawn, e.g. to stream text."""
        if temperature <= 0:
            raise ValueError(f"temperature={temperature} must be > 0")
        if top_k is not None and top_k <= 0:
            raise ValueError(f"top_k={top_k} must be a positive integer or None")
        for _ in range(max_new_tokens):
            context = idx[:, -self.config.block_size :]
            logits, _ = self(context)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                kth_largest = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth_largest, float("-inf"))
            next_token = torch.multinomial(logits.softmax(dim=-1), num_samples=1, generator=generator)
            idx = torch.cat((idx, next_token), dim=1)
            if on_token is not None:
                on_token(next_token)
        return idx
