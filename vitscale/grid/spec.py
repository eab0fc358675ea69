"""Grid files (their format: docs/config.md, "Grid files"): a base config plus blocks of
axes, expanded into cells with stable ids.

A grid is a union of products, because axes apply to some families only (patch size to
ViTs, width to BiT). Each cell is planned once by :func:`vitscale.plan.plan` (recipes
included, checked against its dataset's size and its launch) and identified by its
:func:`vitscale.config.cell_id`; identical cells collapse to one.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import Config, ConfigError, set_key, yaml_load
from ..config.explain import validate
from ..plan import Plan, plan
from .branches import Family, assign
from .profile import Profile, SlurmError, shape_for


class _Part(BaseModel):
    """A part of a grid file: these keys and no others; a key written as null is unset."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _unset_nulls(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


Axes = dict[str, Annotated[list, Field(min_length=1)]]  # key: [values]


class Block(_Part):
    name: str | None = None
    axes: Axes = {}
    zip: Axes = {}  # varied together, not crossed
    set: dict[str, Any] = {}


class Resources(_Part):
    gpus: int = Field(None, ge=0)
    nodes: int = Field(None, ge=1)
    time: str | int = None
    mem_gb: float = Field(None, gt=0)
    cpus_per_gpu: int = Field(None, ge=0)


class GridFile(_Part):
    """A grid file as written (docs/config.md, "Grid files")."""

    name: str | None = None
    description: str = ""
    base: dict[str, Any] = {}
    axes: Axes = {}
    blocks: list[Block] = []  # none: one block of the grid's axes
    retries: int = Field(1, ge=0)
    resources: dict[str, Resources] = {}


