"""Scale-out: data-parallel training through Lightning's strategies, on the real, shrunk Hydra config.

A real 2-process DDP run on CPU (gloo) through `scripts/train.py` is the slow test at the end; the fast
ones check the pieces it relies on: per-rank training windows, unpadded validation shards, rank-0-only
files, the refusal of sweeps that DDP would re-run, and the ranks Lightning takes from SLURM (a real
cluster's jobs are in tests/test_slurm.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as L
import numpy as np
import pytest
import tbparse
import torch
from conftest import SHRINK, compose_train, run_script
from hydra import compose, initialize_config_module
from lightning.fabric.utilities import rank_zero as fabric_rank_zero
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy
from lightning.pytorch.utilities import rank_zero as pytorch_rank_zero
from omegaconf import OmegaConf
from script_runner import run_script_in_process
from torch.utils.data import DistributedSampler

from tinylm.data import (
    CharDataModule,
    DataConfig,
    FixedWindows,
    RandomWindows,
    TooFewWindowsError,
    UnpaddedDistributedSampler,
)
from tinylm.inference.trained import load_model
from tinylm.layout import read_checkpoint, read_run_record
from tinylm.model.sampling import sample_text
from tinylm.training.distributed import (
    EffectiveBatch,
    relaunches_script,
    shards_parameters,
)
from tinylm.training.early_checks import check_before_imports
from tinylm.training.module import CharLM
from tinylm.training.optimizers import unwrapped_name, weight_decay_groups
from tinylm.training.precision import resolve_precision
from tinylm.training.run import run
from tinylm.training.settings import trainer_settings


def _tokens(n: int = 5000) -> np.ndarray:
    return np.arange(n) % 61


def _stub_trainer(rank: int, world_size: int = 2, step: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        global_rank=rank, world_size=world_size, global_step=step, accumulate_grad_batches=1
    )


@pytest.fixture
def restore_rank_zero(monkeypatch):
    """Building a Trainer for another rank sets Lightning's process-wide rank; put it back afterwards."""
    for holder in {fabric_rank_zero.rank_zero_only, pytorch_rank_zero.rank_zero_only}:
        monkeypatch.setattr(holder, "rank", getattr(holder, "rank", 0))


# --- training windows: every rank its own stream ------------------------------------------------------


def test_two_ranks_draw_different_windows_at_the_same_step():
    tokens = _tokens()
    rank0 = RandomWindows(tokens, block_size=16, batch_size=8, seed=1337, rank=0)
    rank1 = RandomWindows(tokens, block_size=16, batch_size=8, seed=1337, rank=1)
    for step in range(20):
        inputs0, _ = rank0.batch(step)
        inputs1, _ = rank1.batch(step)
        assert not torch.equal(inputs0, inputs1), step
        # Each stream is reproducible: the same rank at the same step draws the same windows again.
        assert torch.equal(inputs0, RandomWindows(tokens, 16, 8, 1337, rank=0).batch(step)[0])


def test_each_rank_dataloader_starts_its_own_stream(tmp_path):
    file = tmp_path / "corpus.txt"
    file.write_text("".join(chr(ord("a") + (i * 7) % 26) for i in range(4000)), encoding="utf-8")
    datamodule = CharDataModule(
        DataConfig(source="text", files=str(file), block_size=16, batch_size=4, seed=7)
    )
    datamodule.prepare()

    first_batches = []
    for rank in (0, 1):
        datamodule.trainer = _stub_trainer(rank, step=5)
        inputs, targets = next(iter(datamodule.train_dataloader()))
        # Rank r at step 5 continues its own stream at batch 5 (as after a resume).
        expected = RandomWindows(datamodule.train_tokens, 16, 4, 7, rank).batch(5)
        assert torch.equal(inputs, expected[0]) and torch.equal(targets, expected[1])
        first_batches.append(inputs)
    assert not torch.equal(*first_batches)


# --- validation: every window once over all ranks ----------------------------------------------------


