"""Everything that optimizes a run, built here and nowhere else: the `optim` section's settings (`OptimConfig`),
the optimizer `CharLM.configure_optimizers` gets (`build_optimizer`), AdamW's parameter groups, Muon's
construction and its Newton–Schulz dtype, and the learning-rate schedule (docs/performance.md, "Muon").

`optim.name=adamw`: AdamW on every parameter, weight decay on the matrices only. `optim.name=muon`: Muon on the
blocks' weight matrices, AdamW on the rest (embeddings, the tied head, norm gains, biases), the split of Muon's
authors, as one optimizer (`MuonWithAdamW`). Every group follows one schedule, linear warm-up then cosine
decay, from `optim.lr` (AdamW's groups) or `optim.muon_lr` (Muon's).

Which Newton–Schulz runs (`optim.muon_ns_dtype`, decided by `newton_schulz_dtype`):
- `bf16`, or `auto` where the matrices' device multiplies bf16 natively (AVX512-BF16 or AMX on x86 CPUs, CUDA
  GPUs with bf16: the probe `trainer.precision=auto` uses): torch.optim.Muon's own step, the quintic iteration
  on the m×n matrix, in bf16.
- `fp32`, or `auto` elsewhere (bf16 would be emulated, many times slower): the same update written out
  (`Muon.step_in`) in fp32, with Gram Newton–Schulz (`gram_orthogonalize`) on the matrices where it multiplies
  less (`fewer_flops_on_gram`: far from square, at the baby size the 384×128 and 512×128 ones) and the plain
  iteration (`orthogonalize`) on the others. Never Gram in bf16: its rounding compounds in the Gram iterates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tinylm import checks
from tinylm.model import GPT
from tinylm.training.precision import multiplies_bf16_natively

# optim.name: AdamW on every parameter, or Muon on the blocks' weight matrices and AdamW on the rest.
OPTIMIZERS = ("adamw", "muon")
# AdamW's kernel: "loop" (one tensor at a time), "foreach" (batched ops), "fused" (one fused kernel).
ADAMW_IMPLEMENTATIONS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
# Muon's update is rescaled by the matrix's shape so that one rate suits every matrix: "match_rms_adamw"
# (Moonshot, 0.2·sqrt(max(A, B)): the update's RMS matches AdamW's, so AdamW's rates carry over) or
# "original" (Keller Jordan, sqrt(max(1, A/B))). torch.optim.Muon computes both.
MUON_LR_ADJUSTMENTS = ("match_rms_adamw", "original")
# The dtype Newton–Schulz multiplies in: bf16 (torch.optim.Muon itself) where the device multiplies bf16
# natively, fp32 where bf16 would be emulated (many times slower on a CPU without AVX512-BF16 or AMX).
NS_DTYPES = {"auto": None, "bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass
class OptimConfig:
    """AdamW (decay on matrices only), linear warmup to `lr`, then cosine decay to `min_lr` at `decay_steps`.
    `name=muon`: Muon on the blocks' weight matrices at `muon_lr` on the same schedule (its floor
    `muon_lr · min_lr / lr`), AdamW on the rest."""

    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    decay_steps: int = 2000
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    implementation: str = "fused"
    name: str = "adamw"
    muon_lr: float = 3e-3
    muon_momentum: float = 0.95
    muon_nesterov: bool = True
    muon_ns_steps: int = 5
    muon_adjust_lr: str = "match_rms_adamw"
    muon_ns_dtype: str = "auto"

    def __post_init__(self) -> None:
        checks.number("optim.lr", self.lr, above=0)
        checks.number("optim.min_lr", self.min_lr, at_least=0, at_most=self.lr, hint="at most optim.lr")
        checks.whole_number("optim.warmup_steps", self.warmup_steps, minimum=0)
        checks.whole_number("optim.decay_steps", self.decay_steps)
        checks.number("optim.weight_decay", self.weight_decay, at_least=0)
        for name in ("beta1", "beta2"):
            checks.number(f"optim.{name}", getattr(self, name), at_least=0, below=1)
        checks.choice("optim.implementation", self.implementation, ADAMW_IMPLEMENTATIONS)
        checks.choice("optim.name", self.name, OPTIMIZERS)
        checks.number("optim.muon_lr", self.muon_lr, above=0)
        checks.number("optim.muon_momentum", self.muon_momentum, at_least=0, below=1)
        checks.boolean("optim.muon_nesterov", self.muon_nesterov)
        checks.whole_number("optim.muon_ns_steps", self.muon_ns_steps, minimum=1)
        checks.choice("optim.muon_adjust_lr", self.muon_adjust_lr, MUON_LR_ADJUSTMENTS)
        checks.choice("optim.muon_ns_dtype", self.muon_ns_dtype, NS_DTYPES)

    @property
    def muon_min_lr(self) -> float:
        """Muon's floor: the schedule's shape as AdamW's, scaled to `muon_lr`."""
        return self.muon_lr * self.min_lr / self.lr


