"""`@hydra_entry_point`: `@hydra.main` for tinylm's scripts, with each error the user can fix reported as one
line, `error: <message>`, and its exit code (docs/errors.md); a bug keeps its traceback.

Two places report errors. Inside the task, tinylm catches its own `ReportedError`s (and the machine's
errors: a full disk, a read-only directory). Before the task, Hydra reports what is Hydra's (an unknown
choice or key, an unparsable override) in its own words: its report, which spans several lines, is held
until the task starts and, if Hydra ends the command instead, printed as one line, with the nearest choice or
key where one is near (tinylm.composition). `HYDRA_FULL_ERROR=1`
(Hydra's own switch) raises everything with its traceback.
"""

from __future__ import annotations

import argparse
import errno
import functools
import gc
import io
import logging
import os
import re
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from tinylm import checks
from tinylm.composition import with_fix
from tinylm.errors import ReportedError
from tinylm.layout import holds_a_run, run_directory_lock
from tinylm.training import resolvers  # noqa: F401  (registers the configs' resolvers)

CONFIG_MODULE = "pkg://tinylm.conf"
BUG_EXIT_CODE = 1
USAGE_EXIT_CODE = 2
SIGINT_EXIT_CODE = 130
SIGTERM_EXIT_CODE = 143

TaskFunction = Callable[[DictConfig], Any]

# Errors of the machine, not of tinylm: a path in the way or missing, no permission, a full disk.
ENVIRONMENT_ERRNOS = {
    errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
    errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.ENAMETOOLONG,
}  # fmt: skip


