"""The run config: what a cell is, before anything runs. Imports no torch, nor the data.

A config is a nested dict (YAML on disk) of sections. Resolution order, each layer
overriding the one before::

    schema defaults  <-  paper recipe for (dataset, model)  <-  user file  <-  --set k=v

Who owns which fact (one owner each; the others import it):

- :mod:`.schema`: the keys, their types and defaults, the values a key allows, and what a
  wrong type or an unknown key is called (pydantic checks, our words).
- :mod:`.recipes`: the paper's hyper-parameters per pre-training set (fill unset keys).
- :mod:`.load`: YAML (1.2 floats), config files, ``--set`` overrides, dotted keys.
- :mod:`.resolve`: the order above; :func:`resolve` = resolution + every rule that needs
  the config alone.
- :mod:`.rules`: the rules across keys, and those needing one more fact (the set's size,
  the run's length, the launch), each written once.
- :mod:`.counts`: how counts are written (``"9M"``, ``0.1``), a subset's size, and the
  one conversion of a duration into steps (:func:`to_steps`).
- :mod:`.identity`: the cell id (the run folder's name) and the keys it leaves out.
- :mod:`vitscale.plan` (above the data layer): the facts only the data and the launch
  know (the set's size, so the run's length; the processes; the datasets being there),
  checked once per entry point by ``plan()``.
"""

from __future__ import annotations

from .counts import to_steps
from .identity import DERIVED_KEYS, OPERATIONAL_KEYS, cell_id
from .load import apply_overrides, load_yaml, set_key, yaml_load
from .resolve import resolve, validate
from .rules import launch_problems, length_checks, subset_checks
from .schema import Config, ConfigError

__all__ = [
    "Config",
    "ConfigError",
    "resolve",
    "validate",
    "load_yaml",
    "yaml_load",
    "apply_overrides",
    "set_key",
    "cell_id",
    "OPERATIONAL_KEYS",
    "DERIVED_KEYS",
    "to_steps",
    "subset_checks",
    "length_checks",
    "launch_problems",
]
