"""Checks of settings: each returns the value or raises `ConfigError` naming the setting, the value and what
it must be (`optim.beta2=1.5 must be a number >= 0 and < 1`). Plain Python, for the pure-PyTorch model too.
Booleans are refused as numbers: YAML reads `true` as a bool, which Python would count as 1.
"""

from __future__ import annotations

import difflib
import glob
import math
import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tinylm.errors import ConfigError, CorpusError


def whole_number(name: str, value: Any, minimum: int = 1, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive whole number" if minimum == 1 else f"a whole number >= {minimum}"
        raise ConfigError(f"{name}={value!r} must be {what}" + (f" ({hint})" if hint else ""))
    return value


def number(
    name: str,
    value: Any,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
    hint: str = "",
) -> float:
    """A finite int or float within the bounds given (`above`/`below` exclusive, `at_least`/`at_most` not)."""
    limits = [(">", above, operator.gt), (">=", at_least, operator.ge), ("<", below, operator.lt),
              ("<=", at_most, operator.le)]  # fmt: skip
    numeric = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not (numeric and all(test(value, bound) for _, bound, test in limits if bound is not None)):
        what = "a finite number" if isinstance(value, float) and not math.isfinite(value) else "a number"
        bounds = " and ".join(f"{sign} {bound:g}" for sign, bound, _ in limits if bound is not None)
        raise ConfigError(
            f"{name}={value!r} must be {what} {bounds}".rstrip() + (f" ({hint})" if hint else "")
        )
    return value


def choice(name: str, value: Any, choices: Iterable[str]) -> str:
    choices = list(choices)
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")
    return value


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a mistyped one (`nlayers` -> `n_layer`, `Pre` -> `pre`), or None when none
    is close: difflib's similarity, ignoring case."""
    by_folded = {option.casefold(): option for option in known}
    near = difflib.get_close_matches(name.casefold(), list(by_folded), n=1)
    return by_folded[near[0]] if near else None


def known_keys(prefix: str, values: Mapping[str, Any], known: Iterable[str], see: str = "") -> None:
    """Refuse a key that is not a setting of its section, naming the nearest one that is."""
    known = sorted(known)
    for key in values:
        if key not in known:
            near = nearest(key, known)
            hint = f"did you mean {prefix}{near}?" if near else f"the settings are: {', '.join(known)}"
            raise ConfigError(f"{prefix}{key} is not a setting{see}; {hint}")


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be true or false")
    return value


def sampling(settings: Any, prefix: str = "") -> None:
    """The settings of a sample (`chars`, `temperature`, `top_k`, `seed`, `prompt`), as sample.py takes them
    and as train.py's `sample.` group does (`prefix` names them on the command line)."""
    whole_number(f"{prefix}chars", settings.get("chars"), minimum=0)
    number(
        f"{prefix}temperature",
        settings.get("temperature"),
        above=0,
        hint="1 samples as trained, lower is safer",
    )
    if settings.get("top_k") is not None:
        whole_number(f"{prefix}top_k", settings.get("top_k"), hint="or null for no cut-off")
    whole_number(f"{prefix}seed", settings.get("seed"), minimum=0)
    if settings.get("prompt") is not None and str(settings.get("prompt")) == "":
        raise ConfigError(f"{prefix}prompt= must hold at least one character, or be left unset (null)")


def text_files(patterns: Sequence[str], setting: str | None = None) -> list[Path]:
    """The files that `patterns` (paths, or globs) name, each an existing, non-empty file, else a `CorpusError`
    naming the file (and `setting`, the key the user gave it as: `data.files: text file … does not exist`)."""
    where = f"{setting}: " if setting else ""
    paths: list[Path] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise CorpusError(f"{where}no file matches {pattern!r}; check the pattern")
        paths.extend(Path(match) for match in matches)
    for file in paths:
        if file.is_dir():
            raise CorpusError(
                f"{where}{str(file)!r} is a directory; give a text file, or its files with a glob: "
                f"data.files='{file}/*.txt'"
            )
        if not file.is_file():
            raise CorpusError(f"{where}text file {str(file)!r} does not exist; check the path")
        if file.stat().st_size == 0:
            raise CorpusError(f"{where}text file {str(file)!r} is empty; give a file with some text in it")
    return paths