def hydra_entry_point(
    config_name: str,
    uses_lightning: bool = True,
    check: Callable[[DictConfig], Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[[], Any]]:
    """Use instead of `@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name=...)`.

    Scripts import their task's modules inside the task, so that `--help` and Hydra's own errors come
    without importing torch; `check` refuses what plain Python can see is wrong before anything heavy loads,
    and what it returns (the settings it checked) is the task's second argument, so that nothing checks them
    again; `uses_lightning` imports Lightning before the task, to route its log lines.
    """

    def decorate(task: Callable[..., Any]) -> Callable[[], Any]:
        def start(cfg: DictConfig) -> Any:
            checked = check(cfg) if check is not None else None
            if uses_lightning:
                import lightning.pytorch  # noqa: F401  (adds its console handlers, which the next line routes)
            route_lightning_logs_through_hydra()
            set_threads(cfg.get("threads"))
            return task(cfg) if check is None else task(cfg, checked)

        @functools.wraps(task)  # Hydra unwraps this to find the script's name and module
        def task_reporting_user_errors(cfg: DictConfig) -> Any:
            release_stderr()  # composition succeeded: what Hydra had to say goes out as it is
            quiet_known_noise()
            try:
                return reporting_user_errors(start, cfg)
            finally:
                remove_new_run_directory_without_a_run()

        hydra_main = hydra.main(version_base="1.3", config_path=CONFIG_MODULE, config_name=config_name)(
            task_reporting_user_errors
        )

        def reporting_hydra_errors() -> Any:
            with stderr_held_until_the_task() as held:
                try:
                    return hydra_main()
                except SystemExit as stop:
                    report = held.getvalue()
                    if stop.code in (None, 0) or not report:
                        raise
                    held.seek(0)
                    held.truncate()
                    release_stderr()
                    message, code = describe_hydra_report(report)
                    if code == USAGE_EXIT_CODE:
                        message = with_fix(report, message, CONFIG_MODULE, config_name, sys.argv[1:])
                    exit_with(message, code)

        @functools.wraps(task)
        def main() -> Any:
            try:
                return reporting_hydra_errors()
            except SystemExit as stop:
                if stop.code not in (None, 0) and task.__module__ == "__main__":
                    skip_the_final_collection()
                raise

        return main

    return decorate


def skip_the_final_collection() -> None:
    """Let a command that has reported its error end without the interpreter's final garbage collection.

    With torch and Lightning loaded, that collection walks about half a million objects, several times:
    a second or two on an idle machine, minutes on a starved one, while the error is already out and the
    shell waits (a refused command was still running 120 s after its error). `gc.freeze` moves every
    object out of the collector's reach; exit handlers still run, so logs are flushed and temporary files
    removed. Only for the command's own process (the script run as `__main__`): a caller that runs the
    script in its own process (the tests) goes on collecting as before."""
    gc.freeze()


def reporting_user_errors(start: TaskFunction, cfg: DictConfig) -> Any:
    """Run the task; each error the user can fix ends the command with one line and its exit code."""
    if full_error_requested():
        return start(cfg)
    try:
        return start(cfg)
    except ReportedError as err:
        exit_with(str(err), err.exit_code)
    except OSError as err:
        if err.errno not in ENVIRONMENT_ERRNOS:
            raise
        exit_with(describe_os_error(err.filename, err.strerror or str(err), err.errno), USAGE_EXIT_CODE)
    except (OmegaConfBaseException, HydraException) as err:  # e.g. an interpolation that fails
        exit_with(f"bad config: {err}", USAGE_EXIT_CODE)
    except KeyboardInterrupt:
        exit_with("interrupted (Ctrl-C) before anything was saved", SIGINT_EXIT_CODE)
    except SystemExit as err:
        # Lightning ends a run that gets SIGTERM during set-up with a SystemExit whose code None would
        # exit 0. Imported here: only a run that imported Lightning can raise it.
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(err, SIGTERMException):
            exit_with("stopped by SIGTERM before the first step; nothing was saved", SIGTERM_EXIT_CODE)
        raise


class NewRunDirectory(Callback):
    """Hydra callback (conf/train.yaml): notes whether `hydra.run.dir` is new, before Hydra creates it, so that
    a command refused before the run wrote anything leaves no directory behind (docs/errors.md)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(str(config.hydra.run.dir)).absolute()  # resolves ${now:}, once: Hydra caches it
        created = [run_dir, *run_dir.parents]
        _created.clear()
        _created.extend(created[: next(i for i, path in enumerate(created) if path.exists())])


# The directories this command's Hydra run is about to create, deepest first (NewRunDirectory).
_created: list[Path] = []


def remove_new_run_directory_without_a_run() -> None:
    """Remove the run directory this command created, and the parents it created, if no run was written in
    it (at most Hydra's log file of a refused command) and no other run holds it: two commands started at
    once into one new directory both find it new, and the one refused must not remove the other's."""
    created = list(_created)
    _created.clear()  # one command's: an in-process caller may run the next
    if not created:
        return
    if created[0].is_dir():
        with run_directory_lock(created[0]) as taken:
            if not taken or holds_a_run(created[0]):
                return
            shutil.rmtree(created[0])
    for parent in created[1:]:
        try:
            parent.rmdir()  # only while empty: another run may have appeared in it meanwhile
        except OSError:
            break


# The stream Hydra's report goes to until the task starts, and the real stderr; module state, not a closure,
# so that the task still pickles for launchers that run it in other processes (joblib).
_held: list[tuple[io.StringIO, Any]] = []


@contextmanager
def stderr_held_until_the_task() -> Iterator[io.StringIO]:
    held = io.StringIO()
    _held.append((held, sys.stderr))
    sys.stderr = held
    try:
        yield held
    finally:
        release_stderr()


def release_stderr() -> None:
    """Give stderr back, with whatever was written to it meanwhile (a warning while composing, say)."""
    while _held:
        held, real = _held.pop()
        if sys.stderr is held:
            sys.stderr = real
        real.write(held.getvalue())
        held.seek(0)
        held.truncate()


def describe_hydra_report(report: str) -> tuple[str, int]:
    """One line and an exit code for what Hydra printed before ending the command: its message (a usage
    error), the machine's error if the run directory could not be made, or, for anything else, the whole
    report as it is (a bug: exit code 1)."""
    lines = [line for line in report.splitlines() if "HYDRA_FULL_ERROR" not in line]
    if "Traceback (most recent call last)" not in report:
        return one_line("\n".join(lines)), USAGE_EXIT_CODE
    last = next((line for line in reversed(lines) if line.strip()), "")
    os_error = re.match(r"\w+Error: \[Errno (\d+)\] ([^:]+)(?:: '(.*)')?$", last)
    if os_error and int(os_error[1]) in ENVIRONMENT_ERRNOS:
        return describe_os_error(os_error[3], os_error[2], int(os_error[1])), USAGE_EXIT_CODE
    sys.stderr.write("\n".join(lines) + "\n")
    return last, BUG_EXIT_CODE


def describe_os_error(filename: str | None, reason: str, number: int | None) -> str:
    where = f" {filename!r}" if filename else ""
    fixes = {
        errno.EEXIST: "a file is in the way of a directory: choose another hydra.run.dir",
        errno.ENOTDIR: "a file is in the way of a directory: choose another hydra.run.dir",
        errno.ENOSPC: "free some space, or choose another hydra.run.dir",
        errno.EFBIG: "free some space, or choose another hydra.run.dir",
    }
    return f"cannot write{where}: {reason}; {fixes.get(number, 'choose a writable hydra.run.dir')}"


def quiet_known_noise() -> None:
    """Silence what every run would print and no user can act on, and nothing else: Lightning's tip to install
    its cloud logger, a deprecation inside Lightning's own pytree code, `datasets`' progress bars for files
    it only reads (tinylm shows its own while tokenising), and Lightning's hint to prepend `srun` on any
    machine where SLURM is installed: a run started there by hand is meant to run there, and `launcher=slurm`
    starts its jobs with srun already."""
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings(
        "ignore", message=r"The `srun` command is available on your system but is not used"
    )
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_NoCloudLoggerTip())
    # Read by `datasets` when it is imported (later, and only by the scripts that need it); set, it is kept.
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")


class _NoCloudLoggerTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


def set_threads(threads: int | None) -> None:
    """`threads=N`: N intra-op torch threads for this process and the processes it starts; None keeps
    PyTorch's default (one per core)."""
    if threads is None:
        return
    checks.whole_number("threads", threads)
    import torch

    torch.set_num_threads(threads)
    # Lightning's DDP launcher gives each rank cores // ranks threads unless this is set; set, it keeps the
    # user's choice, in this process and in the ranks it starts.
    os.environ["OMP_NUM_THREADS"] = str(threads)


def route_lightning_logs_through_hydra() -> None:
    """Send Lightning's log lines where Hydra sends the job's: the console (stdout) and the run's log file.
    Imported before logging is set up, Lightning keeps stderr handlers of its own, so its lines would mix
    with errors and never reach the log file."""
    root = logging.getLogger()
    if not root.handlers:
        return
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # the console handlers Lightning added, nothing else
                logger.removeHandler(handler)
        logger.propagate = True


def full_error_requested() -> bool:
    """HYDRA_FULL_ERROR=1, Hydra's own switch: raise everything with its traceback."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


class OneLineErrors(argparse.ArgumentParser):
    """argparse, its usage errors as one `error:` line with the usage, exit code 2."""

    def error(self, message: str) -> NoReturn:
        exit_with(f"{message}; usage: {self.format_usage().strip().removeprefix('usage: ')}", USAGE_EXIT_CODE)


def exit_with(message: str, code: int) -> NoReturn:
    sys.stdout.flush()
    print(f"error: {one_line(message)}", file=sys.stderr, flush=True)
    sys.exit(code)


def one_line(text: str) -> str:
    """Join a multi-line message into one line, dropping Hydra's config-search-path listing; a line that
    introduces the next ones (`Available options in 'norm':`) runs on into them."""
    text = text.split("Config search path:", 1)[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = ""
    for line in lines:
        joined += line if not joined else (" " if joined.endswith(":") else "; ") + line
    return joined
