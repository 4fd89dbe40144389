"""Checks of settings, in one place: each returns the value or raises `ConfigError` naming the setting, the
value it got and what it must be, e.g. `optim.beta2=1.5 must be a number >= 0 and < 1`.

Plain Python (the pure-PyTorch model uses them too). Booleans are refused where numbers are expected: YAML
reads `true` as a bool, and Python would silently count it as 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from tinylm.errors import ConfigError


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
    bounds = [
        f"{sign} {bound:g}"
        for sign, bound in ((">", above), (">=", at_least), ("<", below), ("<=", at_most))
        if bound is not None
    ]
    numeric = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    within = numeric and (
        (above is None or value > above)
        and (at_least is None or value >= at_least)
        and (below is None or value < below)
        and (at_most is None or value <= at_most)
    )
    if not within:
        infinite = isinstance(value, float) and not math.isfinite(value)
        what = ("a finite number" if infinite else "a number") + "".join(
            f" {b}" for b in [" and ".join(bounds)] if b
        )
        raise ConfigError(f"{name}={value!r} must be {what}" + (f" ({hint})" if hint else ""))
    return value


def choice(name: str, value: Any, choices: Iterable[str]) -> str:
    choices = list(choices)
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")
    return value


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
