"""Keeping a run's state safe: a stop on SIGINT/SIGTERM that saves first, a stop on a non-finite loss that
never saves broken weights, and a random stream of the training steps that checkpoints restore, so that a
resumed run repeats the uninterrupted one bit for bit (docs/errors.md)."""

from __future__ import annotations

import logging
import math
import signal
import threading
from types import FrameType
from typing import Any

import lightning.pytorch as L
import torch

from tinylm.errors import Interrupted, TrainingDiverged
from tinylm.layout import last_checkpoint
from tinylm.training import slurm
from tinylm.training.run_dir import resume_hint

log = logging.getLogger(__name__)


class TrainingRandomState(L.Callback):
    """Runs the training steps on a random stream of their own (CPU and the module's CUDA device), saved in
    each checkpoint: torch's global one also seeds each validation's DataLoader and a resume (docs/cli.md)."""

    def __init__(self) -> None:
        self._training: dict[str, torch.Tensor] | None = None
        self._outside: dict[str, torch.Tensor] | None = None

    @staticmethod
    def _get(device: torch.device) -> dict[str, torch.Tensor]:
        state = {"cpu": torch.get_rng_state()}
        if device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(device)
        return state

    @staticmethod
    def _set(state: dict[str, torch.Tensor], device: torch.device) -> None:
        torch.set_rng_state(state["cpu"])
        if device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], device)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        device = pl_module.device
        self._outside = self._get(device)
        if self._training is None:  # a fresh run starts the stream from wherever seeding left the global one
            self._training = self._outside
        self._set(self._training, device)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if self._outside is None:
            return
        device = pl_module.device
        self._training = self._get(device)
        self._set(self._outside, device)
        self._outside = None

    def state_dict(self) -> dict[str, Any]:
        return {"training": self._training} if self._training is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._training = state_dict.get("training")


