"""Command-line overrides (`norm=pre`, `+trainer.max_steps=5`, `optim.lr=1e-3`) read one way everywhere, by
Hydra's own override parser: a run's name, its TensorBoard hparams and the sweep report's settings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from tinylm.errors import UserError

# Where a run goes and how it is run, not what it is: left out of its name and of the report's settings.
NOT_A_CHOICE = ("ckpt_path", "run_dir", "run_name", "threads", "latest_link", "hydra.")
# Config groups that say how a run is launched, searched for or logged, not what it is; and Hydra's own.
NOT_A_DESIGN_GROUP = ("launcher", "hparams_search", "logger", "hydra/")


class OverrideError(UserError, ValueError):
    """An override that Hydra's grammar cannot parse."""


@dataclass(frozen=True)
class Choice:
    """One override: `key` as typed without its `+`/`~`/`++` (`trainer.max_steps`, or a group: `norm`), the
    value as Hydra reads it (`1e-3` is `0.001`), and the override as typed."""

    key: str
    value: str
    text: str
    sweep: bool = False  # a sweep over several values (`act=gelu,swiglu`, `optim.lr=interval(1e-4,1e-2)`)
    # The value as Hydra types it (0.0012502860637525488 a float, 3 an int, pre a str); `value` for a sweep or
    # a list or dict, which are not one comparable value.
    typed: Any = None

    @property
    def is_group(self) -> bool:
        """A config group's choice (`model=small`) rather than a setting (`model.d_model=64`)."""
        return "." not in self.key


def parse(overrides: Sequence[str]) -> list[Choice]:
    """Every override, parsed; an unparsable one raises `OverrideError` with Hydra's reason."""
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides([str(line) for line in overrides])
    except OverrideParseException as err:
        raise OverrideError(f"cannot parse {err.override!r}: {str(err.message).splitlines()[0]}") from None
    return [
        Choice(o.key_or_group, o.get_value_string() if o.is_sweep_override() else o.get_value_element_as_str(),
               o.input_line or "", o.is_sweep_override(), _typed(o))
        for o in parsed
    ]  # fmt: skip


def _typed(override: Any) -> Any:
    if override.is_sweep_override():
        return override.get_value_string()
    value = override.value()
    return (
        value
        if value is None or isinstance(value, bool | int | float | str)
        else override.get_value_element_as_str()
    )


def typed_value(text: str) -> Any:
    """`1e-3` -> 0.001, `3` -> 3, `pre` -> "pre": a value written as text, typed as Hydra types an override."""
    return parse([f"value={text}"])[0].typed


def typed_choice(value: Any) -> Any:
    """A choice's value as a file holds it: already typed (JSON), or as text (files written before choices
    kept their type), typed as Hydra would; text Hydra cannot read stays text."""
    if not isinstance(value, str):
        return value
    try:
        return typed_value(value)
    except OverrideError:
        return value


def shown(value: Any) -> str:
    """A choice's value as tables and labels print it: a float to 6 significant digits where that is shorter
    (an Optuna trial's 0.0012502860637525488 is shown 0.00125029, and still compared as itself)."""
    if isinstance(value, float):
        short = f"{value:.6g}"
        return short if len(short) < len(str(value)) else str(value)
    return str(value)


def choices(overrides: Sequence[str]) -> list[Choice]:
    """The overrides that say what a run is: all but those naming where it goes and how it runs."""
    return [choice for choice in parse(overrides) if not choice.key.startswith(NOT_A_CHOICE)]


def run_label(overrides: Sequence[str], max_chars: int = 100, only: Collection[str] | None = None) -> str:
    """A run's name from its command-line overrides, e.g. `norm=pre,act=swiglu`, safe as a directory name:
    group choices first, as given (they say what the run is), then settings, sorted; a long name is cut,
    keeping a hash of the whole so that names stay unique. `only`: the keys to name it by (a sweep's job is
    named by the keys the sweep varies)."""
    kept = [c for c in choices(overrides) if only is None or c.key in only]
    groups = [c.text for c in kept if c.is_group]
    label = ",".join(groups + sorted(c.text for c in kept if not c.is_group))
    label = label.replace("/", "_").replace("\\", "_") or "default"
    if len(label) > max_chars:
        digest = hashlib.sha1(label.encode()).hexdigest()[:8]
        label = f"{label[: max_chars - 9]}~{digest}"
    return label
