"""scripts/train.py's path to `Trainer.fit`, top to bottom: where a Hydra config becomes a training run.

objective(cfg, early)                          scripts/train.py's task: run, then the sweeper's metric
  run(cfg)                                     hold the run directory; record how a started run ended
    prepare(cfg)                               everything that can refuse the run, writing nothing:
      settings = RunSettings.from_cfg(...)       every setting checked, once (the step counts and seed
                                                 came checked from early_checks.py, before torch loaded)
      resumed  = resume_checkpoint(...)          the checkpoint to continue, read once
      data     = load_data(settings, resumed)    the corpus tokenised (cached), split
      prompt   = settings.sample.prompt_for(...)  the sample's prompt, checked against the corpus
      module   = build_module(settings, ...)     the GPT in its LightningModule
      trainer  = build_trainer(settings, ...)    callbacks, logger, checkpoint writer
    PreparedRun.fit()                          only now is anything written into the run directory
"""

from __future__ import annotations

import dataclasses
import logging
import math
import resource
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.fabric.utilities.spike import TrainingSpikeException
from omegaconf import DictConfig, OmegaConf

from tinylm.data import CharDataModule, VocabularyError
from tinylm.errors import ConfigError, Interrupted, ReportedError, TrainingDiverged
from tinylm.layout import (
    BEST_VAL_LOSS,
    COMPILE_WARMUP,
    CONFIG_FILE,
    DIVERGED_AT,
    FINAL_SPLIT_WINDOWS,
    FINAL_VAL_LOSS,
    FINAL_WINDOW_LOSSES,
    HYDRA_DIR,
    REFERENCE_LEVELS,
    SEGMENTS,
    TENSORBOARD_DIR,
    TOKENIZER_FILE,
    VAL_IN_TRAINING,
    VAL_IN_TRAINING_SHARE,
    VAL_LOSS,
    Checkpoint,
    CheckpointError,
    earlier_segments,
    evaluated_windows,
    holds_a_run,
    last_checkpoint,
    target_tags,
    write_run_record,
)
from tinylm.model import GPT
from tinylm.model.sampling import sample_text
from tinylm.overrides import NOT_A_DESIGN_GROUP, choices
from tinylm.training import slurm
from tinylm.training.callbacks import CompileWarmUp, LossTargets, TensorBoardHParams, in_order
from tinylm.training.checkpoints import (
    AtomicCheckpointIO,
    check_resumable,
    checkpoint_callbacks,
    load_module,
    resume_checkpoint,
)
from tinylm.training.distributed import (
    EffectiveBatch,
    ScaleOutError,
    refuse_relaunch_in_sweep,
    shards_parameters,
)
from tinylm.training.early_checks import EarlySettings
from tinylm.training.module import CharLM
from tinylm.training.optimizers import schedule_change
from tinylm.training.run_dir import (
    FinishedJob,
    RunDirectoryError,
    hold,
    job_to_continue,
    point_latest_at,
    save_hydra_record,
)
from tinylm.training.settings import RunSettings

log = logging.getLogger(__name__)

# Exceptions that mean "the loss blew up", not "the program broke". FloatingPointError is Python's own
# for numeric failure, and tinylm's TrainingDiverged derives from it; Lightning's SpikeDetection raises the other.
DIVERGENCE_ERRORS: tuple[type[BaseException], ...] = (FloatingPointError, TrainingSpikeException)
# Exceptions that condemn the whole sweep, not one job: every job would fail the same way, so the sweep
# stops at the first (e.g. `-m` with a DDP trainer that would re-run the sweep for every rank).
SWEEP_ERRORS: tuple[type[BaseException], ...] = (ScaleOutError, Interrupted)


