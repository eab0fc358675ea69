"""Resolution: schema defaults <- paper recipe <- the user's config <- ``--set`` overrides,
then the schema's types and the rules that need nothing but the config."""

from __future__ import annotations

import copy

from . import rules
from .identity import DERIVED_KEYS
from .load import apply_overrides, pop_key
from .recipes import recipe
from .schema import Config, ConfigError, check_types


def validate(
    config: dict | Config | None, *, overrides: list[str] = ()
) -> tuple[Config, list[str]]:
    """``(config, problems)``: the resolved config and every problem it shows on its own,
    reported rather than raised so that the caller can add the ones it finds and raise
    once. Keys the schema rejects are left at their recipe's or default value.
    A malformed ``--set`` raises at once: there is nothing to resolve."""
    user = apply_overrides(
        config.to_dict() if isinstance(config, Config) else config or {}, list(overrides)
    )
    for key in DERIVED_KEYS:
        pop_key(user, key)
    kept, problems, rejected = check_types(user)
    partial = Config.model_validate(kept)
    try:
        defaults = recipe(partial.model.name, partial.data.dataset, partial.recipe)
    except ValueError:  # an unknown model: the rules say so
        defaults = {}
    merged = _deep_merge(Config().to_dict(), _deep_merge(defaults, _strip_none(kept)))
    cfg = Config.model_validate(merged)
    return cfg, problems + rules.check(cfg, rejected=rejected)


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
    cfg, problems = validate(config, overrides=overrides)
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


def _strip_none(d: dict) -> dict:
    """Drop unset (None) leaves so they do not hide the recipe's values."""
    return {k: _strip_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}