# --- the optimizer ------------------------------------------------------------------------------------------


def build_optimizer(
    named_params: Iterable[tuple[str, torch.nn.Parameter]],
    decayed: dict[str, bool],
    muon_names: set[str],
    config: OptimConfig,
) -> torch.optim.Optimizer:
    """The optimizer `config` names for the trainable ones of `named_params` (names as the model's wrappers
    give them): AdamW with `weight_decay_groups`, or under `optim.name=muon` a `MuonWithAdamW` whose Muon gets
    the parameters `muon_names` names (`muon_matrices(model)`), AdamW the rest. `decayed`: `decays(model)`,
    decided on the whole model."""
    named = [(unwrapped_name(n), p) for n, p in named_params if p.requires_grad]
    muon = muon_names if config.name == "muon" else set()
    adamw = torch.optim.AdamW(
        weight_decay_groups([(n, p) for n, p in named if n not in muon], decayed, config.weight_decay),
        lr=config.lr,
        betas=(config.beta1, config.beta2),
        **ADAMW_IMPLEMENTATIONS[config.implementation],
    )
    if not muon:
        return adamw
    return MuonWithAdamW(adamw, muon_optimizer([p for n, p in named if n in muon], config))


# --- AdamW's parameter groups and Muon's share ----------------------------------------------------------------


def decays(model: torch.nn.Module) -> dict[str, bool]:
    """Each parameter's name, and whether AdamW decays it: matrices only, since biases and norm gains are 1-D,
    and decaying them just fights the norm."""
    return {name: p.dim() >= 2 for name, p in model.named_parameters()}


def muon_matrices(model: GPT) -> set[str]:
    """The names of the parameters Muon trains under `optim.name=muon`: the blocks' weight matrices. The
    embeddings (and the tied head) stay with AdamW, as in Muon's reference split."""
    return {f"blocks.{n}" for n, p in model.blocks.named_parameters() if p.dim() == 2}


# Segments that FSDP and activation checkpointing insert into parameter names.
WRAPPER_SEGMENTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def unwrapped_name(name: str) -> str:
    """A parameter's name as the bare model names it, without the wrappers' segments."""
    for segment in WRAPPER_SEGMENTS:
        name = name.replace(segment, "")
    return name


def weight_decay_groups(
    named_params: Iterable[tuple[str, torch.nn.Parameter]], decayed: dict[str, bool], weight_decay: float
) -> list[dict[str, Any]]:
    """AdamW parameter groups: `weight_decay` on the names `decayed` marks True, none on the others. A name
    it lacks raises: a wrapper renamed it past `unwrapped_name`, and it would silently lose its decay."""
    named = list(named_params)
    unknown = [name for name, _ in named if name not in decayed]
    if unknown:
        raise RuntimeError(
            f"parameter names {unknown[:3]} match no parameter of the model: a wrapper (FSDP, activation "
            f"checkpointing) renamed them in a way tinylm.training.optimizers.unwrapped_name does not undo"
        )
    return [
        {"params": [p for n, p in named if decayed[n]], "weight_decay": weight_decay},
        {"params": [p for n, p in named if not decayed[n]], "weight_decay": 0.0},
    ]