class GridError(ValueError):
    """Problems in a grid file, one message each, naming the file, block and key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Cell:
    plan: Plan  # its config, id, length and launch, checked
    block: str
    point: dict[str, Any]  # the axis values that made this cell (for tables)

    @property
    def id(self) -> str:
        return self.plan.cell_id

    @property
    def config(self) -> Config:
        return self.plan.config


@dataclass
class Grid:
    name: str
    path: Path
    cells: list[Cell]
    retries: int = 1
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    description: str = ""
    families: list[Family] = field(default_factory=list)  # trunks and their branches
    # cell id -> the gpus and time sized from its estimate where the grid gives none
    # (vitscale.grid.cost.size_requests); what the grid gives wins
    sized: dict[str, dict[str, Any]] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # --set, applied to every cell

    def resources_for(self, cell: Cell) -> dict[str, Any]:
        return self.sized.get(cell.id, {}) | _resources_for(self.resources, cell.config.model.name)

    def problems_on(self, profile: Profile) -> list[str]:
        """What submitting this grid to ``profile`` would refuse (:func:`resource_problems`)."""
        models = [c.config.model.name for c in self.cells]
        return resource_problems(self.path, self.resources, models, profile)


def _entries(name: str) -> tuple[str, ...]:
    """The ``resources`` entries a model reads, least specific first."""
    from ..catalog import family

    return ("default", family(name), name)


def _resources_for(resources: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    """Resource sizes: ``default`` <- family (ViT/ResNet/Hybrid) <- exact model name."""
    out: dict[str, Any] = {}
    for entry in _entries(name):
        out |= _sizes(resources, entry)
    return out


def _sizes(resources: dict, entry: str) -> dict[str, Any]:
    sizes = resources.get(entry)
    return sizes if isinstance(sizes, dict) else {}  # not a mapping: reported by load_grid


def resource_problems(
    path: Path, resources: dict[str, dict[str, Any]], models: list[str], profile: Profile
) -> list[str]:
    """Every model's resources checked against ``profile`` as submission checks them (the
    profile's limits and the job's shape), each problem once, at the ``resources`` entry
    that set the value: a ``default`` that asks too much is one message, not one per
    model and block. The dry-run prints them; a run refuses the grid with them."""
    problems: list[str] = []
    for name in dict.fromkeys(models):
        origin = {
            key: f"{path}: resources.{entry}"
            for entry in _entries(name)
            for key in _sizes(resources, entry)
        }
        sizes = _resources_for(resources, name)
        problems += profile.check(sizes, where=f"{path}: resources", origin=origin)
        try:
            shape_for(sizes, profile, where=f"{path}: resources", origin=origin)
        except SlurmError as e:
            problems.append(str(e))
    return list(dict.fromkeys(problems))


def _read(raw: dict, path: Path) -> tuple[GridFile, list[str]]:
    """The grid file and one message per key it rejects (:mod:`vitscale.config.explain`),
    naming the block or resources entry the key is in; the rest is still expanded."""
    kept, rejected = validate(GridFile, raw)
    problems = [f"{path}: {_place(raw, r.place)}{r.message}" for r in rejected]
    return GridFile.model_validate(kept), problems


def _place(raw: dict, place: tuple) -> str:
    if not place:
        return ""
    if place[0] == "resources":
        return f"resources.{place[1]}: "
    block = raw["blocks"][place[1]]
    name = block.get("name") if isinstance(block, dict) else None
    return f"block {name or f'#{place[1]}'!r}: "


def _points(axes: dict, zipped: dict, where: str, problems: list[str]) -> list[dict[str, Any]]:
    """The product of ``axes``, each point with every row of the ``zipped`` axes."""
    if len({len(v) for v in zipped.values()}) > 1:
        sizes = ", ".join(f"{k}: {len(v)}" for k, v in zipped.items())
        problems.append(f"{where}.zip: every zipped axis needs the same number of values ({sizes})")
        return []
    if overlap := set(axes) & set(zipped):
        problems.append(f"{where}: {', '.join(sorted(overlap))} is both an axis and a zip axis")
        return []
    rows = [dict(zip(zipped, row, strict=True)) for row in zip(*zipped.values(), strict=True)]
    return [
        dict(zip(axes, values, strict=True)) | row
        for values in itertools.product(*axes.values())
        for row in rows or [{}]
    ]


def load_grid(
    path: str | Path,
    *,
    num_processes: int | None = None,
    overrides: list[str] = (),
    profile: Profile | None = None,
    running: bool = False,
    data: dict | None = None,
) -> Grid:
    """Parse, expand and plan a grid file; GridError lists every problem found.

    ``overrides`` (``["train.steps=10"]``, values as YAML) apply to every cell last, e.g.
    to try a grid at a fraction of its steps; they change the cells' ids like any edit.
    ``num_processes``: every cell's launch (the local executor's ``--processes``); without
    it, a cell's launch on a cluster ``profile`` is the processes its resources ask for.
    ``running``: the grid is about to run: with a ``profile``, every cell's resources
    must fit it (:func:`resource_problems`). ``data``: how its datasets are checked,
    :func:`~vitscale.plan.plan`'s ``check_data``, ``absent_ok`` and ``verify``; None: not.
    """
    path = Path(path)
    if not path.is_file():
        raise GridError([f"{path}: grid file not found"])
    try:
        raw = yaml_load(path.read_text(), source=str(path)) or {}
    except ConfigError as e:
        raise GridError([str(e)]) from None
    if not isinstance(raw, dict):
        raise GridError(
            [f"{path}: the top level must be a mapping (name, base, axes, blocks, ...)"]
        )
    grid, problems = _read(raw, path)
    resources = {entry: r.model_dump(exclude_unset=True) for entry, r in grid.resources.items()}
    grid_points = _points(grid.axes, {}, f"{path}: axes", problems)
    models: list[str] = []  # every resolved cell's model, whatever its other problems
    plan_cell = _planner(resources, profile, num_processes, overrides, data or {}, models)
    origin = _Origin(path=path, base=grid.base, overrides=overrides)
    name, blocks = grid.name or path.stem, grid.blocks or [Block(name="all")]
    cells = _cells(blocks, grid_points, grid.base, name, origin, plan_cell, problems)
    if running and profile:
        problems += resource_problems(path, resources, models, profile)
    if problems:
        raise GridError(list(dict.fromkeys(problems)))
    if not cells:
        raise GridError([f"{path}: the grid expands to no cells"])
    found = list(cells.values())
    families = assign(found)  # cells that share their stable phase (docs/schedules.md)
    return Grid(
        name, path, found, grid.retries, resources, grid.description, families, {}, list(overrides)
    )


def _planner(
    resources: dict,
    profile: Profile | None,
    num_processes: int | None,
    overrides: list[str],
    data: dict,
    models: list[str],
) -> Callable[[dict], Plan]:
    """How a cell's config is planned: its launch and its datasets (``data``). Its
    resources on a profile are the grid's to check, once (:func:`resource_problems`), for
    the ``models`` every resolved config adds to."""

    def launch(cfg: Config) -> int | None:  # on the cluster: the processes it asks for
        try:
            shape = shape_for(_resources_for(resources, cfg.model.name), profile)
        except SlurmError:  # reported by resource_problems
            return None
        return shape.nodes * shape.tasks_per_node

    return lambda config: plan(
        config,
        overrides=overrides,
        num_processes=num_processes if num_processes or profile is None else launch,
        **data,
        extra_checks=lambda cfg: models.append(cfg.model.name) or [],
    )


@dataclass(frozen=True)
class _Origin:
    """Where a cell's key was written, so that a problem is blamed on it, once: ``--set``
    (applied last), the block, the grid's top-level ``axes:``, or ``base:``."""

    path: Path
    base: dict
    overrides: list[str]

    def where(self, problem: str, *, block: str, block_keys: set[str], axes_keys: set[str]) -> str:
        m = re.match(r"unknown key '([\w.]+)'|(\w+(?:\.\w+)*)\b", problem)
        key = (m.group(1) or m.group(2)) if m else ""

        def wrote(keys) -> str | None:  # the key, or a key under the section named
            return next((k for k in keys if k == key or k.startswith(key + ".")), None)

        if written := wrote(o.partition("=")[0] for o in self.overrides):
            return f"--set {written}={self._set(written)}: {problem}"
        if wrote(block_keys):
            return f"{self.path}: block {block!r}: {problem}"
        if wrote(axes_keys):
            return f"{self.path}: axes: {problem}"
        if wrote(_flat_keys(self.base)):
            return f"{self.path}: base: {problem}"
        return f"{self.path}: {problem}"  # a rule between keys of every block

    def _set(self, key: str) -> str:
        return next(o.partition("=")[2] for o in self.overrides if o.partition("=")[0] == key)