class StopOnSignal(L.Callback):
    """Ctrl-C (SIGINT) or SIGTERM ends training after the current step, saves `last.ckpt` and raises
    `Interrupted`. The handlers only note the signal, so the checkpoint is taken between two steps,
    never of a half-applied one; a second Ctrl-C quits at once (docs/errors.md). In a SLURM job, SIGUSR1 and
    SIGUSR2 (the signal before the time limit) do the same, and then requeue the job, which continues from
    that checkpoint (tinylm/training/slurm.py)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        self._trainer: L.Trainer | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only
        self._trainer = trainer
        requeue_signals = slurm.REQUEUE_SIGNALS if slurm.in_slurm_job() else ()
        for signum in (*self.SIGNALS, *requeue_signals):
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.received == signal.SIGINT and signum == signal.SIGINT:
            self._restore()
            raise KeyboardInterrupt  # the impatient second Ctrl-C
        if self.received is None:
            self.received = signum
            name = signal.Signals(signum).name
            log.warning("%s received: stopping after this step and saving a checkpoint", name)
            launcher = self._trainer.strategy.launcher if self._trainer is not None else None
            if signum == signal.SIGTERM and launcher is not None:
                launcher.kill(signum)  # DDP: pass it on to the ranks this process started

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        # Before the next step, so the last one has logged, validated and done Lightning's bookkeeping. All
        # ranks must stop at the same step or one waits forever in a collective; agreeing costs a host sync,
        # so several ranks agree on the logger's steps only (docs/errors.md).
        if trainer.world_size > 1 and trainer.global_step % max(1, trainer.log_every_n_steps):
            return
        if not trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):
            return
        signum = self.received if self.received is not None else signal.SIGTERM
        path = last_checkpoint(trainer.default_root_dir)
        # The whole state, to resume from (said, so Lightning does not log that it assumed it).
        trainer.save_checkpoint(path, weights_only=False)
        step = trainer.global_step
        then = resume_hint(trainer.default_root_dir)
        if signum in slurm.REQUEUE_SIGNALS:
            # After the save: the requeue ends this job (SIGTERM, then SIGKILL) and starts it again.
            then = slurm.requeue_this_job() if trainer.is_global_zero else "rank 0 requeues the job"
        raise Interrupted(
            f"stopped by {signal.Signals(signum).name} after step {step}; saved {path}; {then}",
            signum=signum,
            step=step,
        )

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # The save above comes once Lightning has counted the next batch as ready, not started. Restored as it is,
        # that batch would leave Lightning's count of the epoch's batches but not its total, which
        # val_check_interval counts: every validation would come a step early. Read as what it is, a checkpoint
        # between two steps (docs/internals.md).
        loops = checkpoint.get("loops") or {}
        progress = (loops.get("fit_loop") or {}).get("epoch_loop.batch_progress") or {}
        for count in (progress.get("total"), progress.get("current")):
            if count and count["ready"] - 1 == count["started"] == count["processed"] == count["completed"]:
                count["ready"] = count["completed"]

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            if handler is not None:
                signal.signal(signum, handler)
        self._previous = {}

    def on_exception(self, *_: Any) -> None:
        self._restore()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore()


class StopOnNonFiniteLoss(L.Callback):
    """Stops training with `TrainingDiverged` once the loss is NaN or infinite, and refuses to checkpoint
    non-finite weights. Losses stay tensors, checked together every `check_every_n_steps` (default: the
    logging interval, which syncs anyway) and before every validation and save: no host sync of its own."""

    def __init__(self, check_every_n_steps: int | None = None) -> None:
        self.check_every_n_steps = check_every_n_steps
        self._losses: list[tuple[int, torch.Tensor]] = []
        self._last_good_save: int | None = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *_: Any
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            # The step's index as TensorBoard shows it: the training loss of step k is logged at k.
            self._losses.append((trainer.global_step - 1, loss.detach()))

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        # Checked before the next step, so the bad step's loss has been logged where TensorBoard shows it.
        every = self.check_every_n_steps or trainer.log_every_n_steps or 1
        if trainer.global_step % every == 0:
            self._check_losses(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check_losses(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Before validation computes anything from the weights (and samples from them), so that a divergence
        # right before it ends as a divergence, not as a failed validation.
        if not trainer.sanity_checking:
            self._check_losses(trainer)
            self._check_weights(trainer, pl_module)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: Any) -> None:
        self._check_losses(trainer)
        self._check_weights(trainer, pl_module)
        self._last_good_save = trainer.global_step

    def _check_weights(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        params = [p.detach() for p in pl_module.parameters()]
        finite = (
            torch.stack([torch.isfinite(p).all() for p in params]).all() if params else torch.tensor(True)
        )
        if not trainer.strategy.reduce_boolean_decision(bool(finite), all=True):
            self._stop(trainer, trainer.global_step - 1, "the weights")

    def _check_losses(self, trainer: L.Trainer) -> None:
        if not self._losses:
            return
        steps, losses = zip(*self._losses, strict=True)
        self._losses = []
        finite = torch.isfinite(torch.stack([loss.float().reshape(()) for loss in losses])).tolist()
        local_bad = next((step for step, ok in zip(steps, finite, strict=True) if not ok), None)
        if trainer.strategy.reduce_boolean_decision(local_bad is not None, all=False):
            bad_loss = losses[steps.index(local_bad)] if local_bad is not None else None
            what = f"the training loss ({float(bad_loss)})" if bad_loss is not None else "the training loss"
            self._stop(trainer, local_bad if local_bad is not None else steps[0], what)

    def _stop(self, trainer: L.Trainer, step: int, what: str) -> None:
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else math.nan
        last = last_checkpoint(trainer.default_root_dir)
        if last.is_file():
            kept = f"kept the last good checkpoint {last}"
            if self._last_good_save is not None:
                kept += f" (step {self._last_good_save})"
        else:
            kept = "no checkpoint had been saved yet"
        raise TrainingDiverged(
            f"training diverged: {what} became non-finite at step {step} (lr {lr:.3g}); {kept}; "
            f"try a lower optim.lr, a longer optim.warmup_steps, or stronger gradient clipping "
            f"(trainer.gradient_clip_val, now {trainer.gradient_clip_val})",
            step=step,
        )
