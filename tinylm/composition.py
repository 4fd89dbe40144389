"""Hydra's composition errors, answered with the fix: an unknown choice (`norm=Pre`) gets the nearest one
(`did you mean norm=pre?`) beside Hydra's list, and an unknown key (`model.nlayers=2`) gets the nearest
setting of its section instead of Hydra's advice to append it with `+`, which adds a key nothing reads; a
setting written without its section (`n_head=2`) gets its whole key (`model.n_head`) first.

Hydra ends the command before tinylm runs, leaving only its report (tinylm.cli holds it), so the report's
text is read here: its two messages are pinned by tests/test_first_hour.py, which fails if a Hydra release
words them differently (docs/internals.md). The nearest name is `checks.nearest`, as for tinylm's own
settings; a section's keys come from composing the config again with Hydra's public Compose API.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf

from tinylm import checks
from tinylm.errors import ConfigError
from tinylm.overrides import OverrideError, parse

# hydra/_internal/defaults_list.py (MissingConfigException) and config_loader_impl.py (ConfigCompositionException).
MISSING_CHOICE = re.compile(r"Could not find '(?P<group>[^']+)/(?P<choice>[^'/]*)'")
OPTIONS = re.compile(r"Available options in '(?P<group>[^']+)':\n(?P<options>(?:\t[^\n]*\n?)+)")
UNKNOWN_KEY = re.compile(r"Could not override '(?P<key>[^']+)'\.\nTo append to your config use \+")


def with_fix(report: str, one_line: str, config_module: str, config_name: str, argv: Sequence[str]) -> str:
    """`one_line` (Hydra's `report` as one line) with the nearest choice or key named, where one is near."""
    missing, options = MISSING_CHOICE.search(report), OPTIONS.search(report)
    if missing and options and options["group"] == missing["group"]:
        listed = [line.strip() for line in options["options"].splitlines() if line.strip()]
        near = checks.nearest(missing["choice"], listed) if missing["choice"] else None
        if near is None:
            return one_line
        return one_line.replace(missing[0], f"{missing[0]}: did you mean {missing['group']}={near}?", 1)
    unknown = UNKNOWN_KEY.search(report)
    if unknown:
        return unknown_key(unknown["key"], config_module, config_name, argv) or one_line
    return one_line


def unknown_key(key: str, config_module: str, config_name: str, argv: Sequence[str]) -> str | None:
    """`model.nlayers is not a setting; did you mean model.n_layer?` (checks.known_keys' words), from the keys
    its section has with the groups chosen on the command line; None if the section cannot be composed."""
    section_name, _, name = key.rpartition(".")
    config = compose(config_module, config_name, group_choices(argv))
    section = OmegaConf.select(config, section_name) if section_name and config is not None else config
    if not isinstance(section, DictConfig):
        return None
    if owners := choices_with_key(config_module, config_name, argv, section_name, name):
        # `optim.muon_lr=…` without `optim=muon`: the setting exists, under another choice of its group
        return f"{key} is a setting of {' or '.join(owners)} only: add {owners[0]}"
    if name in section:
        return None
    paths = setting_paths(config)
    # A setting written without its section, or under another (`n_head=2`: model.n_head): its own key comes
    # before any near name, which would be another setting (`threads`).
    if exact := [path for path in paths if path.rpartition(".")[2] == name and path != key]:
        return f"{key} is not a setting; did you mean {' or '.join(exact)}?"
    if not section_name:  # a bare key: the nearest of every key's last part (`nhead`: model.n_head)
        near = checks.nearest(name, {path.rpartition(".")[2] for path in paths})
        if near is not None:
            named = [near] if near in config else [path for path in paths if path.rpartition(".")[2] == near]
            return f"{key} is not a setting; did you mean {' or '.join(named)}?"
    try:
        checks.known_keys(f"{section_name}." if section_name else "", {name: None}, section.keys())
    except ConfigError as error:
        elsewhere = keys_named(config, name) if checks.nearest(name, section.keys()) is None else []
        if elsewhere:  # `trainer.max_step=100`: nothing near in trainer, a near setting elsewhere
            return f"{key} is not a setting; did you mean {' or '.join(elsewhere)}?"
        return str(error)
    return None


def choices_with_key(
    config_module: str, config_name: str, argv: Sequence[str], group: str, name: str
) -> list[str]:
    """The choices of the config group `group` whose section has the setting `name` (`optim`, `muon_lr`:
    `optim=muon`), the command line's other group choices kept; none if `group` is not a group."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_module(config_module.removeprefix("pkg://"), version_base="1.3"):
        options = GlobalHydra.instance().config_loader().get_group_options(group) if group else []
    others = [choice for choice in group_choices(argv) if not choice.startswith(f"{group}=")]
    owners = []
    for option in options:
        config = compose(config_module, config_name, [*others, f"{group}={option}"])
        section = OmegaConf.select(config, group) if config is not None else None
        if isinstance(section, DictConfig) and name in section:
            owners.append(f"{group}={option}")
    return owners


def setting_paths(config: DictConfig) -> list[str]:
    """Every key of `config`, top-level and nested, in the config's order (`seed`, `model`, `model.n_head`)."""
    paths: list[str] = []

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append(f"{prefix}{key}")
                walk(value, f"{prefix}{key}.")

    walk(OmegaConf.to_container(config, resolve=False), "")
    return paths


def keys_named(config: DictConfig, name: str) -> list[str]:
    """The nested keys of `config` whose last part is `name` (`max_steps` -> `trainer.max_steps`), or, when
    none is, whose last part is nearest to it (`max_step`)."""
    nested = [path for path in setting_paths(config) if "." in path]
    exact = [path for path in nested if path.rpartition(".")[2] == name]
    if exact:
        return exact
    near = checks.nearest(name, {path.rpartition(".")[2] for path in nested})
    return [path for path in nested if path.rpartition(".")[2] == near]


def group_choices(argv: Sequence[str]) -> list[str]:
    """The command line's group choices (`data=text`), which decide what keys a section has; sweeps and
    anything unparsable left out."""
    try:
        typed = parse([arg for arg in argv if "=" in arg and not arg.startswith("-")])
    except OverrideError:
        return []
    return [choice.text for choice in typed if choice.is_group and not choice.sweep and choice.value]


def compose(config_module: str, config_name: str, overrides: list[str]) -> DictConfig | None:
    """The config as Hydra composes it (Compose API), or None if these overrides cannot compose it."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException

    for attempt in (overrides, []):
        try:
            with initialize_config_module(config_module.removeprefix("pkg://"), version_base="1.3"):
                return compose(config_name, overrides=attempt)
        except HydraException:
            continue
    return None