@pytest.mark.parametrize(("windows", "world_size"), [(5, 2), (9, 2), (7, 3), (4, 4), (8, 2)])
def test_validation_shards_cover_every_window_exactly_once(windows, world_size):
    dataset = FixedWindows(_tokens(), block_size=16, max_windows=windows)
    assert len(dataset) == windows
    shards = [list(UnpaddedDistributedSampler(dataset, world_size, rank)) for rank in range(world_size)]
    assert sorted(i for shard in shards for i in shard) == list(range(windows))
    for rank, shard in enumerate(shards):
        assert len(UnpaddedDistributedSampler(dataset, world_size, rank)) == len(shard) >= 1
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_torch_distributed_sampler_would_count_a_window_twice():
    # Why tinylm shards validation itself: torch pads 5 windows on 2 ranks to 6 by repeating one.
    dataset = FixedWindows(_tokens(), block_size=16, max_windows=5)
    padded = [i for rank in (0, 1) for i in DistributedSampler(dataset, 2, rank, shuffle=False)]
    assert len(padded) == 6 and len(set(padded)) == 5


def test_fewer_validation_windows_than_ranks_is_a_clear_error():
    dataset = FixedWindows(_tokens(), block_size=16, max_windows=3)
    with pytest.raises(TooFewWindowsError, match=r"3 validation windows cannot be shared by 4 processes"):
        UnpaddedDistributedSampler(dataset, 4, 0)


def test_val_dataloader_shards_only_when_distributed(tmp_path):
    file = tmp_path / "corpus.txt"
    file.write_text("the quick brown fox jumps over the lazy dog\n" * 200, encoding="utf-8")
    datamodule = CharDataModule(
        DataConfig(source="text", files=str(file), block_size=16, batch_size=2, val_windows=5)
    )
    datamodule.prepare()

    datamodule.trainer = _stub_trainer(0, world_size=1)
    assert len(datamodule.val_dataloader().dataset) == 5
    assert not isinstance(datamodule.val_dataloader().sampler, DistributedSampler)

    seen = []
    for rank in (0, 1):
        datamodule.trainer = _stub_trainer(rank)
        loader = datamodule.val_dataloader()
        # A DistributedSampler subclass, so Lightning keeps it instead of adding its own padded one.
        assert isinstance(loader.sampler, UnpaddedDistributedSampler)
        seen += [inputs for inputs, _ in loader]
    windows = torch.cat(seen)
    assert len(windows) == 5 and len({tuple(w.tolist()) for w in windows}) == 5


# --- effective batch ------------------------------------------------------------------------------------


def test_effective_batch_counts_every_rank_and_accumulation():
    trainer = SimpleNamespace(world_size=4, accumulate_grad_batches=3)
    batch = EffectiveBatch.of(trainer, batch_size=12, block_size=64)
    assert batch.windows == 4 * 12 * 3 == 144
    assert batch.chars == 144 * 64
    assert batch.hparams() == {"world_size": 4, "accumulate_grad_batches": 3, "effective_batch_size": 144}
    assert batch.describe(1e-3).startswith("effective batch 144 windows (9,216 chars) per optimizer step")
    assert "4 process(es) x 12 windows x 3 accumulated; peak lr 0.001" in batch.describe(1e-3)


def test_single_process_run_records_its_effective_batch(tmp_path, caplog):
    cfg = compose_train(tmp_path, ["trainer.max_steps=2", "+trainer.accumulate_grad_batches=2"])
    with caplog.at_level("INFO", logger="tinylm.training.run"):
        run(cfg)
    assert "effective batch 8 windows (256 chars) per optimizer step = 1 process(es) x 4 windows x 2" in (
        caplog.text
    )
    record = read_run_record(tmp_path)
    assert (record["world_size"], record["accumulate_grad_batches"], record["effective_batch_size"]) == (
        1,
        2,
        8,
    )


# --- FSDP (GPU only: composed and unit-checked here, not run) ------------------------------------------


def test_fsdp_preset_composes_a_sharded_gpu_trainer():
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        cfg = compose("train", overrides=["trainer=fsdp", "trainer.num_nodes=2", "trainer.devices=4"])
    assert cfg.trainer.strategy == "fsdp"
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == ("gpu", "bf16-mixed")
    assert cfg.compile is False  # compile with FSDP's wrapping is untried
    assert (cfg.trainer.num_nodes, cfg.trainer.devices) == (2, 4)
    assert shards_parameters(FSDPStrategy()) and not shards_parameters(DDPStrategy())


def test_weight_decay_groups_do_not_depend_on_parameter_shapes_at_optimizer_time():
    # FSDP builds the optimizer after sharding, when every parameter is a flat 1-D shard.
    module = CharLM(model={"vocab_size": 20, "n_layer": 1, "n_head": 2, "d_model": 16, "block_size": 8})
    matrices = {id(p) for p in module.model.parameters() if p.dim() >= 2}
    others = {id(p) for p in module.model.parameters() if p.dim() < 2}
    assert matrices and others
    with torch.no_grad():
        for parameter in module.model.parameters():
            parameter.data = parameter.data.flatten()
    decayed, kept = module.configure_optimizers().param_groups
    assert {id(p) for p in decayed["params"]} == matrices and decayed["weight_decay"] == 0.1
    assert {id(p) for p in kept["params"]} == others and kept["weight_decay"] == 0.0


