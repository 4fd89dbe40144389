"""The depth probe: its measurements, the published picture on a small stack, and scripts/probe.py."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import run_script
from hydra import compose, initialize_config_module
from omegaconf import DictConfig, open_dict
from script_runner import run_script_in_process

from tinylm.model import PLACEMENTS, Block, ModelConfig
from tinylm.model.diagnostics import block_weight_grad_norms, stream_rms, token_spread
from tinylm.probe.depth import build_stack, depth_probe, format_table, run, table_depths

# Small and fast (well under a second), deep enough for the picture: 16 blocks, d=64, T=16.
SMALL = ModelConfig(d_model=64, n_head=4, n_layer=16, block_size=16, init="xavier")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def by_norm(rows: list[dict]) -> dict[str, dict[int, dict]]:
    table: dict[str, dict[int, dict]] = {}
    for row in rows:
        table.setdefault(row["norm"], {})[row["k"]] = row
    return table


@pytest.fixture(scope="module")
def small_probe() -> dict[str, dict[int, dict]]:
    return by_norm(depth_probe(SMALL, list(PLACEMENTS), batch_size=4, seq_len=16))


# --- the measurements -----------------------------------------------------------------------------------


def test_token_spread_is_zero_for_identical_tokens_and_scale_free():
    token = torch.randn(2, 1, 64)
    assert token_spread(token.expand(2, 16, 64)).item() == pytest.approx(0.0, abs=1e-6)
    x = torch.randn(4, 16, 64)
    assert token_spread(7.0 * x).item() == pytest.approx(token_spread(x).item(), rel=1e-5)
    # Adding one vector to every token moves the mean, not the spread; only the stream RMS changes.
    shifted = x + 3.0 * torch.randn(1, 1, 64)
    assert token_spread(shifted).item() * stream_rms(shifted).item() == pytest.approx(
        token_spread(x).item() * stream_rms(x).item(), rel=1e-5
    )


@pytest.mark.parametrize("d_model", [16, 256])
def test_token_spread_of_independent_tokens_is_about_one_whatever_the_width(d_model):
    # Per-feature normalisation: sqrt(1 - 1/T) in expectation, not sqrt(d) times that.
    torch.manual_seed(0)
    spread = token_spread(torch.randn(64, 16, d_model)).item()
    assert spread == pytest.approx(math.sqrt(1 - 1 / 16), rel=0.02)


def test_token_spread_is_taken_within_each_sequence():
    # Two sequences, each collapsed onto its own vector: no spread, although the batch's tokens differ.
    x = torch.randn(2, 1, 32).expand(2, 8, 32)
    assert token_spread(x).item() == pytest.approx(0.0, abs=1e-6)


def test_grad_norms_slice_the_fused_qkv_rows():
    block = Block(ModelConfig(d_model=8, n_head=2, act="swiglu"))
    qkv = block.attn.sublayer.qkv.weight
    qkv.grad = torch.cat([torch.full((8, 8), value) for value in (1.0, 2.0, 3.0)])
    block.attn.sublayer.proj.weight.grad = torch.full((8, 8), 4.0)
    for name in ("gate", "up", "down"):
        layer = getattr(block.ffn.sublayer, name)
        layer.weight.grad = torch.ones_like(layer.weight)
    norms = {name: value.item() for name, value in block_weight_grad_norms(block).items()}
    assert norms["w_q"] == pytest.approx(8.0)  # sqrt(64) * 1
    assert norms["w_k"] == pytest.approx(16.0)
    assert norms["w_v"] == pytest.approx(24.0)
    assert norms["w_o"] == pytest.approx(32.0)
    assert set(norms) == {"w_q", "w_k", "w_v", "w_o", "ffn_gate", "ffn_up", "ffn_down"}
    assert norms["ffn_up"] == pytest.approx(math.sqrt(block.ffn.sublayer.up.weight.numel()))


def test_missing_gradient_reads_nan_not_zero():
    norms = block_weight_grad_norms(Block(ModelConfig(d_model=8, n_head=2)))
    assert all(math.isnan(value.item()) for value in norms.values())


def test_every_placement_gets_the_same_weights():
    # Norms draw no random numbers, so one seed gives every placement the same matrices: the placements
    # then differ in nothing but where their norms sit.
    stacks = {}
    for norm in PLACEMENTS:
        torch.manual_seed(3)
        stacks[norm] = build_stack(ModelConfig(d_model=16, n_head=2, n_layer=3, norm=norm, init="xavier"))
    matrices = {
        norm: [p for name, p in stack.named_parameters() if name.endswith("weight") and p.dim() == 2]
        for norm, stack in stacks.items()
    }
    for norm in PLACEMENTS:
        assert all(torch.equal(a, b) for a, b in zip(matrices["pre"], matrices[norm], strict=True))


def test_probe_is_deterministic_and_leaves_the_global_rng_alone():
    config = ModelConfig(d_model=16, n_head=2, n_layer=3, block_size=8, init="xavier")
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = depth_probe(config, ["pre", "post"], batch_size=2, seq_len=8, seed=5)
    assert torch.equal(torch.get_rng_state(), before)
    assert depth_probe(config, ["pre", "post"], batch_size=2, seq_len=8, seed=5) == first
    assert depth_probe(config, ["pre", "post"], batch_size=2, seq_len=8, seed=6) != first


def test_float32_and_float64_probe_the_same_sample():
    config = ModelConfig(d_model=16, n_head=2, n_layer=3, block_size=8, init="xavier")
    single = depth_probe(config, ["pre"], batch_size=2, seq_len=8, dtype=torch.float32)
    double = depth_probe(config, ["pre"], batch_size=2, seq_len=8, dtype=torch.float64)
    for a, b in zip(single, double, strict=True):
        assert a["token_spread"] == pytest.approx(b["token_spread"], rel=1e-4)
        assert a["grad_w_q"] == pytest.approx(b["grad_w_q"], rel=1e-3)


def test_mask_option_changes_the_attention():
    config = ModelConfig(d_model=16, n_head=2, n_layer=2, block_size=8, init="xavier")
    unmasked = depth_probe(config, batch_size=2, seq_len=8)
    causal = depth_probe(config, batch_size=2, seq_len=8, causal=True)
    assert unmasked[-1]["token_spread"] != pytest.approx(causal[-1]["token_spread"])


def test_text_input_and_gpt2_init_run():
    text = "to be, or not to be, that is the question:\n" * 3
    config = ModelConfig(d_model=16, n_head=2, n_layer=4, block_size=8, init="gpt2")
    rows = depth_probe(config, ["pre"], batch_size=2, seq_len=8, text=text)
    assert [row["k"] for row in rows] == [1, 2, 3, 4]
    assert all(math.isfinite(value) for row in rows for key, value in row.items() if key != "norm")
    with pytest.raises(ValueError, match="fewer than seq_len"):
        depth_probe(config, batch_size=2, seq_len=8, text="short")


def test_unknown_placement_is_named():
    with pytest.raises(ValueError, match=r"unknown placement\(s\) \['nope'\]"):
        depth_probe(SMALL, ["pre", "nope"])


# --- the published picture, on a small stack ------------------------------------------------------------


def check_placement_picture(pre: dict[int, dict], post: dict[int, dict]) -> None:
    """What distinguishes pre-norm from post-norm at init (DESIGN.md's depth probe protocol)."""
    top = max(pre)
    # Post-norm's tokens collapse by orders of magnitude across depth; pre-norm's spread decays slowly.
    assert post[top]["token_spread"] < 0.05 * post[1]["token_spread"]
    assert pre[top]["token_spread"] > 0.3 * pre[1]["token_spread"]
    assert pre[top]["token_spread"] > 10 * post[top]["token_spread"]
    # Post-norm's top attention gets (almost) no query/key gradient; values, output and FFN do.
    for weight in ("grad_w_q", "grad_w_k"):
        assert post[top][weight] < 1e-2 * pre[top][weight]
    for weight in ("grad_w_v", "grad_w_o", "grad_ffn_up", "grad_ffn_down"):
        assert 0.1 < post[top][weight] / pre[top][weight] < 10
    # Pre-norm's stream grows with depth, roughly like sqrt(k); post-norm's is renormalised to 1.
    rms = [pre[k]["stream_rms"] for k in sorted(pre)]
    assert all(later > earlier for earlier, later in itertools.pairwise(rms))
    assert 1.5 < pre[top]["stream_rms"] / pre[top // 4]["stream_rms"] < 3.0  # sqrt(4) = 2
    assert all(abs(post[k]["stream_rms"] - 1.0) < 1e-3 for k in post)


def test_small_stack_shows_the_published_picture(small_probe):
    check_placement_picture(pre=small_probe["pre"], post=small_probe["post"])


def test_picture_check_rejects_swapped_placements(small_probe):
    # The check above can fail: with the labels swapped, it does.
    with pytest.raises(AssertionError):
        check_placement_picture(pre=small_probe["post"], post=small_probe["pre"])


def test_norms_on_the_branch_keep_tokens_apart(small_probe):
    # Sandwich and on-branch placements leave the identity path alone, like pre-norm: no collapse.
    for norm in ("sandwich", "on_branch"):
        assert small_probe[norm][16]["token_spread"] > 0.3
        assert small_probe[norm][16]["grad_w_q"] > 1e-3


# --- reporting and the script ----------------------------------------------------------------------------


def test_table_has_the_chosen_depths_and_the_last():
    assert table_depths(32, [1, 8, 16, 32]) == [1, 8, 16, 32]
    assert table_depths(12, [1, 8, 16, 32]) == [1, 8, 12]
    rows = depth_probe(ModelConfig(d_model=16, n_head=2, n_layer=3, block_size=8), ["pre", "post"], seq_len=8)
    lines = format_table(rows, [1, 3]).splitlines()
    assert lines[0].startswith("| norm | k | stream RMS | token spread | ‖∇W_q‖")
    assert [line.split("|")[1:3] for line in lines[2:]] == [
        [" pre ", " 1 "],
        [" pre ", " 3 "],
        [" post ", " 1 "],
        [" post ", " 3 "],
    ]


def compose_probe(run_dir: Path, overrides: list[str]) -> DictConfig:
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        cfg = compose("probe", overrides=overrides)
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)  # outside @hydra.main there is no Hydra runtime to choose it
    return cfg


SHRUNK_PROBE = ["depth=4", "model.d_model=32", "seq_len=8", "batch_size=2", "table_depths=[1,2]"]


def test_norm_choice_is_the_training_config_group(tmp_path):
    cfg = compose_probe(tmp_path, [*SHRUNK_PROBE, "norm=post", "act=swiglu", "norm_type=rms"])
    rows = run(cfg)
    assert {row["norm"] for row in rows} == {"post"}
    assert "grad_ffn_gate" in rows[0]
    settings = json.loads((tmp_path / "probe.json").read_text())["settings"]
    assert (settings["model"]["norm_type"], settings["model"]["act"]) == ("rms", "swiglu")
    assert settings["model"]["n_layer"] == 4


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("norms=[pre,nope]", "unknown placement"),
        ("depth=0", "depth=0 must be a positive whole number"),
        ("input=noise", "input='noise' is not one of 'random', 'text'"),
        ("model.d_model=30", "divisible by n_head"),
    ],
)
def test_bad_settings_fail_before_writing_anything(tmp_path, override, message):
    with pytest.raises(ValueError, match=message):
        run(compose_probe(tmp_path / "run", [*SHRUNK_PROBE, override]))
    assert not (tmp_path / "run").exists()