def objective(cfg: DictConfig, keep_going: bool | None = None, *, early: EarlySettings) -> float | None:
    """Train as `cfg` says; return the value of its `optimized_metric` (to be minimised) for the sweeper.

    `keep_going` (default: inside a multirun) turns a failed run, already recorded in its metrics.json, into
    a return value: a diverged job scores `+inf` (a real, very bad result), any other failure `None` (an
    Optuna FAIL trial, as `nan` would end the sweep); `SWEEP_ERRORS` still stop the sweep. A sweep's job run
    again into its directory after it finished is kept, and scores what it recorded (`FinishedJob`). `early`:
    the settings scripts/train.py checked before torch loaded (docs/sweeps.md), the optimized metric among them.
    """
    multirun = in_multirun()
    keep_going = multirun if keep_going is None else keep_going
    try:
        metrics = run(cfg, early=early, multirun=multirun)
    except FinishedJob as kept:  # the sweep's command run again into its directory
        log.info("run %s: %s", cfg.get("run_name"), kept)
        return kept.score(early.optimized_metric)
    except Exception as error:
        if not keep_going or isinstance(error, SWEEP_ERRORS):
            raise
        status = run_status(error)
        # tinylm's own errors say what to fix in one line, as a single run prints them; a bug keeps its traceback.
        if isinstance(error, ReportedError):
            log.error("run %s %s: %s; the sweep goes on", cfg.get("run_name"), status, error)
        else:
            log.exception("run %s %s; the sweep goes on", cfg.get("run_name"), status)
        return math.inf if isinstance(error, DIVERGENCE_ERRORS) else None

    name = early.optimized_metric
    if not name:
        return None
    # The name was checked once (early_checks.py); whether this run recorded it was not: a run whose
    # validation never ran has no loss/val, and a sharded (FSDP) one no loss/val_full.
    if name not in metrics:
        raise KeyError(f"optimized_metric={name!r} is not among the run's metrics: {sorted(metrics)}")
    value = float(metrics[name])
    if not math.isfinite(value):
        log.error("run %s diverged: %s=%s", cfg.get("run_name"), name, value)
        numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float) or k == SEGMENTS}
        write_run_record(cfg.run_dir, "diverged", **numbers, error=f"{name} is {value}")
        return math.inf
    return value


def run(
    cfg: DictConfig,
    observers: Sequence[L.Callback] = (),
    *,
    early: EarlySettings | None = None,
    multirun: bool | None = None,
) -> dict[str, Any]:
    """Train as `cfg` says; returns the final metrics (floats), the run directory and the sample text.

    `observers` are callbacks that watch a real run (benchmarks, tests). Bad input raises a `UserError`
    before anything is written; a run that fails later, diverges or is interrupted records how in its
    metrics.json, then raises (`TrainingDiverged`, `Interrupted`: docs/errors.md). `early` and `multirun`
    are what `objective` already knows (None: `RunSettings.from_cfg` checks the early settings, and `multirun`
    is found here).
    """
    started = time.perf_counter()
    multirun = in_multirun() if multirun is None else multirun
    fresh = not holds_a_run(cfg.run_dir)
    prepared = None
    segments: list[dict[str, Any]] = []
    try:
        with hold(cfg.run_dir):
            segments = earlier_segments(cfg.run_dir)
            prepared = prepare(cfg, observers, early, multirun)
            return prepared.fit()
    except Exception as error:
        # A run that started records how it ended. A refused command writes nothing (an existing run
        # directory stays as it was), except a sweep's new job, which records why so that the report lists it.
        if prepared is not None or (fresh and multirun and not isinstance(error, RunDirectoryError)):
            record_failure(cfg, error, time.perf_counter() - started, segments)
        raise


