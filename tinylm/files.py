"""Files written so that no reader, and no crash, ever sees half of one: the content goes to a temporary file
beside the target, is flushed to disk, and is renamed over the target (a rename within a directory is
atomic). Checkpoints, the token cache and run records all go through here."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def temporary_sibling(target: Path) -> Path:
    """A unique hidden name beside `target`; the `.tmp` suffix keeps it out of globs like `*.ckpt`."""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")


def write_atomically(target: Path, write: Callable[[IO[bytes]], Any], remove_stale: bool = False) -> None:
    """Write `target` through `write(file)`, atomically and durably. `remove_stale` also removes temporary
    files that killed writers left beside it: only for a target one process writes (a held run directory)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_sibling(target)
    try:
        with open(temporary, "xb") as file:  # "x": never clobber; mode 0o666 less the umask, like any file
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # makes the rename durable; not every filesystem syncs a directory
        descriptor = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    if remove_stale:
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            stale.unlink(missing_ok=True)


def plain(value: Any) -> Any:
    """`value` as JSON can hold it: dataclasses as dicts, paths as text, and non-finite floats as the
    strings "inf", "-inf" and "nan" (JSON has no such numbers; `float()` reads the strings back)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = vars(value)
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_json(target: Path, value: Any) -> None:
    """Write `plain(value)` as indented JSON, atomically."""
    text = json.dumps(plain(value), indent=2) + "\n"
    write_atomically(target, lambda file: file.write(text.encode("utf-8")))
