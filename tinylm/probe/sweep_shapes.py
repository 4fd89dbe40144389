"""The depth probe of a sweep's shapes: each placement and FFN a sweep trained, probed at initialisation at its
own depth, width and context, so that a collapse its training curves show can be seen at step 0 too
(docs/probe.md). It takes the runs' model sections; the report (tinylm.analysis) reads them and calls it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# The probe's measurements kept for the last block, where a collapse is deepest.
SHOWN = ("stream_rms", "token_spread", "grad_w_q", "grad_w_k", "grad_w_v", "grad_w_o")
SHAPE = ("norm", "act", "n_layer", "d_model")


def probe_rows(
    models: Iterable[Mapping[str, Any]], batch_size: int = 4, seed: int = 0
) -> list[dict[str, Any]]:
    """The last block's measurements for each (placement, FFN, depth, width) among `models`, the first model
    section of each, in their order: causal attention over the model's own context, its own initialisation,
    `randn` input, float64 (`depth_probe`)."""
    from tinylm.model import ModelConfig
    from tinylm.probe.depth import depth_probe  # torch only when a sweep is probed

    shapes: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for model in models:
        shapes.setdefault(tuple(model.get(name) for name in SHAPE), model)
    rows = []
    for model in shapes.values():
        config = ModelConfig.from_dict(dict(model))
        measured = depth_probe(
            config, batch_size=batch_size, seq_len=config.block_size, seed=seed, causal=True
        )
        shape = {name: getattr(config, name) for name in SHAPE}
        rows.append({**shape, **{key: measured[-1][key] for key in SHOWN}})
    return rows
