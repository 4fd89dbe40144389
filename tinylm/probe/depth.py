"""The depth probe: measure a stack of freshly initialised blocks (the model's own `Block`) before training.

One forward and backward pass per norm placement, on the same input, weights and loss; per depth k the
stream RMS, the token spread and block k's weight-gradient norms (`tinylm.model.diagnostics`). The protocol and
how to read the numbers: docs/probe.md. Everything but `run(cfg)` is plain PyTorch.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from tinylm import checks
from tinylm.errors import ConfigError
from tinylm.files import write_json
from tinylm.model import FFNS, PLACEMENTS, Block, ModelConfig
from tinylm.model.diagnostics import block_weight_grad_norms, stream_rms, token_spread
from tinylm.model.gpt import init_linear

INPUTS = ("random", "text")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
# Labels for the printed table and the plot; the CSV/JSON use the keys. FFN weights are labelled from their
# keys (`label`), so any FFN's appear, whatever its layers are called.
LABELS = {
    "stream_rms": "stream RMS",
    "token_spread": "token spread",
    "grad_w_q": "‖∇W_q‖",
    "grad_w_k": "‖∇W_k‖",
    "grad_w_v": "‖∇W_v‖",
    "grad_w_o": "‖∇W_o‖",
}


def build_stack(config: ModelConfig, causal: bool = False) -> nn.ModuleList:
    """`config.n_layer` fresh blocks, initialised as `config.init` says (the same `init_linear` as GPT's).

    No embeddings, no final norm and no head: the probe looks at the blocks alone.
    """
    blocks = nn.ModuleList(Block(config, causal=causal) for _ in range(config.n_layer))
    for name, module in blocks.named_modules():
        if isinstance(module, nn.Linear):
            init_linear(module, name, config)
    return blocks


def text_batch(
    text: str, batch_size: int, seq_len: int, d_model: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """`batch_size` random windows of `seq_len` characters of `text`, embedded through a fresh N(0, 1)
    character embedding (the same scale as `randn` input) as a (batch, time, d_model) tensor."""
    if len(text) < seq_len:
        raise ConfigError(f"the probe's text has {len(text)} characters, fewer than seq_len={seq_len}")
    vocabulary = {char: index for index, char in enumerate(sorted(set(text)))}
    embedding = torch.randn(len(vocabulary), d_model, generator=generator)
    starts = torch.randint(0, len(text) - seq_len + 1, (batch_size,), generator=generator).tolist()
    ids = torch.tensor([[vocabulary[char] for char in text[start : start + seq_len]] for start in starts])
    return embedding[ids]


def probe_stack(
    blocks: nn.ModuleList, inputs: torch.Tensor, projection: torch.Tensor
) -> list[dict[str, Any]]:
    """One forward and backward pass through `blocks`; the measurements after each block, k = 1, 2, ...

    The loss is a fixed random projection of the last output: its gradient has the same size for every
    placement, where `out.sum()` would be ~0 after post-norm's final LayerNorm (docs/probe.md).
    """
    blocks.zero_grad(set_to_none=True)
    x = inputs
    activations: list[tuple[torch.Tensor, torch.Tensor]] = []
    for block in blocks:
        x = block(x)
        activations.append((stream_rms(x), token_spread(x)))
    (x * projection).mean().backward()
    rows: list[dict[str, Any]] = []
    for k, (block, (rms, spread)) in enumerate(zip(blocks, activations, strict=True), start=1):
        grads = {f"grad_{name}": norm for name, norm in block_weight_grad_norms(block).items()}
        rows.append({"k": k, "stream_rms": rms, "token_spread": spread, **grads})
    return [{key: value if key == "k" else float(value) for key, value in row.items()} for row in rows]


def depth_probe(
    config: ModelConfig,
    norms: Sequence[str] | None = None,
    *,
    batch_size: int = 4,
    seq_len: int = 32,
    seed: int = 0,
    causal: bool = False,
    text: str | None = None,
    dtype: torch.dtype = torch.float64,
) -> list[dict[str, Any]]:
    """Probe a stack of `config.n_layer` blocks for each placement in `norms` (default: `config.norm`); one
    row per (placement, k). `text` switches the input from `randn` to windows of that text. `seed` draws the
    input, the projection, then the weights (the same for every placement), leaving the global RNG as it
    was; float64 resolves post-norm's smallest gradients, which float32 cannot (docs/probe.md).
    """
    norms = list(norms) if norms else [config.norm]
    unknown = [norm for norm in norms if norm not in PLACEMENTS]
    if unknown:
        raise ConfigError(
            f"norms={norms}: unknown placement(s) {unknown}; choose from {', '.join(PLACEMENTS)}"
        )
    rows: list[dict[str, Any]] = []
    with torch.random.fork_rng(devices=[]):
        generator = torch.manual_seed(seed)
        # Drawn in float32 whatever `dtype` is, so a float64 run measures the very same sample.
        shape = (batch_size, seq_len, config.d_model)
        if text is None:
            inputs = torch.randn(shape, generator=generator)
        else:
            inputs = text_batch(text, batch_size, seq_len, config.d_model, generator)
        projection = torch.randn(shape, generator=generator)
        inputs, projection = inputs.to(dtype), projection.to(dtype)
        weights_state = generator.get_state()
        for norm in norms:
            generator.set_state(weights_state)
            blocks = build_stack(dataclasses.replace(config, norm=norm), causal).to(dtype)
            rows += [{"norm": norm, **row} for row in probe_stack(blocks, inputs, projection)]
    return rows


def quantity_keys(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The measured columns, every one, in the order they were measured."""
    return list(dict.fromkeys(key for row in rows for key in row if key not in ("norm", "k")))


def label(key: str) -> str:
    """A measured column's label: `grad_ffn_up` reads ‖∇FFN up‖; a key with no label is its own."""
    if key.startswith("grad_ffn_"):
        return f"‖∇FFN {key.removeprefix('grad_ffn_')}‖"
    return LABELS.get(key, key)


def table_depths(depth: int, wanted: Sequence[int]) -> list[int]:
    """The depths to print: the wanted ones that exist, and always the last block."""
    return sorted({k for k in wanted if 1 <= k <= depth} | {depth})


def format_table(rows: Sequence[dict[str, Any]], depths: Sequence[int]) -> str:
    """A Markdown table of `rows` at `depths`, one line per (placement, k), grouped by placement."""
    keys = quantity_keys(rows)
    header = ["norm", "k", *(label(key) for key in keys)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        if row["k"] in depths:
            cells = [row["norm"], str(row["k"]), *(_format_value(key, row[key]) for key in keys)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _format_value(key: str, value: float) -> str:
    if key.startswith("grad_") or not 0.01 <= abs(value) < 1000:
        return f"{value:.2e}"
    return f"{value:.3f}"


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    keys = ["norm", "k", *quantity_keys(rows)]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows({key: row.get(key, "") for key in keys} for row in rows)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str = "") -> None:
    """A PNG with one panel per quantity against depth k, one line per placement; log scale for all but
    the stream RMS, whose growth (≈ sqrt(k) for pre-norm) reads better on a linear axis."""
    # Figure without pyplot: renders through matplotlib's Agg canvas, with no GUI backend and no global state.
    from matplotlib.figure import Figure

    keys = quantity_keys(rows)
    columns = 4
    panel_rows = math.ceil(len(keys) / columns)
    figure = Figure(figsize=(4 * columns, 3.2 * panel_rows), layout="constrained")
    axes = figure.subplots(panel_rows, columns, squeeze=False).ravel()
    norms = list(dict.fromkeys(row["norm"] for row in rows))
    for axis, key in zip(axes, keys, strict=False):
        for norm in norms:
            points = [(row["k"], row[key]) for row in rows if row["norm"] == norm and row[key] > 0]
            axis.plot([k for k, _ in points], [v for _, v in points], marker=".", label=norm)
        if key != "stream_rms":
            axis.set_yscale("log")
        axis.set_title(label(key))
        axis.set_xlabel("depth k (after block k)")
        axis.grid(True, which="major", alpha=0.3)
    for axis in axes[len(keys) :]:
        axis.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, title="norm", loc="outside right upper")
    if title:
        figure.suptitle(title)
    figure.savefig(path, dpi=100)


def _settings(cfg: DictConfig) -> dict[str, Any]:
    """The probe's settings from its Hydra config, checked; raises ConfigError naming a bad one."""
    for key in ("depth", "batch_size", "seq_len"):
        checks.whole_number(key, cfg[key])
    checks.choice("input", cfg.input, INPUTS)
    checks.choice("dtype", cfg.dtype, DTYPES)
    checks.whole_number("seed", cfg.get("seed"), minimum=0)
    norms = list(cfg.norms) if cfg.get("norms") else [cfg.model.norm]
    model = {
        **OmegaConf.to_container(cfg.model, resolve=True),
        "n_layer": cfg.depth,
        "block_size": cfg.seq_len,
    }
    config = ModelConfig.from_dict(model)
    needed = probe_memory_bytes(config, cfg.batch_size, cfg.seq_len, DTYPES[cfg.dtype].itemsize)
    available = available_memory_bytes()
    if needed > available:
        raise ConfigError(
            f"depth={cfg.depth}, seq_len={cfg.seq_len}, batch_size={cfg.batch_size}, d_model={config.d_model}: "
            f"the probe would need about {needed / 1e9:,.1f} GB (weights, their gradients and the activations "
            f"kept for the backward pass, in {cfg.dtype}), and this machine has "
            f"{available / 1e9:,.1f} GB available; lower depth, seq_len or batch_size"
        )
    return {
        "norms": norms,
        "model": config.to_dict(),
        "depth": cfg.depth,
        "batch_size": cfg.batch_size,
        "seq_len": cfg.seq_len,
        "input": cfg.input,
        "text_file": cfg.get("text_file"),
        "causal": bool(cfg.causal),
        "seed": cfg.seed,
        "dtype": cfg.dtype,
    }


def probe_memory_bytes(config: ModelConfig, batch_size: int, seq_len: int, itemsize: int) -> int:
    """An estimate of what one probe of `config.n_layer` blocks holds at its peak, beyond the process itself:
    each block's weights and gradients, and the activations its backward pass keeps, about 12·d + 3·d_ff
    values per token (the fused attention kernel keeps no seq_len × seq_len weights; docs/probe.md)."""
    d, d_ff = config.d_model, config.d_ff or 4 * config.d_model
    matrices = FFNS[config.act][0].matrices
    weights = 4 * d * d + matrices * d * d_ff
    activations = batch_size * seq_len * (12 * d + (matrices + 1) * d_ff)
    return itemsize * config.n_layer * (2 * weights + activations)


def available_memory_bytes() -> int:
    """Memory the kernel could give this process now (`MemAvailable`), else all of the machine's."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _load_text(text_file: str | None) -> str:
    """The probe's text: a UTF-8 file, or (None) the default Shakespeare corpus, through `tinylm.data`."""
    from tinylm.data.corpora import load_corpus

    corpus = load_corpus("text", files=text_file) if text_file else load_corpus("shakespeare")
    return corpus.text()


def _title(settings: dict[str, Any]) -> str:
    model = settings["model"]
    input_name = "randn" if settings["input"] == "random" else "text"
    return (
        f"depth probe: d={model['d_model']}, {model['n_head']} heads, {model['init']} init, "
        f"{model['norm_type']} norm, {model['act']}, B={settings['batch_size']}, T={settings['seq_len']}, "
        f"{input_name} input, {'causal mask' if settings['causal'] else 'no mask'}"
    )


def run(cfg: DictConfig) -> list[dict[str, Any]]:
    """Probe as `cfg` (conf/probe.yaml) says; prints the table, writes probe.{md,csv,json,png} to run_dir."""
    settings = _settings(cfg)  # every check before anything is computed or written
    text = _load_text(settings["text_file"]) if settings["input"] == "text" else None
    rows = depth_probe(
        ModelConfig.from_dict(settings["model"]),
        settings["norms"],
        batch_size=settings["batch_size"],
        seq_len=settings["seq_len"],
        seed=settings["seed"],
        causal=settings["causal"],
        text=text,
        dtype=DTYPES[settings["dtype"]],
    )
    title = _title(settings)
    table = format_table(rows, table_depths(settings["depth"], list(cfg.table_depths)))
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "probe.md").write_text(f"{title}\n\n{table}\n", encoding="utf-8")
    write_csv(rows, run_dir / "probe.csv")
    write_json(run_dir / "probe.json", {"settings": settings, "rows": rows})
    plot(rows, run_dir / "probe.png", title)
    print(f"{title}\n\n{table}\n\nall depths: {run_dir / 'probe.csv'} (and .json, .png)")
    return rows
