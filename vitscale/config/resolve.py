"""Resolution: schema defaults <- paper recipe <- the user's config <- ``--set`` overrides,
then the schema's types and the rules that need nothing but the config."""

from __future__ import annotations

import copy
from typing import Any

from . import rules
from .identity import DERIVED_KEYS
from .load import apply_overrides, pop_key
from .recipes import choose, recipe
from .schema import Config, ConfigError, check_types


def validate(
    config: dict | Config | None, *, overrides: list[str] = ()
) -> tuple[Config, list[str], dict[str, Any]]:
    """``(config, problems, from_recipe)``: the resolved config, every problem it shows on
    its own (reported rather than raised so that the caller can add the ones it finds and
    raise once), and the values its recipe filled (dotted keys the config left unset).
    Keys the schema rejects are left at their recipe's or default value. The resolved
    ``recipe`` names the recipe applied. A malformed ``--set`` raises at once: there is
    nothing to resolve."""
    user = apply_overrides(
        config.to_dict() if isinstance(config, Config) else config or {}, list(overrides)
    )
    for key in DERIVED_KEYS:
        pop_key(user, key)
    written = _flat(_strip_none(user))  # a value the schema rejects is still the user's
    kept, problems, rejected = check_types(user)
    partial = Config.model_validate(kept)
    name = partial.recipe or choose(partial.data.dataset)
    try:
        defaults = recipe(partial.model.name, partial.data.dataset, name)
    except ValueError:  # an unknown model: the rules say so
        defaults = {}
    user = _strip_none(kept)
    merged = _deep_merge(Config().to_dict(), _deep_merge(defaults, user))
    merged["recipe"] = name
    cfg = Config.model_validate(merged)
    from_recipe = {k: v for k, v in _flat(defaults).items() if k not in written}
    return cfg, problems + rules.check(cfg, rejected=rejected), from_recipe


def resolve(
    config: dict | Config | None = None,
    *,
    overrides: list[str] = (),
    source: str | None = None,
    num_processes: int | None = None,
) -> Config:
    """The config alone, resolved and validated; raises ConfigError listing every problem.

    ``num_processes`` adds the checks of a launch on that many processes; a length given
    in steps is checked too. Entry points call :func:`vitscale.plan.plan` instead, which
    also checks what needs the data.
    """
    cfg, problems, _ = validate(config, overrides=overrides)
    if not problems and num_processes:
        problems = rules.launch_problems(cfg, num_processes)
    if not problems and cfg.train.steps is not None:
        problems = rules.length_checks(cfg, cfg.train.steps)[0]
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _strip_none(d: dict) -> dict:
    """Drop unset (None) leaves so they do not hide the recipe's values."""
    return {k: _strip_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}