def test_weight_decay_follows_wrapped_names_and_refuses_names_it_cannot_map():
    module = CharLM(model={"vocab_size": 20, "n_layer": 1, "n_head": 2, "d_model": 16, "block_size": 8})
    named = list(module.model.named_parameters())
    # As FSDP with activation checkpointing names them.
    wrapped = [(f"_fsdp_wrapped_module._checkpoint_wrapped_module.{n}", p) for n, p in named]
    decayed, kept = weight_decay_groups([(unwrapped_name(n), p) for n, p in wrapped], module.decayed, 0.1)
    assert {id(p) for p in decayed["params"]} == {id(p) for _, p in named if p.dim() >= 2}
    assert len(decayed["params"]) + len(kept["params"]) == len(named)
    renamed = [(f"_sharded_by_a_new_wrapper.{n}", p) for n, p in named]
    with pytest.raises(RuntimeError, match="match no parameter of the model"):
        weight_decay_groups([(unwrapped_name(n), p) for n, p in renamed], module.decayed, 0.1)


# --- ranks > 0 write nothing ---------------------------------------------------------------------------


@pytest.mark.parametrize("local_rank", [0, 1])
def test_only_rank_zero_writes_the_run_files(tmp_path, monkeypatch, restore_rank_zero, local_rank):
    # The process Lightning starts for rank 1 of `trainer=ddp trainer.devices=2` is told its rank by
    # LOCAL_RANK; fit itself is skipped here (the slow test below runs the real thing).
    if local_rank:
        monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    else:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(L.Trainer, "fit", lambda *args, **kwargs: None)
    run_dir = tmp_path / "run"
    run_dir.mkdir()  # as Hydra makes it in every process
    metrics = run(compose_train(run_dir, ["trainer=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]))

    written = sorted(p.name for p in run_dir.iterdir())
    if local_rank == 0:
        assert written == ["config.yaml", "metrics.json", "tokenizer.json"]
        assert "sample" in metrics
    else:
        assert written == []
        assert "sample" not in metrics


# --- Hydra sweeps and DDP ---------------------------------------------------------------------------------


def test_sweep_with_ddp_that_would_relaunch_itself_is_refused(tmp_path, monkeypatch):
    sweep_dir = tmp_path / "sweep"
    monkeypatch.chdir(tmp_path)
    result = run_script_in_process(
        "train.py",
        "-m",
        *SHRINK,
        "trainer=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        "act=gelu,relu",
        f"hydra.sweep.dir={sweep_dir}",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2
    # A ScaleOutError is a UserError: one line on stderr (tinylm.cli).
    assert "error: -m (a sweep) with trainer.strategy=DDPStrategy on 2 devices" in result.stderr
    assert "launcher=slurm" in output
    # Refused before any rank was started: no second sweep, nothing trained, no rank-1 log.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]
    assert output.count("Launching 2 jobs locally") == 1
    assert not list(sweep_dir.rglob("*.ckpt"))
    assert not list(sweep_dir.rglob("train_ddp_process_*"))
    assert not list(sweep_dir.rglob("tokenizer.json"))


# --- SLURM: the ranks of a multi-node job (a real cluster runs jobs in tests/test_slurm.py) ---------------


def test_in_a_slurm_task_lightning_takes_the_rank_from_slurm(monkeypatch, restore_rank_zero):
    # Task 5 of the 2 x 4 job above (node 1, local rank 1), as submitit starts it with srun.
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                *SHRINK,
                "trainer=ddp",
                "trainer.accelerator=cpu",
                "trainer.num_nodes=2",
                "trainer.devices=4",
            ],
        )
    slurm_env = {
        "SLURM_NTASKS": "8",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_NNODES": "2",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_JOB_ID": "1234",
        "SLURM_JOB_NAME": "train",
        "SLURM_NODELIST": "node[1-2]",
    }
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    trainer = L.Trainer(
        **trainer_settings(OmegaConf.to_container(cfg.trainer), check_before_imports(cfg).steps), logger=False
    )
    assert (trainer.global_rank, trainer.local_rank, trainer.node_rank, trainer.world_size) == (5, 1, 1, 8)
    assert not trainer.is_global_zero
    assert not relaunches_script(trainer)  # so a sweep through launcher=slurm is not refused


def test_without_a_scheduler_lightning_relaunches_ddp(monkeypatch, restore_rank_zero):
    for key in ("LOCAL_RANK", "SLURM_NTASKS", "SLURM_JOB_NAME", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        cfg = compose("train", overrides=[*SHRINK, "trainer=ddp", "trainer.accelerator=cpu"])
    trainer = L.Trainer(
        **trainer_settings(OmegaConf.to_container(cfg.trainer), check_before_imports(cfg).steps), logger=False
    )
    assert relaunches_script(trainer)
    single = L.Trainer(accelerator="cpu", devices=1, logger=False)
    assert not relaunches_script(single)


# --- the real thing: two processes, gloo, through scripts/train.py ------------------------------------

DDP_STEPS = 30
DDP_OVERRIDES = [
    *SHRINK,
    "trainer=ddp",
    "trainer.devices=2",
    "trainer.accelerator=cpu",
    f"trainer.max_steps={DDP_STEPS}",
    "trainer.val_check_interval=10",
    "optim.warmup_steps=5",
    # 9 windows on 2 ranks: shards of 5 and 4, i.e. 2 batches of 4 on rank 0 and 1 on rank 1.
    "data.val_windows=9",
    # The checks below replay the run in one fp32 process to 1e-4 / 1e-5, so the DDP run trains in fp32 too
    # (`auto` picks bf16 on a bf16-capable CPU: test_ddp_trains_at_the_default_precision runs that).
    "trainer.precision=32-true",
]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("ddp")
    run_dir = cwd / "run"
    result = run_script("train.py", *DDP_OVERRIDES, f"hydra.run.dir={run_dir}", cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return SimpleNamespace(cwd=cwd, run_dir=run_dir, result=result)


def _values(scalars, tag: str) -> dict[int, float]:
    rows = scalars[scalars.tag == tag]
    return {int(s): float(v) for s, v in zip(rows.step, rows.value, strict=True)}


def _initial_module(config: dict) -> CharLM:
    """The model run(cfg) starts from: the same seed, then the same constructor."""
    checkpoint = read_checkpoint(Path(config["run_dir"]) / "checkpoints" / "last.ckpt").contents
    L.seed_everything(config["seed"])
    hparams = checkpoint["hyper_parameters"]
    return CharLM(model=hparams["model"], optim=hparams["optim"], sample_chars=0)


def _train_in_one_process(config: dict, train_tokens: torch.Tensor, ranks: tuple[int, ...]) -> CharLM:
    """Replay DDP by hand: each step averages the gradient over the windows `ranks` drew for that step."""
    module = _initial_module(config)
    optimizer = module.configure_optimizers()
    block_size, batch_size = config["model"]["block_size"], config["data"]["batch_size"]
    streams = [RandomWindows(train_tokens, block_size, batch_size, config["seed"], r) for r in ranks]
    for step in range(DDP_STEPS):
        for group in optimizer.param_groups:
            group["lr"] = module.learning_rate(step)
        batches = [stream.batch(step) for stream in streams]
        inputs = torch.cat([b[0] for b in batches])
        targets = torch.cat([b[1] for b in batches])
        _, loss = module.model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.model.parameters(), config["trainer"]["gradient_clip_val"])
        optimizer.step()
        optimizer.zero_grad()
    return module


@pytest.mark.slow
def test_ddp_run_writes_one_run_directory(ddp_run):
    # Nothing beside the run directory: no per-rank or time-stamped directories from the re-run rank.
    assert sorted(p.name for p in ddp_run.cwd.iterdir()) == ["run"]
    run_dir = ddp_run.run_dir
    # train_ddp_process_1.log is rank 1's Python log: Lightning names that rank's Hydra job so.
    assert sorted(p.name for p in run_dir.iterdir()) == [
        ".hydra",
        "checkpoints",
        "config.yaml",
        "metrics.json",
        "tb",
        "tokenizer.json",
        "train.log",
        "train_ddp_process_1.log",
    ]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert len(list((run_dir / "tb").glob("events.out.tfevents.*"))) == 1
    assert read_checkpoint(run_dir / "checkpoints" / "last.ckpt").contents["global_step"] == DDP_STEPS

    stdout = ddp_run.result.stdout
    assert stdout.count(f"--- sample after {DDP_STEPS} steps ---") == 1  # printed by rank 0 only
    assert stdout.count("effective batch 8 windows (256 chars) per optimizer step = 2 process(es)") == 1


@pytest.mark.slow
def test_ddp_run_logs_a_decreasing_loss_and_its_effective_batch(ddp_run):
    tb_run = ddp_run.run_dir / "tb"
    reader = tbparse.SummaryReader(str(tb_run))
    train, val = _values(reader.scalars, "loss/train"), _values(reader.scalars, "loss/val")
    assert sorted(train) == list(range(DDP_STEPS))
    assert sorted(val) == [10, 20, 30]
    assert val[10] > val[20] > val[30]
    first, last = [sum(train[s] for s in steps) / 5 for steps in (range(5), range(DDP_STEPS - 5, DDP_STEPS))]
    assert last < first - 0.3

    record = read_run_record(ddp_run.run_dir)
    assert record["world_size"] == 2 and record["effective_batch_size"] == 8


@pytest.mark.slow
def test_ddp_trains_on_both_ranks_windows_with_averaged_gradients(ddp_run):
    config = OmegaConf.to_container(OmegaConf.load(ddp_run.run_dir / "config.yaml"))
    # The run's windows are the model's context: data takes model.block_size (training/settings.py).
    datamodule = CharDataModule(DataConfig(**config["data"], block_size=config["model"]["block_size"]))
    datamodule.prepare()
    train_tokens = datamodule.train_tokens
    trained = read_checkpoint(ddp_run.run_dir / "checkpoints" / "last.ckpt").contents["state_dict"]

    def largest_difference(module: CharLM) -> float:
        state = module.state_dict()
        return max(float((state[k] - trained[k]).abs().max()) for k in trained)

    both = largest_difference(_train_in_one_process(config, train_tokens, ranks=(0, 1)))
    rank0_only = largest_difference(_train_in_one_process(config, train_tokens, ranks=(0,)))
    assert both < 1e-4, both
    assert rank0_only > 100 * both  # had both ranks drawn the same windows, this would match instead


@pytest.mark.slow
def test_ddp_trains_at_the_default_precision(tmp_path):
    overrides = [o for o in DDP_OVERRIDES if not o.startswith("trainer.precision=")]
    run_dir = tmp_path / "run"
    result = run_script(
        "train.py", *overrides, "trainer.max_steps=4", f"hydra.run.dir={run_dir}", cwd=tmp_path, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert OmegaConf.load(run_dir / "config.yaml").trainer.precision == resolve_precision("auto", "cpu")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["step"] == 4
    assert math.isfinite(metrics["loss/train"]) and math.isfinite(metrics["loss/val"])


@pytest.mark.slow
def test_ddp_val_loss_is_the_mean_over_every_window_once(ddp_run):
    config = OmegaConf.load(ddp_run.run_dir / "config.yaml")
    block_size = config.model.block_size
    datamodule = CharDataModule(DataConfig(**OmegaConf.to_container(config.data), block_size=block_size))
    datamodule.prepare()
    windows = FixedWindows(datamodule.val_tokens, block_size, config.data.val_windows)
    assert len(windows) == 9

    model = load_model(ddp_run.run_dir / "checkpoints" / "last.ckpt").gpt
    inputs = torch.stack([windows[i][0] for i in range(len(windows))])
    targets = torch.stack([windows[i][1] for i in range(len(windows))])
    with torch.no_grad():
        _, single_process_loss = model(inputs, targets)

    tb_run = ddp_run.run_dir / "tb"
    logged = _values(tbparse.SummaryReader(str(tb_run)).scalars, "loss/val")[DDP_STEPS]
    assert logged == pytest.approx(float(single_process_loss), rel=1e-5)


@pytest.mark.slow
def test_ddp_checkpoint_samples_in_a_single_process(ddp_run, tmp_path):
    result = run_script(
        "sample.py", f"ckpt={ddp_run.run_dir}", "prompt=ROMEO", "chars=30", "seed=3", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ROMEO")
    model = load_model(ddp_run.run_dir)
    text = sample_text(model.gpt, model.tokenizer, 30, "ROMEO", temperature=0.8, top_k=None, seed=3)
    assert result.stdout == "ROMEO" + text + "\n"
    with torch.no_grad():
        assert math.isfinite(float(model.gpt(torch.zeros(1, 4, dtype=torch.long))[0].sum()))
