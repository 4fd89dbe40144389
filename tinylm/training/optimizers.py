"""The optimizers `optim.name` selects: AdamW alone, or Muon on the blocks' weight matrices with AdamW on the
rest (embeddings, head, norm gains, biases), the split of Muon's authors (docs/performance.md)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

# Muon's update is rescaled by the matrix's shape so that one rate suits every matrix: "match_rms_adamw"
# (Moonshot, 0.2·sqrt(max(A, B)): the update's RMS matches AdamW's, so AdamW's rates carry over) or
# "original" (Keller Jordan, sqrt(max(1, A/B))). torch.optim.Muon computes both.
MUON_LR_ADJUSTMENTS = ("match_rms_adamw", "original")
# The dtype Newton–Schulz multiplies in: bf16 (torch.optim.Muon itself) where the device multiplies bf16
# natively, fp32 where bf16 would be emulated (many times slower on a CPU without AVX512-BF16 or AMX).
NS_DTYPES = {"auto": None, "bf16": torch.bfloat16, "fp32": torch.float32}


def orthogonalize(
    matrix: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float, dtype: torch.dtype
) -> Tensor:
    """Newton–Schulz's quintic iteration towards the nearest semi-orthogonal matrix (U·Vᵀ of the SVD), in
    `dtype`: torch.optim.Muon's iteration (bf16 only), op for op."""
    a, b, c = coefficients
    x = matrix.to(dtype)
    wide = matrix.size(0) > matrix.size(1)
    if wide:
        x = x.T
    x = x.div(x.norm().clamp(min=eps))  # spectral norm at most 1
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if wide else x


def gram_orthogonalize(
    matrix: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float, dtype: torch.dtype
) -> Tensor:
    """`orthogonalize`'s result, up to rounding, iterated on the small Gram matrix G = X·Xᵀ (Gram
    Newton–Schulz, Dao et al. 2026): each iterate is Q·X₀ with Q a polynomial in G, so the iterations multiply
    m×m matrices only and the m×n matrix is multiplied twice in all."""
    a, b, c = coefficients
    x = matrix.to(dtype)
    wide = matrix.size(0) > matrix.size(1)
    if wide:
        x = x.T
    x = x.div(x.norm().clamp(min=eps))
    gram = x @ x.T
    identity = torch.eye(gram.size(0), dtype=dtype, device=x.device)
    factor = identity
    for step in range(steps):
        polynomial = torch.addmm(gram, gram, gram, beta=b, alpha=c).add_(identity, alpha=a)
        factor = polynomial @ factor if step else polynomial
        if step < steps - 1:  # X ← P·X makes G ← P·G·P
            gram = polynomial @ gram @ polynomial
    x = factor @ x
    return x.T if wide else x


def fewer_flops_on_gram(shape: torch.Size, steps: int) -> bool:
    """Whether `gram_orthogonalize` multiplies less than `orthogonalize` for a matrix of `shape` (m ≤ n):
    2·m²·n + m³ an iteration against 4·m³ an iteration and 2·m²·n once, so only far from square."""
    m, n = sorted(shape[:2])
    return 2 * m * m * n + (4 * steps - 4) * m**3 < steps * (2 * m * m * n + m**3)


def muon_lr_scale(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """The factor Muon's rate is multiplied by for a matrix of `shape` (as torch.optim.Muon's docs state)."""
    rows, cols = shape[:2]
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return math.sqrt(max(1, rows / cols))


class Muon(torch.optim.Muon):
    """torch.optim.Muon with the Newton–Schulz dtype as a choice: torch's own step for bf16; for any other
    dtype the same update with `orthogonalize` (torch's Muon has no public way to set the dtype)."""

    def __init__(self, params: Iterable[Any], ns_dtype: torch.dtype = torch.bfloat16, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        if self.ns_dtype == torch.bfloat16:
            return super().step(closure)
        return self.step_in(self.ns_dtype, closure)

    @torch.no_grad()
    def step_in(self, dtype: torch.dtype, closure: Callable[[], float] | None = None) -> float | None:
        """torch.optim.Muon's step, written out, with Newton–Schulz in `dtype`."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(
                        param.grad, memory_format=torch.preserve_format
                    )
                buffer = state["momentum_buffer"]
                buffer.lerp_(param.grad, 1 - momentum)
                update = param.grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                # Not in bf16: its rounding compounds in the Gram iterates (the paper restarts them).
                on_gram = dtype != torch.bfloat16 and fewer_flops_on_gram(update.shape, group["ns_steps"])
                iterate = gram_orthogonalize if on_gram else orthogonalize
                update = iterate(update, group["ns_coefficients"], group["ns_steps"], group["eps"], dtype)
                param.mul_(1 - lr * group["weight_decay"])
                param.add_(update, alpha=-lr * muon_lr_scale(group["adjust_lr_fn"], param.shape))
        return loss


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon on the groups flagged `muon`, AdamW on the others, as one optimizer: Lightning's automatic
    optimization steps exactly one. The two share this optimizer's groups and state, so its state_dict is the
    whole optimizer state (momentum buffers and AdamW's moments) and a checkpoint resumes both."""

    def __init__(self, adamw: torch.optim.AdamW, muon: Muon) -> None:
        for group in adamw.param_groups:
            group["muon"] = False
        for group in muon.param_groups:
            group["muon"] = True
        self.adamw, self.muon = adamw, muon
        super().__init__([*adamw.param_groups, *muon.param_groups], {})
        self.share_groups_and_state()

    def share_groups_and_state(self) -> None:
        self.adamw.param_groups = [g for g in self.param_groups if not g["muon"]]
        self.muon.param_groups = [g for g in self.param_groups if g["muon"]]
        self.adamw.state = self.muon.state = self.state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # new group dicts and a new state: share them again
        self.share_groups_and_state()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.adamw.step()
        self.muon.step()
        return loss
