"""`@hydra_entry_point`: `@hydra.main` for tinylm's scripts, with errors the user can fix reported as one line.

Hydra's composition errors (an unknown choice or key, an unparsable override), which it prints over several
lines, and the task's `ReportedError`s become `error: <message>` and the error's exit code; anything else is
a bug and keeps its traceback. `HYDRA_FULL_ERROR=1` raises everything. Exit codes: docs/errors.md.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import hydra
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from tinylm import checks
from tinylm.errors import ReportedError
from tinylm.training import resolvers  # noqa: F401  (registers the configs' resolvers)

CONFIG_MODULE = "pkg://tinylm.conf"
USAGE_EXIT_CODE = 2
SIGINT_EXIT_CODE = 130
SIGTERM_EXIT_CODE = 143

# Hydra raises its errors (instead of printing them) only under HYDRA_FULL_ERROR: the entry point sets it to
# catch them, and marks that it did, so a child process (DDP re-runs the script) tells it from the user's.
_FULL_ERROR = "HYDRA_FULL_ERROR"
_FULL_ERROR_SET_BY_TINYLM = "TINYLM_SET_HYDRA_FULL_ERROR"

TaskFunction = Callable[[DictConfig], Any]


def hydra_entry_point(
    config_name: str, uses_lightning: bool = True
) -> Callable[[TaskFunction], Callable[[], Any]]:
    """Use instead of `@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name=...)`.

    Scripts import their task's modules inside the task, so that `--help` and Hydra's own errors come
    without importing torch; `uses_lightning` imports Lightning before the task, to route its log lines.
    """

    def decorate(task: TaskFunction) -> Callable[[], Any]:
        @functools.wraps(task)  # Hydra unwraps this to find the script's name and module
        def task_reporting_user_errors(cfg: DictConfig) -> Any:
            quiet_known_noise()
            if uses_lightning:
                import lightning.pytorch  # noqa: F401  (adds its console handlers, which the next line routes)
            route_lightning_logs_through_hydra()
            if full_error_requested():
                set_threads(cfg.get("threads"))
                return task(cfg)
            try:
                set_threads(cfg.get("threads"))
                return task(cfg)
            except ReportedError as err:
                exit_with(str(err), err.exit_code)
            except OSError as err:
                if err.errno not in ENVIRONMENT_ERRNOS:
                    raise
                exit_with(describe_os_error(err), USAGE_EXIT_CODE)
            except (OmegaConfBaseException, HydraException) as err:
                exit_with(f"bad config: {one_line(str(err))}", USAGE_EXIT_CODE)
            except KeyboardInterrupt:
                exit_with("interrupted (Ctrl-C) before anything was saved", SIGINT_EXIT_CODE)
            except SystemExit as err:
                # Lightning ends a run that gets SIGTERM during set-up with a SystemExit whose code None would
                # exit 0. Imported here: only a run that imported Lightning can raise it.
                from lightning.pytorch.utilities.exceptions import SIGTERMException

                if isinstance(err, SIGTERMException):
                    exit_with(
                        "stopped by SIGTERM before the first step; nothing was saved", SIGTERM_EXIT_CODE
                    )
                raise

        hydra_main = hydra.main(version_base="1.3", config_path=CONFIG_MODULE, config_name=config_name)(
            task_reporting_user_errors
        )

        @functools.wraps(task)
        def main() -> Any:
            if full_error_requested():
                return hydra_main()
            saved = {name: os.environ.get(name) for name in (_FULL_ERROR, _FULL_ERROR_SET_BY_TINYLM)}
            os.environ[_FULL_ERROR] = os.environ[_FULL_ERROR_SET_BY_TINYLM] = "1"
            try:
                return hydra_main()
            except (HydraException, OmegaConfBaseException) as err:
                exit_with(describe_hydra_error(err), USAGE_EXIT_CODE)
            except OSError as err:
                # Hydra could not create or write its run directory (a file in the way, no permission).
                if err.errno not in ENVIRONMENT_ERRNOS:
                    raise
                exit_with(describe_os_error(err), USAGE_EXIT_CODE)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value

        return main

    return decorate


# Errors of the machine, not of tinylm: a path in the way or missing, no permission, a full disk.
ENVIRONMENT_ERRNOS = {
    errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
    errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.ENAMETOOLONG,
}  # fmt: skip


def describe_os_error(err: OSError) -> str:
    where = f" {err.filename!r}" if err.filename else ""
    fixes = {
        errno.EEXIST: "a file is in the way of a directory: choose another hydra.run.dir",
        errno.ENOTDIR: "a file is in the way of a directory: choose another hydra.run.dir",
        errno.ENOSPC: "free some space, or choose another hydra.run.dir",
        errno.EFBIG: "free some space, or choose another hydra.run.dir",
    }
    fix = fixes.get(err.errno, "choose a writable hydra.run.dir")
    return f"cannot write{where}: {err.strerror or err}; {fix}"


def quiet_known_noise() -> None:
    """Silence what every run would print and no user can act on, and nothing else: Lightning's tip to install
    its cloud logger, a deprecation inside Lightning's own pytree code, `datasets`' progress bars for files
    it only reads (tinylm shows its own while tokenising)."""
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
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
    """The user set HYDRA_FULL_ERROR=1 themselves: raise everything with its traceback."""
    value = os.environ.get(_FULL_ERROR, "")
    return value not in ("", "0") and os.environ.get(_FULL_ERROR_SET_BY_TINYLM) != "1"


def exit_with(message: str, code: int) -> NoReturn:
    sys.stdout.flush()
    print(f"error: {one_line(message)}", file=sys.stderr, flush=True)
    sys.exit(code)


def one_line(text: str) -> str:
    """Join a multi-line message into one line, dropping Hydra's config-search-path listing."""
    text = text.split("Config search path:", 1)[0]
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def describe_hydra_error(err: Exception) -> str:
    """One line naming what Hydra could not compose and how to fix it."""
    if isinstance(err, MissingConfigException) and err.options and err.missing_cfg_file:
        group, _, choice = str(err.missing_cfg_file).rpartition("/")
        if group:
            return f"unknown {group}={choice}; choose one of: {', '.join(sorted(err.options))}"
    if isinstance(err, OverrideParseException):
        details = [
            line.strip()
            for line in str(err.message).splitlines()
            if line.strip() and not line.startswith(("Error parsing override", "See "))
        ]
        reason = details[0] if details else "syntax error"
        return (
            f"cannot parse the override {err.override!r} ({reason}); write key=value, e.g. norm=post, "
            """and quote a value with spaces or special characters: 'prompt="ROMEO: ..."'"""
        )
    message = one_line(str(err))
    cause = err.__cause__
    if "Could not override" in message and isinstance(cause, OmegaConfBaseException):
        key = message.split("'")[1] if message.count("'") >= 2 else "?"
        return (
            f"unknown setting {key!r} ({one_line(str(cause)).split(';')[0]}); check the spelling "
            f"(--cfg job prints every setting), or add a new key with +{key}=..."
        )
    if isinstance(cause, OmegaConfBaseException):
        message = f"{message}; {one_line(str(cause))}"
    return message
