"""`metrics.json`: how a run ended, in its run directory, for reports and people.

TensorBoard holds the curves; this file holds what is not a curve: the status (`completed`, `failed`,
`diverged`, `interrupted`), the final metrics, the parameter count, the optimizer steps taken and the wall time. A run
directory without it is unfinished: still running, or killed before it could write anything.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tinylm.files import write_atomically

RECORD_FILE = "metrics.json"
STATUSES = ("completed", "failed", "diverged", "interrupted")


def _plain(value: Any) -> Any:
    """JSON has no NaN or infinity: non-finite floats are written as strings ("nan", "inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_run_record(run_dir: str | Path, status: str, **fields: Any) -> Path:
    """Write `run_dir/metrics.json` atomically, so a reader never sees half of it."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    run_dir = Path(run_dir)
    record = {"status": status, **{key: _plain(value) for key, value in fields.items()}}
    path = run_dir / RECORD_FILE
    text = json.dumps(record, indent=2, sort_keys=False) + "\n"
    write_atomically(path, lambda file: file.write(text.encode("utf-8")))
    return path


def read_run_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's record, or None when it has none (unfinished) or it cannot be parsed."""
    path = Path(run_dir) / RECORD_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    return {key: float(value) if value in ("nan", "inf", "-inf") else value for key, value in record.items()}
