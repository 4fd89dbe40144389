"""`metrics.json`: how a run ended (status, final metrics, parameters, steps, wall time), for reports and
people; TensorBoard holds the curves. A run directory without it is unfinished: still running, or killed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinylm.files import write_json

RECORD_FILE = "metrics.json"
STATUSES = ("completed", "failed", "diverged", "interrupted")


def write_run_record(run_dir: str | Path, status: str, **fields: Any) -> Path:
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    path = Path(run_dir) / RECORD_FILE
    write_json(path, {"status": status, **fields})
    return path


def read_run_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's record, or None when it has none (unfinished) or it cannot be parsed."""
    try:
        record = json.loads((Path(run_dir) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    return {key: float(value) if value in ("nan", "inf", "-inf") else value for key, value in record.items()}
