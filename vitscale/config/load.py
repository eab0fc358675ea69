"""Reading configs: YAML text and files, ``--set key=value`` overrides, dotted keys."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from .schema import ConfigError


class _Loader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where ``3e-4`` (no dot) is a string; researchers write
    learning rates that way, so floats follow YAML 1.2 here."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"
    ),
    list("-+0123456789."),
)


def yaml_load(text: str, *, source: str | None = None) -> Any:
    """Parse YAML text (configs, grids, profiles, ``--set`` values) with YAML 1.2 floats.
    A syntax error is a :class:`ConfigError` in one line: where in ``source``, and what."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError([f"not valid YAML{where}: {what}"], source) from None


def load_yaml(path: str | Path) -> dict:
    """A config file as a dict of sections (JSON is YAML: a run's config.json reads too)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"config file not found: {path}"])
    data = yaml_load(path.read_text(), source=str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(
            ["the top level must be a mapping of sections (model, data, train, ...)"], str(path)
        )
    return data


def set_key(config: dict, dotted: str, value: Any) -> None:
    """Set ``config["a"]["b"] = value`` for ``dotted = "a.b"``, creating sections."""
    node = config
    *parents, leaf = dotted.strip().split(".")
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError([f"{dotted}: {p!r} is not a section"])
    node[leaf] = copy.deepcopy(value)


def get_key(config: dict, dotted: str) -> Any:
    """``config["a"]["b"]`` for ``dotted = "a.b"``; None where it is not there."""
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def pop_key(config: dict, dotted: str) -> None:
    """Remove ``dotted`` from ``config`` if it is there."""
    *parents, leaf = dotted.split(".")
    node = config
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def apply_overrides(config: dict, overrides: list[str]) -> dict:
    """``["train.steps=100", "optim.lr=3e-4"]`` -> config with those keys set (values as YAML)."""
    config = copy.deepcopy(config)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"--set expects key=value (e.g. train.steps=100), got {item!r}"])
        try:
            value = yaml_load(raw)
        except ConfigError as e:
            raise ConfigError([f"--set {item}: {p}" for p in e.problems]) from None
        set_key(config, key, value)
    return config
