"""Transitional, for the trainer (vitscale/train/loop.py) until it takes a Plan: delete
this module then. Its checks are :func:`vitscale.plan.plan`'s."""

from __future__ import annotations

from types import SimpleNamespace

from .config import Config, ConfigError
from .plan import dataset_size, plan

__all__ = ["preflight", "dataset_size"]


def preflight(
    cfg: Config, *, dataset_size: int | None = None, num_processes: int | None = None
) -> SimpleNamespace:
    """``.problems``: :func:`vitscale.plan.plan`'s (it finds the set's size itself)."""
    try:
        plan(cfg, num_processes=num_processes)
    except ConfigError as e:
        return SimpleNamespace(problems=e.problems)
    return SimpleNamespace(problems=[])
