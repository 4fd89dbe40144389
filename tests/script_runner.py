"""Run `scripts/<name>.py` inside the test process, exactly as its `main()` runs from a shell (argv parsed by
Hydra, errors reported by `tinylm.cli`), but without a new interpreter's start-up (seconds per call here).

Subprocess runs (conftest.run_script) stay the reference for what a user sees; this is for long tables.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import subprocess
import sys
from functools import cache
from types import ModuleType

from conftest import REPO
from hydra.core.global_hydra import GlobalHydra


@cache
def _script(name: str) -> ModuleType:
    path = REPO / "scripts" / name
    # Named after the script, as Hydra names the job (and its log file) after the task's module.
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script_in_process(script: str, *args: str) -> subprocess.CompletedProcess:
    """`python scripts/<script> <args>`, in this process; returns its exit code, stdout and stderr."""
    main = _script(script).main
    stdout, stderr = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    argv = sys.argv
    sys.argv = [str(REPO / "scripts" / script), *args]
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if isinstance(exit_.code, str):  # sys.exit("message"): the interpreter prints it on stderr
            stderr.write(exit_.code + "\n")
    finally:
        sys.argv = argv
        GlobalHydra.instance().clear()
        # Hydra configured logging for the job (console + a log file in its run directory): undo that.
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
    return subprocess.CompletedProcess(sys.argv, code, stdout.getvalue(), stderr.getvalue())