def prepare(
    cfg: DictConfig,
    observers: Sequence[L.Callback] = (),
    early: EarlySettings | None = None,
    multirun: bool = False,
) -> PreparedRun:
    """Everything that can refuse the run, and nothing that writes into it."""
    settings = RunSettings.from_cfg(cfg, early, multirun)
    L.seed_everything(settings.seed, workers=True, verbose=False)  # logged once the run may write its log
    # A requeued SLURM job continues its own run directory (tinylm/training/slurm.py), and so does a sweep's job
    # stopped before its end when the sweep's command runs again into its directory (a finished one is kept).
    ckpt_path = settings.ckpt_path or slurm.checkpoint_to_continue(settings.run_dir)
    if ckpt_path is None and settings.multirun:
        ckpt_path = job_to_continue(settings.run_dir)
    resumed = resume_checkpoint(ckpt_path, settings.run_dir)
    if resumed is None and last_checkpoint(settings.run_dir).is_file():
        # A fresh run here would overwrite the checkpoints of the run already in it.
        raise RunDirectoryError(
            f"{str(settings.run_dir)!r} already holds a run with checkpoints; continue it with ckpt_path=last, "
            "or choose another hydra.run.dir"
        )
    datamodule = load_data(settings, resumed)
    # A prompt the model cannot read is refused now, not after training; the sample after it uses this one.
    prompt = settings.sample.prompt_for(datamodule.tokenizer)
    module = build_module(settings, datamodule, resumed)
    trainer = build_trainer(settings, resumed, observers)
    datamodule.check_validation_shards(trainer.world_size)
    segments = earlier_segments(settings.run_dir)
    return PreparedRun(settings, datamodule, module, trainer, resumed, prompt, segments)


def load_data(settings: RunSettings, resumed: Checkpoint | None) -> CharDataModule:
    """The corpus, tokenised (once: later runs read the token cache) and split. A resumed run keeps the ids
    it was trained with, so its tokenizer comes from the checkpoint."""
    datamodule = CharDataModule(settings.data, resumed.tokenizer() if resumed else None)
    try:
        datamodule.prepare()
    except VocabularyError as err:
        if resumed is None:
            raise
        raise CheckpointError(
            f"the corpus has characters {err.unknown!r} that the vocabulary of checkpoint "
            f"{str(resumed.path)!r} lacks; resume on the corpus it was trained on, or drop ckpt_path to train "
            "from scratch"
        ) from None
    return datamodule


def build_module(settings: RunSettings, datamodule: CharDataModule, resumed: Checkpoint | None) -> CharLM:
    tokenizer = datamodule.tokenizer
    assert tokenizer is not None
    # The checked settings completed by the corpus's vocabulary (not a setting): a new config, built through
    # its checks, so the vocabulary is checked as every other field was (issue 66).
    model = dataclasses.replace(settings.model, vocab_size=tokenizer.vocab_size)
    if resumed is not None:
        check_resumable(resumed, model, settings.trainer["max_steps"], settings.optim.name)
        trained = resumed.contents["hyper_parameters"].get("optim") or {}
        if (change := schedule_change(dict(trained), settings.optim, resumed.step)) is not None:
            log.warning(change)
    module = CharLM(model, settings.optim, min(200, settings.sample.chars), settings.compile)
    module.tokenizer = tokenizer
    return module


def build_trainer(
    settings: RunSettings, resumed: Checkpoint | None, observers: Sequence[L.Callback] = ()
) -> L.Trainer:
    cfg = settings.cfg
    configured = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    always = [*checkpoint_callbacks(settings.run_dir), TensorBoardHParams(hparams_for_tensorboard(cfg))]
    if settings.compile:
        always.append(CompileWarmUp(settings.compile_warmup_steps))
    callbacks = in_order(configured, always, settings.trainer.get("enable_progress_bar", True), observers)
    # The run directory carries the run's name (a single run's and a sweep job's alike): events go straight
    # into <run dir>/tb, and a run resumed in place continues the same TensorBoard run.
    logger = instantiate(cfg.logger, version="") if cfg.get("logger") else False
    try:
        trainer = L.Trainer(
            **settings.trainer,
            callbacks=callbacks,
            logger=logger,
            default_root_dir=str(settings.run_dir),
            plugins=[AtomicCheckpointIO(resumed), *slurm_plugins()],
        )
    except (TypeError, ValueError, MisconfigurationException) as err:  # Lightning's checks of the values
        raise ConfigError(f"Lightning rejects the trainer settings: {err}") from None
    if settings.multirun:
        refuse_relaunch_in_sweep(trainer)
    return trainer