def newton_schulz_dtype(config: OptimConfig, device_type: str) -> torch.dtype:
    """The dtype Muon's Newton–Schulz multiplies in for matrices on `device_type`: `optim.muon_ns_dtype`, with
    `auto` bf16 where that device multiplies bf16 natively, else fp32 (this module's docstring)."""
    dtype = NS_DTYPES[config.muon_ns_dtype]
    if dtype is None:
        dtype = torch.bfloat16 if multiplies_bf16_natively(device_type) else torch.float32
    return dtype


def muon_optimizer(matrices: list[torch.nn.Parameter], config: OptimConfig) -> Muon:
    """Muon on `matrices` as `config` says, its Newton–Schulz in `newton_schulz_dtype`."""
    return Muon(
        matrices,
        ns_dtype=newton_schulz_dtype(config, matrices[0].device.type),
        lr=config.muon_lr,
        weight_decay=config.weight_decay,
        momentum=config.muon_momentum,
        nesterov=config.muon_nesterov,
        ns_steps=config.muon_ns_steps,
        adjust_lr_fn=config.muon_adjust_lr,
    )


# --- the learning-rate schedule ------------------------------------------------------------------------------


def learning_rate(step: int, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to `lr` over `warmup_steps`, then cosine decay to `min_lr` at `decay_steps`, then flat.
    `step` counts optimizer steps from 0; step 0 already gets a non-zero rate."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def scheduled_rate(config: OptimConfig, step: int, muon: bool = False) -> float:
    """The rate optimizer step `step` (counted from 0) uses under `config`: AdamW's, or with `muon` Muon's
    (the same schedule from `optim.muon_lr` to its floor, `OptimConfig.muon_min_lr`)."""
    peak, floor = (config.muon_lr, config.muon_min_lr) if muon else (config.lr, config.min_lr)
    return learning_rate(step, peak, floor, config.warmup_steps, config.decay_steps)


def set_scheduled_rates(optimizer: torch.optim.Optimizer, config: OptimConfig, step: int) -> None:
    """Set each of `optimizer`'s groups to the rate of optimizer step `step`: Muon's for the groups
    `MuonWithAdamW` flags `muon`, AdamW's for the others."""
    for group in optimizer.param_groups:
        group["lr"] = scheduled_rate(config, step, muon=group.get("muon", False))


SCHEDULE_KEYS = ("lr", "min_lr", "warmup_steps", "decay_steps")


def schedule_change(trained: dict[str, Any], optim: OptimConfig, step: int) -> str | None:
    """A resumed run's learning-rate schedule, if it is not the one the checkpoint trained on (`trained`: its
    `optim` settings): which settings moved and the rate at `step` before and after (under Muon, its rate
    too). `decay_steps` follows `trainer.max_steps` by default, so training further moves the cosine unless
    it is set."""
    keys = (*SCHEDULE_KEYS, "muon_lr") if optim.name == "muon" else SCHEDULE_KEYS
    changed = [key for key in keys if key in trained and trained[key] != getattr(optim, key)]
    if not changed:
        return None
    before = dataclasses.replace(optim, **{key: trained[key] for key in changed})
    moved = ", ".join(f"optim.{key} {trained[key]} -> {getattr(optim, key)}" for key in changed)
    goes = f"the rate there goes from {scheduled_rate(before, step):.3g} to {scheduled_rate(optim, step):.3g}"
    if optim.name == "muon":
        goes += (
            f" (Muon's: {scheduled_rate(before, step, muon=True):.3g} to "
            f"{scheduled_rate(optim, step, muon=True):.3g})"
        )
    keep = (
        f"; optim.decay_steps={trained['decay_steps']} continues the schedule it had"
        if "decay_steps" in changed
        else ""
    )
    return f"resumed at step {step} on another learning-rate schedule ({moved}): {goes}{keep}"


# --- Muon itself ---------------------------------------------------------------------------------------------


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
