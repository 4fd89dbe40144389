"""`run(cfg)`: the one place where a Hydra config becomes a training run."""

from __future__ import annotations

import logging
import math
import resource
import time
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.callbacks import ProgressBar
from omegaconf import DictConfig, OmegaConf, open_dict

from tinylm import checks
from tinylm.data import CharDataModule, CharTokenizer, VocabularyError
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
)
from tinylm.training.fault_tolerance import (
    LoggingStepFollowsGlobalStep,
    StopOnNonFiniteLoss,
    StopOnSignal,
    TrainingRandomState,
)
from tinylm.training.module import (
    BEST_VAL_LOSS,
    LEARNING_RATE,
    TRAIN_LOSS,
    VAL_BPC,
    VAL_LOSS,
    CharLM,
    OptimConfig,
)
from tinylm.training.precision import describe_precision, resolve_precision
from tinylm.training.resolvers import NOT_IN_RUN_LABEL
from tinylm.training.run_dir import exclusive, point_latest_at, save_hydra_record
from tinylm.training.run_record import write_run_record

log = logging.getLogger(__name__)


def run(cfg: DictConfig, extra_callbacks: Sequence[L.Callback] = ()) -> dict[str, Any]:
    """Train as `cfg` says; returns the final metrics (floats), the run directory and the sample text.

    `extra_callbacks` let tools (benchmarks) observe a real run. Bad input raises a `UserError` before
    anything is written; training raises `TrainingDiverged`, or `TrainingInterrupted` after saving last.ckpt
    (docs/errors.md).
    """
    with holding(cfg.run_dir):
        return prepare(cfg, extra_callbacks).fit()


def holding(run_dir: str | Path) -> AbstractContextManager[None]:
    """Hold the run directory for this run (`tinylm.training.run_dir.exclusive`). Only rank 0 writes the run's
    files; the ranks Lightning starts share its directory."""
    return exclusive(run_dir) if rank_zero_only.rank == 0 else nullcontext()