def state_overlap(datamodule: CharDataModule) -> None:
    """The share of the validation split found in training, in the run's log: a warning above
    VAL_IN_TRAINING_SHARE (docs/diagnosis.md), where the validation loss measures memory."""
    if datamodule.validation_in_training() > VAL_IN_TRAINING_SHARE:
        log.warning(
            "%s: the corpus repeats itself, and the validation loss will measure memory, not generalisation "
            "(docs/diagnosis.md)", datamodule.overlap_note(),
        )  # fmt: skip
    else:
        log.info(datamodule.overlap_note())


@dataclass
class PreparedRun:
    """A run that has passed every check and written nothing yet."""

    settings: RunSettings
    datamodule: CharDataModule
    module: CharLM
    trainer: L.Trainer
    resumed: Checkpoint | None
    prompt: str  # the sample's, as the corpus's tokenizer reads it
    # How the run's earlier segments ended, when it is resumed in place (metrics.json keeps them).
    segments: list[dict[str, Any]] = field(default_factory=list)

    def fit(self) -> dict[str, Any]:
        settings, module, trainer = self.settings, self.module, self.trainer
        run_dir = settings.run_dir
        started = time.perf_counter()
        batch = EffectiveBatch.of(trainer, settings.data.batch_size, settings.data.block_size)
        if trainer.is_global_zero:
            write_run_files(settings, module)
            left_out = "position" if settings.model.tie_weights else "position and token"
            log.info("model: %s parameters (%s without %s embeddings)", f"{module.model.num_params(False):,}",
                     f"{module.model.num_params():,}", left_out)  # fmt: skip
            log.info(batch.describe(settings.optim.lr))
            log.info("precision: %s; seed %s", settings.precision_reason, settings.seed)
            state_overlap(self.datamodule)

        ckpt_path = self.resumed.path if self.resumed else None
        with warnings.catch_warnings():
            if ckpt_path is not None:
                # Resuming continues in the run's own checkpoint directory, by design: not worth a warning.
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
            trainer.fit(module, datamodule=self.datamodule, ckpt_path=ckpt_path, weights_only=True)

        metrics: dict[str, Any] = {k: float(v) for k, v in trainer.callback_metrics.items()}
        best = trainer.checkpoint_callback
        if best is not None and best.best_model_score is not None:
            metrics[BEST_VAL_LOSS] = float(best.best_model_score)
        if module.final_window_losses is not None:
            metrics[FINAL_VAL_LOSS] = float(module.final_window_losses.mean())
            # Rounded to 1e-6 nats: far below any difference between runs, and a third of the file.
            metrics[FINAL_WINDOW_LOSSES] = [round(float(v), 6) for v in module.final_window_losses]
            metrics[FINAL_SPLIT_WINDOWS] = module.final_windows_available
        metrics[REFERENCE_LEVELS] = dataclasses.asdict(self.datamodule.reference_levels())
        metrics[VAL_IN_TRAINING] = self.datamodule.validation_in_training()
        metrics["step"] = trainer.global_step
        metrics["params"] = module.model.num_params()
        metrics.update(batch.hparams())  # world_size, accumulate_grad_batches, effective_batch_size
        metrics["wall_time_s"] = time.perf_counter() - started
        steps_now = trainer.global_step - (self.resumed.step if self.resumed else 0)
        if self.resumed:
            metrics[RESUMED_AT] = self.resumed.step
        metrics["chars_per_s"] = steps_now * batch.chars / metrics["wall_time_s"]
        metrics["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
        if self.segments:
            metrics[SEGMENTS] = self.segments
        if trainer.is_global_zero:
            write_run_record(run_dir, "completed", **metrics)
        metrics["run_dir"] = str(run_dir)
        sampler = whole_model(trainer, module)
        if trainer.is_global_zero and settings.sample.chars > 0 and sampler is not None:
            sample, prompt = settings.sample, self.prompt
            metrics["sample"] = sample_text(
                sampler, module.tokenizer, sample.chars, prompt, sample.temperature, sample.top_k, sample.seed
            )
            print(f"\n--- sample after {trainer.global_step} steps ---\n{prompt}{metrics['sample']}\n---")
        if trainer.is_global_zero:
            targets = [level for c in trainer.callbacks if isinstance(c, LossTargets) for level in c.levels]
            print(summary_line(metrics, run_dir, bool(settings.cfg.get("logger")), targets), flush=True)
        return metrics


def write_run_files(settings: RunSettings, module: CharLM) -> None:
    """The run directory's first files (docs/cli.md): Hydra's record, the resolved config, the tokenizer and
    the `latest` link; written only once every check has passed."""
    cfg, run_dir = settings.cfg, settings.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    save_hydra_record(run_dir, cfg)
    OmegaConf.save(cfg, run_dir / CONFIG_FILE, resolve=True)
    module.tokenizer.save(run_dir / TOKENIZER_FILE)
    if cfg.get("latest_link") and not settings.multirun:
        point_latest_at(cfg.latest_link, run_dir)


def record_failure(
    cfg: DictConfig, error: Exception, wall_time_s: float, segments: list[dict[str, Any]] = ()
) -> None:
    """metrics.json for a run that did not complete: interrupted (with the step it saved), diverged, or
    failed, keeping how its earlier segments ended; and Hydra's record, so that the sweep report finds the
    job."""
    fields: dict[str, Any] = {"step": error.step} if isinstance(error, Interrupted) else {}
    if isinstance(error, TrainingDiverged):
        fields[DIVERGED_AT] = error.step
    if segments:
        fields[SEGMENTS] = list(segments)
    status = run_status(error)
    run_dir = Path(str(cfg.run_dir))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / HYDRA_DIR).exists():
            save_hydra_record(run_dir, cfg)
        write_run_record(
            run_dir, status, error=f"{type(error).__name__}: {error}", wall_time_s=wall_time_s, **fields
        )
    except OSError as write_error:  # the original error matters more than its record
        log.warning("could not write the failure record in %s: %s", run_dir, write_error)


