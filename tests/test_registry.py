"""The registries are the one list of each choice: every entry has its conf file and every conf file an entry,
and a new FFN costs one class and one registry entry (with its conf file) to train through the real config."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

import pytest
import tbparse
import torch
import torch.nn.functional as F
from conftest import REPO, compose_train
from omegaconf import OmegaConf, open_dict
from torch import nn

from tinylm.model import FFNS, GPT, NORMS, PLACEMENTS, ModelConfig
from tinylm.probe.depth import depth_probe, format_table
from tinylm.training.checkpoints import load_module
from tinylm.training.run import run

# conf group -> (the ModelConfig field its files set, the registry of its choices)
GROUPS = {"norm": ("norm", PLACEMENTS), "norm_type": ("norm_type", NORMS), "act": ("act", FFNS)}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_choice_has_its_conf_file_and_every_conf_file_a_choice(group):
    field, registry = GROUPS[group]
    files = sorted((REPO / "conf" / group).glob("*.yaml"))
    assert {path.stem for path in files} == set(registry)
    for path in files:
        # `conf/act/swiglu.yaml` sets model.act=swiglu and nothing else.
        assert path.read_text(encoding="utf-8").startswith("# @package model\n"), path
        assert OmegaConf.to_container(OmegaConf.load(path)) == {field: path.stem}, path


class SquaredReLU(nn.Module):
    """w_out(relu(w_in(x))²) (So et al. 2021, "Primer"): a two-matrix FFN whose layers have new names."""

    matrices = 2

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: Callable[[torch.Tensor], torch.Tensor],
        bias: bool,
        dropout: float,
    ) -> None:
        super().__init__()
        self.w_in = nn.Linear(d_model, d_ff, bias=bias)
        self.w_out = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = activation
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.w_out(self.activation(self.w_in(x)).square()))


def test_a_new_ffn_is_one_class_one_entry_one_conf_file(tmp_path, monkeypatch):
    # The registry entry (setitem undoes it after the test) and the conf file, on Hydra's search path.
    monkeypatch.setitem(FFNS, "relu2", (SquaredReLU, F.relu))
    (tmp_path / "conf" / "act").mkdir(parents=True)
    (tmp_path / "conf" / "act" / "relu2.yaml").write_text("# @package model\nact: relu2\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    overrides = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "act=relu2", "trainer.max_steps=2"]
    cfg = compose_train(run_dir, [*overrides, "trainer.val_check_interval=2", "sample.chars=0"])
    with open_dict(cfg):
        cfg.run_name = "act=relu2"  # the search path would otherwise be part of the TensorBoard run's name
    assert cfg.model.act == "relu2"

    metrics = run(cfg)

    assert json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))["status"] == "completed"
    assert metrics["step"] == 2 and math.isfinite(metrics["loss/val"])
    # The checkpoint rebuilds the model with the new FFN in every block, at the width its two matrices imply.
    model = load_module(run_dir).model
    d = model.config.d_model
    assert model.config.act == "relu2" and model.config.d_ff == 4 * d
    ffns = [block.ffn.sublayer for block in model.blocks]
    assert ffns and all(type(ffn) is SquaredReLU for ffn in ffns)
    assert all(sum(p.numel() for p in ffn.parameters()) == 2 * d * 4 * d + 4 * d + d for ffn in ffns)
    # Two 4·d-wide matrices with biases, as GELU's: the same parameter count as the same model with GELU.
    gelu = GPT(ModelConfig.from_dict({**model.config.to_dict(), "act": "gelu", "d_ff": None}))
    assert metrics["params"] == model.num_params() == gelu.num_params()

    # Its weights reach the training-health curves and the depth probe's table under their own names.
    tags = set(tbparse.SummaryReader(str(run_dir / "tb")).scalars.tag)
    for block in range(1, model.config.n_layer + 1):
        assert {f"training_health/grad_ffn_{name}/block_{block}" for name in ("w_in", "w_out")} <= tags
    probe_config = ModelConfig(d_model=16, n_head=2, n_layer=2, block_size=8, act="relu2")
    header = format_table(depth_probe(probe_config, batch_size=2, seq_len=8), [2]).splitlines()[0]
    assert header.endswith("| ‖∇W_o‖ | ‖∇FFN w_in‖ | ‖∇FFN w_out‖ |")


def test_the_command_reference_lists_every_choice_of_every_group_it_names():
    """docs/cli.md's table of groups: a conf file added without its row (or a row naming a file gone) would
    leave a newcomer with a list that is not the one `train.py --help` prints."""
    groups = {path.name for path in (REPO / "conf").iterdir() if path.is_dir() and any(path.glob("*.yaml"))}
    cells = [line.split("|") for line in (REPO / "docs" / "cli.md").read_text(encoding="utf-8").splitlines()]
    rows = {
        row[1].strip().strip("`"): row[2]
        for row in cells
        if len(row) > 3 and row[1].strip().strip("`") in groups
    }
    assert set(rows) == groups, sorted(groups - set(rows))
    for group, listed in rows.items():
        named = {name for name in re.findall(r"`([^`]+)`", listed) if re.fullmatch(r"[a-z0-9_]+", name)}
        files = {path.stem for path in (REPO / "conf" / group).glob("*.yaml")}
        assert files and files == named, (group, sorted(files - named), sorted(named - files))


def test_the_sweeps_page_says_what_every_preset_sweeps():
    page = (REPO / "docs" / "sweeps.md").read_text(encoding="utf-8")
    one_run = set(re.findall(r"`experiment=([a-z0-9_]+)` is one run", page))
    described = set(re.findall(r"^\| `([a-z0-9_]+)` \|", page, flags=re.MULTILINE)) | one_run
    assert described >= {path.stem for path in (REPO / "conf" / "experiment").glob("*.yaml")}
    assert {"nanogpt_baby", "speedrun"} <= one_run
