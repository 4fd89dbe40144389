"""Starting runs of a sweep again, as the sweep ran them: `scripts/train.py` with a recorded run's own
overrides, other seeds and a new directory, through the sweep's own Hydra launcher. The plan decides which
runs (tinylm/seed_rounds/plan.py); this starts them and waits (tinylm/seed_rounds/rounds.py calls both)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from tinylm.errors import Interrupted, UserError
from tinylm.layout import HYDRA_DIR
from tinylm.overrides import parse

# Hydra's own settings of the original command that must not carry over: where and how that sweep ran.
NOT_CARRIED = ("hydra.sweep.", "hydra.run.", "hydra.mode")


class LaunchError(UserError):
    """A multirun this started failed; the message names its log."""


def command_for(run_dir: Path, seeds: Sequence[str], sweep_dir: Path) -> list[str]:
    """The overrides that made the run in `run_dir`, with `seeds` in place of its seed, into a new directory of
    the sweep."""
    hydra = OmegaConf.load(run_dir / HYDRA_DIR / "hydra.yaml").hydra.overrides
    carried = [o for o in hydra.hydra if not str(o).startswith(NOT_CARRIED)]
    task = [str(o) for o in hydra.task if parse([str(o)])[0].key != "seed"]
    return ["-m", *map(str, carried), *task, f"seed={','.join(seeds)}", f"hydra.sweep.dir={sweep_dir}"]


def launch(command: list[str], target: Path) -> None:
    """Run one multirun to its end, its output into target/launch.log. On Ctrl-C, the runs save their
    checkpoints and record themselves as interrupted (StopOnSignal); this waits for that, then stops."""
    target.mkdir(parents=True)
    with open(target / "launch.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            code = process.wait()
        except KeyboardInterrupt:
            # A Ctrl-C at the terminal reached the runs too (one process group): let them save and stop. A
            # second one, to them, would quit at once.
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.terminate()
                process.wait()
            raise Interrupted(
                "stopped during a round; its finished runs are kept and its interrupted ones recorded: rerun "
                "the same command to carry on",
                signal.SIGINT,
            ) from None
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):  # its runs were stopped by a signal
        raise Interrupted(
            "a round's runs were stopped by a signal; they saved and recorded themselves: rerun the same "
            "command to carry on",
            code - 128,
        )
    if code != 0:
        raise LaunchError(f"a round's multirun failed (exit {code}); its log: {target / 'launch.log'}")