def run_status(error: Exception) -> str:
    """How a run that raised `error` ended, as metrics.json says it."""
    if isinstance(error, Interrupted):
        return "interrupted"
    return "diverged" if isinstance(error, DIVERGENCE_ERRORS) else "failed"


# metrics.json: the checkpoint's step a resumed run started from (its wall time and speed count from there).
RESUMED_AT = "resumed_at_step"


def summary_line(
    metrics: dict[str, Any], run_dir: Path, tensorboard: bool, targets: Sequence[float] = ()
) -> str:
    """How the run ended, in one line: its result, how long it took, and where it is. The result is the final
    loss (`loss/val_full`, what the sweep report compares); the periodic validations' losses follow, named as
    such, for runs that ended before the final evaluation; then which of the `targets` levels (nats/char,
    `callbacks.targets.levels`) the validation loss reached, at which step and after how much training. A
    compiled run's time says how much of it went to compiling before training (`compile/warmup_s`)."""
    loss, best, full = metrics.get(VAL_LOSS), metrics.get(BEST_VAL_LOSS), metrics.get(FINAL_VAL_LOSS)
    minutes, seconds = divmod(round(metrics["wall_time_s"]), 60)
    took = f"in {minutes}m{seconds:02d}s ({metrics['chars_per_s']:,.0f} chars/s)"
    if COMPILE_WARMUP in metrics:  # a compiled run's warm-up: in the wall time, not in the training time
        took += f", {metrics[COMPILE_WARMUP]:.1f} s of it compiling before training"
    step, resumed_at = metrics["step"], metrics.get(RESUMED_AT)
    if resumed_at is None:
        parts = [f"{step} steps {took}"]
    else:  # the time and speed are this run's since its checkpoint (an in-place resume's earlier: `segments`)
        parts = [f"{step} steps, the {step - resumed_at} since the resume at step {resumed_at} {took}"]
    if full is not None:
        windows = evaluated_windows(len(metrics[FINAL_WINDOW_LOSSES]), metrics.get(FINAL_SPLIT_WINDOWS))
        parts.append(f"final loss {full:.4f} nats/char = {full / math.log(2):.3f} bits/char on {windows}")
    periodic = []
    if loss is not None:
        periodic.append(f"last periodic validation {loss:.4f}")
    if best is not None:
        periodic.append(f"best periodic validation {best:.4f}")
    if periodic:
        parts.append(", ".join(periodic))
    if targets:
        parts.append(targets_reached(metrics, targets))
    # The directory itself, not a link to it (`hydra.run.dir=latest`): `latest` moves with the next run.
    run_dir = run_dir.resolve()
    parts.append(f"checkpoint {last_checkpoint(run_dir)}")
    if tensorboard:
        parts.append(f"tensorboard --logdir {run_dir / TENSORBOARD_DIR}")
    return "done: " + "; ".join(parts)


