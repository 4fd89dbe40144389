"""`run(cfg)`: the one place where a Hydra config becomes a training run."""

from __future__ import annotations

import hashlib
import logging
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ProgressBar
from omegaconf import DictConfig, OmegaConf, open_dict

from tinylm import checks
from tinylm.data import CharDataModule, VocabularyError
from tinylm.errors import ConfigError
from tinylm.model import ModelConfig
from tinylm.training.callbacks import TensorBoardHParams, ValidateOnLastStep
from tinylm.training.checkpoints import (
    AtomicCheckpointIO,
    CheckpointError,
    check_resumable,
    checkpoint_callbacks,
    checkpoint_tokenizer,
    last_checkpoint,
    load_module,
    read_checkpoint,
    resume_checkpoint,
)
from tinylm.training.distributed import (
    EffectiveBatch,
    refuse_relaunch_in_sweep,
    shards_parameters,
    slurm_gpus_per_node,
)
from tinylm.training.fault_tolerance import (
    LoggingStepFollowsGlobalStep,
    StopOnNonFiniteLoss,
    StopOnSignal,
    TrainingRandomState,
)
from tinylm.training.module import CharLM, OptimConfig
from tinylm.training.precision import resolve_precision
from tinylm.training.run_record import write_run_record

log = logging.getLogger(__name__)


_NOT_IN_RUN_LABEL = ("ckpt_path", "run_dir", "run_name", "threads", "hydra.")


def run_label(overrides: Sequence[str], max_chars: int = 100) -> str:
    """A run's name from its command-line overrides, e.g. `norm=pre,act=swiglu`, safe as a directory name.

    Group choices (`norm=`, `act=`, `data=`...) come first, in the order given, as they say what the run
    is; dotted keys follow, sorted. Path separators become `_`, and a long name is cut, keeping a hash of
    the whole so that names stay unique.
    """
    kept = [o for o in overrides if not o.lstrip("+~").startswith(_NOT_IN_RUN_LABEL)]
    choices = [o for o in kept if "." not in o.split("=", 1)[0]]
    label = ",".join(choices + sorted(o for o in kept if o not in choices))
    label = label.replace("/", "_").replace("\\", "_") or "default"
    if len(label) > max_chars:
        digest = hashlib.sha1(label.encode()).hexdigest()[:8]
        label = f"{label[: max_chars - 9]}~{digest}"
    return label


# Lets conf/train.yaml name runs and sweep directories with ${run_label:...}.
OmegaConf.register_new_resolver("run_label", run_label, replace=True)
# Lets conf/launcher/slurm.yaml ask for one GPU per rank on GPU runs only.
OmegaConf.register_new_resolver("slurm_gpus_per_node", slurm_gpus_per_node, replace=True)