def _check_outputs(run_dir: Path, norms: list[str], depth: int) -> None:
    with open(run_dir / "probe.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["norm"], int(row["k"])) for row in rows] == [
        (n, k) for n in norms for k in range(1, depth + 1)
    ]
    assert all(float(row["grad_w_q"]) > 0 and float(row["token_spread"]) > 0 for row in rows)
    document = json.loads((run_dir / "probe.json").read_text(encoding="utf-8"))
    assert document["settings"]["norms"] == norms
    assert len(document["rows"]) == len(rows)
    assert document["rows"][0]["stream_rms"] == pytest.approx(float(rows[0]["stream_rms"]))
    png = (run_dir / "probe.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 10_000
    assert (run_dir / "probe.md").read_text(encoding="utf-8").count("\n| ") == 1 + 3 * len(
        norms
    )  # header, k = 1, 2 and the last


def test_probe_script_compares_placements_in_one_run(tmp_path):
    result = run_script(
        "probe.py",
        *SHRUNK_PROBE,
        f"norms=[{','.join(PLACEMENTS)}]",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(f"| {norm} | 4 |" in result.stdout for norm in PLACEMENTS)
    _check_outputs(tmp_path, list(PLACEMENTS), depth=4)


def test_probe_script_multirun_writes_one_directory_per_placement(tmp_path):
    result = run_script_in_process(
        "probe.py", "-m", *SHRUNK_PROBE, "norm=pre,post", f"hydra.sweep.dir={tmp_path}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(runs) == 2
    assert runs[0].name.startswith("0_") and "norm=pre" in runs[0].name
    assert runs[1].name.startswith("1_") and "norm=post" in runs[1].name
    for run_dir, norm in zip(runs, ["pre", "post"], strict=True):
        _check_outputs(run_dir, [norm], depth=4)