def targets_reached(metrics: dict[str, Any], targets: Sequence[float]) -> str:
    """Which of the `targets` levels the validation loss reached, each at its step and training time
    (`target/<level>/step`, `target/<level>/time_s` in `metrics`), and which it did not, in one phrase:
    `validation loss reached 2 at step 120 (15.2 s of training) and 1.88 at step 183 (24.1 s of training),
    not 1.7 or 1.6`."""
    reached, missed = [], []
    for level in targets:
        step_tag, time_tag = target_tags(level)
        if step_tag in metrics:
            reached.append(
                f"{level:g} at step {metrics[step_tag]:.0f} ({metrics[time_tag]:.1f} s of training)"
            )
        else:
            missed.append(f"{level:g}")
    if not reached:
        return f"validation loss did not reach {_listed(missed, 'or')}"
    phrase = f"validation loss reached {_listed(reached, 'and')}"
    return f"{phrase}, not {_listed(missed, 'or')}" if missed else phrase


def _listed(items: Sequence[str], conjunction: str) -> str:
    return ", ".join(items[:-1]) + f" {conjunction} {items[-1]}" if len(items) > 1 else items[0]


def slurm_plugins() -> list[SLURMEnvironment]:
    """In a SLURM job, Lightning's SLURM environment without its auto-requeue: its SIGUSR1 handler saves a
    checkpoint from inside the signal handler, in the middle of a step; StopOnSignal saves between steps and
    requeues instead (tinylm/training/slurm.py)."""
    return [SLURMEnvironment(auto_requeue=False)] if slurm.in_slurm_job() else []


def in_multirun() -> bool:
    """True inside a job of a Hydra multirun (`-m`)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def whole_model(trainer: L.Trainer, module: CharLM) -> GPT | None:
    """The trained model, whole, in this process: a sharded one (FSDP) is whole only in its checkpoint."""
    if not shards_parameters(trainer.strategy):
        return module.model
    last = last_checkpoint(trainer.default_root_dir)
    return load_module(last).model if last.is_file() and trainer.is_global_zero else None


def hparams_for_tensorboard(cfg: DictConfig) -> dict[str, Any]:
    """The choices that tell runs apart, for TensorBoard's HParams tab: the design axes as the model and
    optimizer were built, every config group's choice (model=baby, data=shakespeare, size=…), every setting
    given on the command line, and the seed; the rest is in config.yaml. Every run has every design column,
    default or not: TensorBoard lists the columns whose values differ first, and a column only the runs that
    chose `optim=muon` carry has one value, so it would sort among the constant ones."""
    values = {
        "norm": cfg.model.norm,
        "norm_type": cfg.model.norm_type,
        "act": cfg.model.act,
        "optim": cfg.optim.name,
        "seed": cfg.seed,
    }
    if HydraConfig.initialized():
        hydra = HydraConfig.get()
        for group, choice in hydra.runtime.choices.items():
            if choice is not None and not group.startswith(NOT_A_DESIGN_GROUP):
                values.setdefault(group, choice)
        for choice in choices(hydra.overrides.task):
            # A group's choice (model=small) or a setting (optim.lr=3e-3, compile=true).
            key = choice.key
            value = hydra.runtime.choices[key] if key in hydra.runtime.choices else OmegaConf.select(cfg, key)
            if isinstance(value, str | int | float | bool):
                values[key] = value
    return values