def run(cfg: DictConfig, extra_callbacks: Sequence[L.Callback] = ()) -> dict[str, Any]:
    """Train as `cfg` says; returns the final metrics (floats), the run directory and the sample text.

    `extra_callbacks` lets tools that drive a real run (benchmarks) observe it without changing it.
    Every input is checked before anything is written: a bad setting, corpus or checkpoint raises a
    `UserError` and leaves the run directory (and every other) as it was. A run that diverges raises
    `TrainingDiverged`; one stopped by SIGINT/SIGTERM saves last.ckpt and raises `TrainingInterrupted`.
    """
    started = time.perf_counter()
    check_settings(cfg)
    cfg = with_resolved_precision(cfg)
    L.seed_everything(cfg.seed, workers=True)
    run_dir = Path(cfg.run_dir)

    ckpt_path = resume_checkpoint(cfg.get("ckpt_path"), run_dir)
    checkpoint = read_checkpoint(ckpt_path) if ckpt_path else None
    # A resumed run must keep the ids it was trained with, so its tokenizer comes from the checkpoint.
    tokenizer = checkpoint_tokenizer(checkpoint) if checkpoint else None
    datamodule = CharDataModule(**OmegaConf.to_container(cfg.data, resolve=True), tokenizer=tokenizer)
    try:
        tokenizer = datamodule.prepare()
    except VocabularyError as err:
        if checkpoint is None:
            raise
        raise CheckpointError(
            f"the corpus has characters {err.unknown!r} that the vocabulary of checkpoint {str(ckpt_path)!r} "
            "lacks; resume on the corpus it was trained on, or drop ckpt_path to train from scratch"
        ) from None

    model_config = {**OmegaConf.to_container(cfg.model, resolve=True), "vocab_size": tokenizer.vocab_size}
    module = CharLM(
        model=model_config,
        optim=OmegaConf.to_container(cfg.optim, resolve=True),
        sample_chars=min(200, int(cfg.sample.chars)),
        compile=bool(cfg.get("compile", False)),
    )
    module.tokenizer = tokenizer
    if checkpoint is not None:
        check_resumable(checkpoint, ckpt_path, module.model_config, int(cfg.trainer.max_steps))
        del checkpoint  # Lightning reads it again to restore everything

    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    hparams = hparams_for_tensorboard(cfg)
    callbacks += [*checkpoint_callbacks(run_dir), TensorBoardHParams(hparams)]
    # First in line: the steps' random stream is stored before StopOnSignal saves a checkpoint, and the last
    # step is known to be the last (should_stop) before the other callbacks decide whether to log.
    callbacks = [TrainingRandomState(), LoggingStepFollowsGlobalStep(), ValidateOnLastStep(), *callbacks]
    callbacks += [*extra_callbacks, StopOnNonFiniteLoss(), StopOnSignal()]
    logger = instantiate(cfg.logger, version=cfg.run_name or "default") if cfg.get("logger") else False
    try:
        trainer = L.Trainer(
            **cfg.trainer,
            callbacks=callbacks,
            logger=logger,
            default_root_dir=str(run_dir),
            plugins=[AtomicCheckpointIO()],
        )
    except (TypeError, ValueError, MisconfigurationException) as err:
        raise ConfigError(f"Lightning rejects the trainer settings: {err}") from None
    if in_multirun():
        refuse_relaunch_in_sweep(trainer)
    batch = EffectiveBatch.of(trainer, datamodule.batch_size, datamodule.block_size)
    hparams.update(batch.hparams())
    # Only now, with every input checked, does the run directory get written. The Trainer knows each
    # process's rank before it starts the others: only rank 0 writes the run's files (Lightning's logger
    # and checkpoints are rank-0-only themselves).
    if trainer.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
        tokenizer.save(run_dir / "tokenizer.json")
        log.info("model: %s parameters (%s without embeddings)", f"{module.model.num_params(False):,}",
                 f"{module.model.num_params():,}")  # fmt: skip
        log.info(batch.describe(module.optim_config.lr))
        log.info("precision: %s", cfg.trainer.precision)

    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)

    metrics: dict[str, Any] = {k: float(v) for k, v in trainer.callback_metrics.items()}
    best = trainer.checkpoint_callback
    if best is not None and best.best_model_score is not None:
        metrics["best/val_loss"] = float(best.best_model_score)
    metrics["step"] = trainer.global_step
    metrics["params"] = module.model.num_params()
    metrics["wall_time_s"] = time.perf_counter() - started
    metrics["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    if trainer.is_global_zero:
        write_run_record(run_dir, "completed", **metrics)
    metrics["run_dir"] = str(run_dir)
    sampler = _whole_model(trainer, module)
    if trainer.is_global_zero and cfg.sample.chars > 0 and sampler is not None:
        metrics["sample"] = sampler.sample(
            int(cfg.sample.chars),
            cfg.sample.prompt,
            cfg.sample.temperature,
            cfg.sample.top_k,
            cfg.sample.seed,
        )
        print(
            f"\n--- sample after {trainer.global_step} steps ---\n{cfg.sample.prompt}{metrics['sample']}\n---"
        )
    return metrics


def in_multirun() -> bool:
    """True inside a job of a Hydra multirun (`-m`)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def check_settings(cfg: DictConfig) -> None:
    """Every setting that needs no data, checked before a corpus is loaded or anything is written."""
    trainer = cfg.trainer
    checks.whole_number(
        "trainer.max_steps",
        trainer.get("max_steps"),
        hint="training windows are an endless stream: max_steps is what ends a run",
    )
    checks.whole_number("seed", cfg.get("seed"), minimum=0)
    try:
        ModelConfig.from_dict({**OmegaConf.to_container(cfg.model, resolve=True), "vocab_size": 1})
    except ConfigError as err:
        # The command line calls these fields model.<name>.
        raise ConfigError(str(err).replace("ModelConfig.", "model.")) from None
    OptimConfig(**OmegaConf.to_container(cfg.optim, resolve=True))


def with_resolved_precision(cfg: DictConfig) -> DictConfig:
    """A copy of `cfg` whose `trainer.precision` is what this machine runs (`auto` resolved), so the saved
    config.yaml and TensorBoard's HParams say which precision a run really used."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.trainer = cfg.trainer.copy()
        cfg.trainer.precision = resolve_precision(
            cfg.trainer.get("precision", "32-true"), cfg.trainer.get("accelerator", "auto")
        )
    return cfg


def _whole_model(trainer: L.Trainer, module: CharLM) -> CharLM | None:
    """The trained model, whole, in this process: a sharded one (FSDP) is whole only in its checkpoint."""
    if not shards_parameters(trainer.strategy):
        return module
    last = last_checkpoint(trainer.default_root_dir)
    return load_module(last) if last.is_file() and trainer.is_global_zero else None


def hparams_for_tensorboard(cfg: DictConfig) -> dict[str, Any]:
    """The choices that tell runs apart, flat, for TensorBoard's HParams tab."""
    model = cfg.model
    return {
        "norm": model.norm,
        "norm_type": model.norm_type,
        "act": model.act,
        "n_layer": model.n_layer,
        "n_head": model.n_head,
        "d_model": model.d_model,
        "d_ff": model.d_ff if model.d_ff is not None else "auto",
        "block_size": model.block_size,
        "qk_norm": model.qk_norm,
        "dropout": model.dropout,
        "lr": cfg.optim.lr,
        "warmup_steps": cfg.optim.warmup_steps,
        "weight_decay": cfg.optim.weight_decay,
        "batch_size": cfg.data.batch_size,
        "max_steps": cfg.trainer.max_steps,
        "precision": str(cfg.trainer.precision),
        "data": cfg.data.source,
        "seed": cfg.seed,
    }
