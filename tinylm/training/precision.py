"""`trainer.precision=auto`: bf16 autocast where the hardware multiplies bf16 natively, fp32 everywhere else,
since a CPU without bf16 instructions emulates them and trains slower (docs/performance.md).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

AUTO = "auto"
MIXED_BF16 = "bf16-mixed"
FULL_FP32 = "32-true"
CPU_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")


def _device_type(accelerator: str) -> str:
    """The torch device type Lightning picks for `accelerator`."""
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() or torch.backends.mps.is_available() else "cpu"
    if accelerator == "gpu":
        return "cuda" if torch.cuda.is_available() else "mps"
    return accelerator


def multiplies_bf16_natively(device_type: str) -> bool:
    """Whether `device_type`'s matmuls run bf16 in hardware: AVX512-BF16 or AMX on x86 CPUs, Ampere+ GPUs.
    Arm CPUs and MPS answer False: not measured here, so they keep fp32."""
    if device_type == "cpu":
        # Private probes (the ones inductor uses; docs/internals.md); without them the safe answer is fp32.
        probes = [getattr(torch.cpu, name, None) for name in CPU_BF16_PROBES]
        if not any(probes):
            log.warning(
                "torch.cpu has none of %s: trainer.precision=auto keeps fp32", ", ".join(CPU_BF16_PROBES)
            )
        return any(probe() for probe in probes if probe is not None)
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    return False


def resolve_precision(precision: str | int, accelerator: str) -> str | int:
    """`precision` as Lightning takes it: `auto` becomes bf16-mixed or 32-true for this machine; anything
    else is passed through unchanged (Lightning validates it)."""
    if precision != AUTO:
        return precision
    return MIXED_BF16 if multiplies_bf16_natively(_device_type(str(accelerator))) else FULL_FP32


def describe_precision(requested: str | int, resolved: str | int, accelerator: str) -> str:
    """The precision a run uses, and why: for the run's log."""
    if requested != AUTO:
        return f"{resolved} (set by trainer.precision)"
    device = _device_type(str(accelerator))
    if resolved == MIXED_BF16:
        return f"{resolved} (auto: this {device.upper()} multiplies bf16 natively)"
    if device == "cpu":
        return (
            f"{resolved} (auto: this CPU has no native bf16 matmul (AVX512-BF16 or AMX), so bf16 would be "
            "emulated and slower; trainer.precision=bf16-mixed forces it)"
        )
    return f"{resolved} (auto: this {device} does not multiply bf16 natively)"


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype a resolved Trainer `precision` setting multiplies in, which decides the peak FLOP/s to
    compare with."""
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    if precision.startswith("64"):
        return torch.float64
    return torch.float32