@dataclass
class PreparedRun:
    """A run that has passed every check and written nothing yet."""

    cfg: DictConfig  # precision resolved
    run_dir: Path
    datamodule: CharDataModule
    module: CharLM
    trainer: L.Trainer
    ckpt_path: Path | None
    precision_reason: str
    start_step: int  # the checkpoint's step on a resume

    def fit(self) -> dict[str, Any]:
        cfg, run_dir, module, trainer = self.cfg, self.run_dir, self.module, self.trainer
        started = time.perf_counter()
        batch = EffectiveBatch.of(trainer, self.datamodule.batch_size, self.datamodule.block_size)
        if trainer.is_global_zero:
            run_dir.mkdir(parents=True, exist_ok=True)
            save_hydra_record(run_dir, cfg)
            OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
            module.tokenizer.save(run_dir / "tokenizer.json")
            if cfg.get("latest_link") and not in_multirun():
                point_latest_at(cfg.latest_link, run_dir)
            log.info("model: %s parameters (%s without embeddings)", f"{module.model.num_params(False):,}",
                     f"{module.model.num_params():,}")  # fmt: skip
            log.info(batch.describe(module.optim_config.lr))
            log.info("precision: %s; seed %s", self.precision_reason, cfg.seed)

        with warnings.catch_warnings():
            if self.ckpt_path is not None:
                # Resuming continues in the run's own checkpoint directory, by design: not worth a warning.
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
            trainer.fit(module, datamodule=self.datamodule, ckpt_path=self.ckpt_path, weights_only=True)

        metrics: dict[str, Any] = {k: float(v) for k, v in trainer.callback_metrics.items()}
        best = trainer.checkpoint_callback
        if best is not None and best.best_model_score is not None:
            metrics[BEST_VAL_LOSS] = float(best.best_model_score)
        metrics["step"] = trainer.global_step
        metrics["params"] = module.model.num_params()
        metrics.update(batch.hparams())  # world_size, accumulate_grad_batches, effective_batch_size
        metrics["wall_time_s"] = time.perf_counter() - started
        steps_now = trainer.global_step - self.start_step
        metrics["chars_per_s"] = steps_now * batch.chars / metrics["wall_time_s"]
        metrics["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
        if trainer.is_global_zero:
            write_run_record(run_dir, "completed", **metrics)
        metrics["run_dir"] = str(run_dir)
        sampler = _whole_model(trainer, module)
        if trainer.is_global_zero and cfg.sample.chars > 0 and sampler is not None:
            prompt = sample_prompt(cfg, module.tokenizer)
            metrics["sample"] = sampler.sample(
                int(cfg.sample.chars), prompt, cfg.sample.temperature, cfg.sample.top_k, cfg.sample.seed
            )
            print(f"\n--- sample after {trainer.global_step} steps ---\n{prompt}{metrics['sample']}\n---")
        if trainer.is_global_zero:
            print(summary_line(metrics, run_dir, cfg), flush=True)
        return metrics


def prepare(cfg: DictConfig, extra_callbacks: Sequence[L.Callback] = ()) -> PreparedRun:
    """Check every setting, read the corpus and the checkpoint, build the model and the Trainer: everything
    that can refuse the run, and nothing that writes into it."""
    check_settings(cfg)
    requested = cfg.trainer.get("precision", "32-true")
    cfg = with_resolved_precision(cfg)
    precision_reason = describe_precision(
        requested, cfg.trainer.precision, cfg.trainer.get("accelerator", "auto")
    )
    L.seed_everything(cfg.seed, workers=True, verbose=False)  # logged once the run may write its log
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
    sample_prompt(cfg, tokenizer)  # a prompt the model cannot read is refused now, not after training

    model_config = {**OmegaConf.to_container(cfg.model, resolve=True), "vocab_size": tokenizer.vocab_size}
    module = CharLM(
        model=model_config,
        optim=OmegaConf.to_container(cfg.optim, resolve=True),
        sample_chars=min(200, int(cfg.sample.chars)),
        compile=bool(cfg.get("compile", False)),
    )
    module.tokenizer = tokenizer
    start_step = 0
    if checkpoint is not None:
        check_resumable(checkpoint, ckpt_path, module.model_config, int(cfg.trainer.max_steps))
        start_step = int(checkpoint.get("global_step", 0))
        del checkpoint  # Lightning reads it again to restore everything

    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    callbacks += [*checkpoint_callbacks(run_dir), TensorBoardHParams(hparams_for_tensorboard(cfg))]
    # First in line: the steps' random stream is stored before StopOnSignal saves a checkpoint, and the last
    # step is known to be the last (should_stop) before the other callbacks decide whether to log.
    callbacks = [TrainingRandomState(), LoggingStepFollowsGlobalStep(), ValidateOnLastStep(), *callbacks]
    callbacks += [*extra_callbacks, StopOnNonFiniteLoss(), StopOnSignal()]
    # A sweep's job directories already carry the run's name: its events go straight into <job>/tb.
    version = "" if in_multirun() else (cfg.run_name or "default")
    logger = instantiate(cfg.logger, version=version) if cfg.get("logger") else False
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
    datamodule.check_validation_shards(trainer.world_size)
    return PreparedRun(cfg, run_dir, datamodule, module, trainer, ckpt_path, precision_reason, start_step)


def sample_prompt(cfg: DictConfig, tokenizer: CharTokenizer) -> str:
    """The prompt of the sample printed after training: `sample.prompt`, or the tokenizer's default."""
    prompt = cfg.sample.get("prompt")
    if prompt is None:
        return tokenizer.default_prompt
    try:
        tokenizer.encode(str(prompt))
    except VocabularyError as err:
        raise ConfigError(
            f"sample.prompt has characters the corpus does not: {err.unknown!r}; use only characters of the "
            f"corpus ({tokenizer.vocab_size} characters), or leave sample.prompt unset"
        ) from None
    return str(prompt)


def summary_line(metrics: dict[str, Any], run_dir: Path, cfg: DictConfig) -> str:
    """How the run ended, in one line: what it reached, how long it took, and where it is."""
    loss, best = metrics.get(VAL_LOSS), metrics.get(BEST_VAL_LOSS)
    minutes, seconds = divmod(round(metrics["wall_time_s"]), 60)
    parts = [f"{metrics['step']} steps in {minutes}m{seconds:02d}s ({metrics['chars_per_s']:,.0f} chars/s)"]
    if loss is not None:
        parts.append(f"val loss {loss:.4f} nats/char = {loss / math.log(2):.3f} bits/char")
    if best is not None:
        parts.append(f"best {best:.4f}")
    parts.append(f"checkpoint {last_checkpoint(run_dir)}")
    if cfg.get("logger"):
        parts.append(f"tensorboard --logdir {run_dir / 'tb'}")
    return "done: " + "; ".join(parts)


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
    # In optimizer steps: an endless stream has no epochs to take a fraction of.
    checks.whole_number("trainer.val_check_interval", trainer.get("val_check_interval"))
    checks.whole_number("trainer.log_every_n_steps", trainer.get("log_every_n_steps"))
    checks.sampling(cfg.sample, prefix="sample.")
    metric = cfg.get("optimized_metric")
    if metric is not None:
        checks.choice(
            "optimized_metric", metric, (VAL_LOSS, TRAIN_LOSS, VAL_BPC, BEST_VAL_LOSS, LEARNING_RATE)
        )
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
    """The choices that tell runs apart, for TensorBoard's HParams tab (which shows the first five by name):
    the design axes, every setting given on the command line, and the seed. The rest is in config.yaml."""
    values = {
        "norm": cfg.model.norm,
        "norm_type": cfg.model.norm_type,
        "act": cfg.model.act,
        "seed": cfg.seed,
    }
    if HydraConfig.initialized():
        hydra = HydraConfig.get()
        for override in hydra.overrides.task:
            key = override.split("=", 1)[0].lstrip("+~")
            if key.startswith(NOT_IN_RUN_LABEL):
                continue
            # A group's choice (model=small) or a setting (optim.lr=3e-3, compile=true).
            value = hydra.runtime.choices[key] if key in hydra.runtime.choices else OmegaConf.select(cfg, key)
            if isinstance(value, str | int | float | bool):
                values[key] = value
    return values
