"""Cells that share their stable phase (docs/schedules.md): trunks and branches.

Cells whose resolved configs differ only in their duration (``train.steps``, ``epochs`` or
``examples``), with a schedule that does not depend on the run's length before its
cooldown (``wsd``, ``rsqrt``), compute the same states up to the shorter one's cooldown
start. Of each such family the longest cell is the trunk: it runs as any cell and keeps its
checkpoint at every other member's cooldown start (``branch.keep``); each other member is a
branch that starts from there (``branch.trunk``, ``branch.step``) and runs its own cooldown.
A trunk is a cell of the grid, not an extra run: nothing is trained that the grid does not
report, and every cell keeps its id and run folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..config import cooldown_start
from ..config.identity import DERIVED_KEYS, OPERATIONAL_KEYS
from ..config.load import pop_key

DURATION_KEYS = ("train.steps", "train.epochs", "train.examples")


@dataclass(frozen=True)
class Family:
    """A trunk and its branches, each with the step it branches at (its cooldown start)."""

    trunk: Any  # vitscale.grid.spec.Cell
    branches: tuple[tuple[Any, int], ...]


def _without_duration(cell) -> str:
    d = cell.config.to_dict()
    for key in (*DURATION_KEYS, *OPERATIONAL_KEYS, *DERIVED_KEYS):
        pop_key(d, key)
    return json.dumps(d, sort_keys=True, default=str)


def families(cells) -> list[Family]:
    """The grid's trunks and branches; a cell in none runs alone."""
    groups: dict[str, list[tuple[Any, int]]] = {}
    for cell in cells:
        steps = cell.plan.total_steps
        start = None if steps is None else cooldown_start(cell.config.optim, steps)
        if start is not None and start > 0:
            groups.setdefault(_without_duration(cell), []).append((cell, start))
    found = []
    for members in groups.values():
        trunk, trunk_start = max(members, key=lambda m: (m[0].plan.total_steps, m[1]))
        branches = tuple((c, s) for c, s in members if c is not trunk and s <= trunk_start)
        if branches:
            found.append(Family(trunk, branches))
    return found


def assign(cells) -> list[Family]:
    """Write each family's branch keys into its cells' configs (operational: ids stay)."""
    found = families(cells)
    for family in found:
        family.trunk.config.branch.keep = sorted({s for _, s in family.branches})
        for cell, step in family.branches:
            cell.config.branch.trunk = family.trunk.id
            cell.config.branch.step = step
    return found
