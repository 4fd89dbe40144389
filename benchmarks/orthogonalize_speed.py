"""Candidate orthogonalisations for Muon, timed on the baby model's 16 block matrices: one by one (tinylm's
`orthogonalize`, torch.optim.Muon's iteration), same-shape matrices in one batched multiply, Gram
Newton-Schulz (iterating on the small Gram matrix), Polar Express's per-iteration coefficients, and fewer
iterations; each with its distance to U·Vᵀ of the SVD (docs/performance.md, "The speedrun").

    python benchmarks/orthogonalize_speed.py [--threads 1]

Thread CPU time, median of 7 repetitions of 10 calls. Gram Newton-Schulz earned its place: tinylm's fp32 Muon
runs it one matrix at a time (`gram_orthogonalize`); the other candidates are not in tinylm.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from tinylm.training.optimizers import orthogonalize

NEWTON_SCHULZ = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's coefficients
POLAR_EXPRESS = [  # Amsel et al. 2025, as modded-nanogpt uses them
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]
# The baby model's Muon matrices: per block QKV, the attention output, the FFN's two.
SHAPES = [(384, 128), (128, 128), (512, 128), (128, 512)] * 4


def normalised_wide(matrices: list[Tensor]) -> tuple[Tensor, bool]:
    x = torch.stack(matrices)
    tall = x.size(-2) > x.size(-1)
    x = x.mT if tall else x
    return x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=1e-7), tall


def batched(matrices: list[Tensor], coefficients: list[tuple[float, float, float]]) -> list[Tensor]:
    x, tall = normalised_wide(matrices)
    for a, b, c in coefficients:
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return list((x.mT if tall else x).unbind(0))


def gram_newton_schulz(
    matrices: list[Tensor], coefficients: list[tuple[float, float, float]]
) -> list[Tensor]:
    """X_k = Q_k X_0 with Q_k a polynomial in G_0 = X_0 X_0ᵀ: iterate on Q and G (small), multiply X once."""
    x, tall = normalised_wide(matrices)
    if x.size(-1) == x.size(-2):
        return batched(matrices, coefficients)
    gram = x @ x.mT
    identity = torch.eye(gram.size(-1)).expand_as(gram)
    q = None
    for a, b, c in coefficients:
        p = torch.baddbmm(gram, gram, gram, beta=b, alpha=c) + a * identity
        q = p if q is None else p @ q
        gram = p @ gram @ p
    x = q @ x
    return list((x.mT if tall else x).unbind(0))


def by_shape(fn: Callable, coefficients: list) -> Callable[[list[Tensor]], list[Tensor]]:
    def run(matrices: list[Tensor]) -> list[Tensor]:
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, m in enumerate(matrices):
            groups.setdefault(tuple(m.shape), []).append(i)
        out: list[Tensor] = [torch.empty(0)] * len(matrices)
        for indices in groups.values():
            for i, result in zip(indices, fn([matrices[i] for i in indices], coefficients), strict=True):
                out[i] = result
        return out

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    torch.manual_seed(0)
    matrices = [torch.randn(shape) for shape in SHAPES]
    variants = {
        "one by one, NS 5": lambda ms: [orthogonalize(m, NEWTON_SCHULZ, 5, 1e-7, torch.float32) for m in ms],
        "batched, NS 5": by_shape(batched, [NEWTON_SCHULZ] * 5),
        "Gram NS 5": by_shape(gram_newton_schulz, [NEWTON_SCHULZ] * 5),
        "batched, Polar Express 5": by_shape(batched, POLAR_EXPRESS),
        "batched, NS 3": by_shape(batched, [NEWTON_SCHULZ] * 3),
        "batched, Polar Express 3": by_shape(batched, POLAR_EXPRESS[:3]),
    }
    polar = []
    for m in matrices:
        u, _, vh = torch.linalg.svd(m, full_matrices=False)
        polar.append(u @ vh)
    for name, fn in variants.items():
        results = fn(matrices)
        singular = torch.cat([torch.linalg.svdvals(r) for r in results])
        error = max(((r - p).norm() / p.norm()).item() for r, p in zip(results, polar, strict=True))
        times = []
        for _ in range(7):
            start = time.thread_time()
            for _ in range(10):
                fn(matrices)
            times.append((time.thread_time() - start) / 10 * 1e3)
        print(
            f"{name:26s} {statistics.median(times):7.2f} ms  singular values [{singular.min():.3f}, "
            f"{singular.max():.3f}]  relative distance to UVᵀ {error:.3f}"
        )


if __name__ == "__main__":
    main()