def _flat_keys(d: dict, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in d.items():
        key = f"{prefix}{k}"
        out |= _flat_keys(v, key + ".") if isinstance(v, dict) else {key}
    return out


def _cells(
    blocks: list[Block],
    grid_points: list[dict[str, Any]],
    base: dict,
    name: str,
    origin: _Origin,
    plan_cell: Callable[[dict], Plan],
    problems: list[str],
) -> dict[str, Cell]:
    """Every block's cells, planned, identical ones collapsed; each problem is reported
    once, at the key that caused it (:class:`_Origin`), not once per cell or block."""
    cells: dict[str, Cell] = {}
    path = origin.path
    for b, block in enumerate(blocks):
        label = block.name or f"#{b}"
        fixed = block.set
        for gp in grid_points:
            for bp in _points(block.axes, block.zip, f"{path}: block {label!r}", problems):
                try:
                    config = copy.deepcopy(base)
                    ran = {"grid": name, "grid_file": str(path.resolve())}
                    for key, value in (gp | fixed | bp | ran).items():
                        set_key(config, key, value)
                    cell = Cell(plan_cell(config), label, gp | bp)
                except ConfigError as e:
                    for p in e.problems:
                        said = origin.where(
                            p, block=label, block_keys=set(fixed) | set(bp), axes_keys=set(gp)
                        )
                        if said not in problems:
                            problems.append(said)
                    continue
                cells.setdefault(cell.id, cell)
    return cells
