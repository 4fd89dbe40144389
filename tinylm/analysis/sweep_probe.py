"""The depth probe beside a sweep: each placement (and FFN) the sweep trained, probed at initialisation at the sweep's
own depth and width, so that a collapse the training curves show can be seen at step 0 too (docs/probe.md).
One forward and backward pass per shape: seconds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinylm.analysis.runs import RunSummary

# The probe's measurements kept for the last block, where a collapse is deepest.
SHOWN = ("stream_rms", "token_spread", "grad_w_q", "grad_w_k", "grad_w_v", "grad_w_o")


def probe_shapes(runs: Sequence[RunSummary]) -> list[dict[str, Any]]:
    """One model config per (placement, FFN, depth, width) among the runs, the first run's, in the runs'
    order."""
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in runs:
        if run.model:
            key = tuple(run.model.get(name) for name in ("norm", "act", "n_layer", "d_model"))
            shapes.setdefault(key, run.model)
    return list(shapes.values())


def probe_rows(runs: Sequence[RunSummary], batch_size: int = 4, seed: int = 0) -> list[dict[str, Any]]:
    """The last block's measurements per shape: causal attention over the run's own context, the run's own
    initialisation, `randn` input, float64 (tinylm.probe.depth.depth_probe)."""
    from tinylm.model import ModelConfig
    from tinylm.probe.depth import depth_probe  # torch only when a sweep is probed

    rows = []
    for model in probe_shapes(runs):
        config = ModelConfig.from_dict(dict(model))
        measured = depth_probe(
            config, batch_size=batch_size, seq_len=config.block_size, seed=seed, causal=True
        )
        shape = {"norm": config.norm, "act": config.act, "n_layer": config.n_layer, "d_model": config.d_model}
        rows.append({**shape, **{key: measured[-1][key] for key in SHOWN}})
    return rows
