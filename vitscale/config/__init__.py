"""The run config: what a cell is, before anything runs. Imports no torch, nor the data.

A config is a nested dict (YAML on disk) of sections. Resolution order, each layer
overriding the one before::

    schema defaults  <-  paper recipe for (dataset, model)  <-  user file  <-  --set k=v

Which module owns which fact: docs/design.md, "One owner for each fact". What only the
data and the launch know is checked by :func:`vitscale.plan.plan`, once per entry point.
"""

from __future__ import annotations

from .counts import cooldown_start, cooldown_steps, to_steps
from .identity import cell_id
from .load import load_yaml, set_key, yaml_load
from .resolve import resolve, validate
from .schema import Config, ConfigError

__all__ = [
    "Config",
    "ConfigError",
    "resolve",
    "validate",
    "load_yaml",
    "yaml_load",
    "set_key",
    "cell_id",
    "to_steps",
    "cooldown_steps",
    "cooldown_start",
]
