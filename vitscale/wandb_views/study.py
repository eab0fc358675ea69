"""The grid a W&B view is about: its name (= the W&B group), its cells (= W&B runs, run id
= cell id) and the transfer metrics its cells measure, read from a grid file (before or
while it runs) or from its run folders (config.json of each cell). No W&B, no network.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import record as rf
from ..config.schema import WandbConfig
from ..errors import UserError


class StudyError(UserError, ValueError):
    """A grid file or run folders that do not describe one grid."""


@dataclass(frozen=True)
class CellInfo:
    """One cell as a dashboard shows it (one W&B run)."""

    id: str
    model: str
    family: str
    size: str | None
    patch: int | None
    subset: Any  # as written in the config: "5k", 10000, 0.1
    num_examples: int | None  # resolved subset size; known once the cell has started
    status: str | None  # from its run folder; None when read from a grid file


@dataclass(frozen=True)
class Study:
    """One grid: what its W&B workspace and report are built from."""

    group: str  # the grid name = every cell's W&B group
    cells: tuple[CellInfo, ...]
    fewshot: tuple[tuple[str, int], ...]  # (dataset, k) pairs some cell evaluates
    finetune: tuple[str, ...]  # datasets some cell fine-tunes on
    grid_file: Path | None = None  # the grid file read, or the one the run folders record
    run_dirs: tuple[Path, ...] = ()  # the run folders, when read from them
    targets: tuple[tuple[str | None, str], ...] = ()  # the cells' (wandb.entity, .project)

    def target(self, entity: str | None, project: str | None) -> tuple[str, str]:
        """Where the view reads the cells from: ``entity`` and ``project`` (the flags) or,
        where one is not given, the one the cells log to (their ``wandb`` section). A flag
        that differs from where they log is kept, and said: the view would find no runs."""
        chosen = []
        for flag, given, logged in (
            ("--entity", entity, {e for e, _ in self.targets}),
            ("--project", project, {p for _, p in self.targets}),
        ):
            key, found = f"wandb.{flag[2:]}", ", ".join(sorted(map(str, logged))) or "none"
            if given is None and (len(logged) != 1 or None in logged):
                said = (
                    f"set {key} to several values ({found})" if len(logged) > 1 else f"set no {key}"
                )
                raise StudyError(
                    f"{flag}: give it: the grid's cells {said}; or set {key} in the grid's base"
                )
            if given is not None and logged - {None} and logged != {given}:  # None: W&B's own
                print(
                    f"warning: {flag} {given}: the grid's cells log to {key} {found}, so the "
                    f"view will find none of them there; set {key}: {given} in the grid",
                    file=sys.stderr,
                )
            chosen.append(given if given is not None else next(iter(logged)))
        return chosen[0], chosen[1]

    @property
    def models(self) -> list[str]:
        """Model names in a stable order: family, then name."""
        from ..catalog import FAMILIES

        fam = {c.model: c.family for c in self.cells}
        return sorted(fam, key=lambda m: (FAMILIES.index(fam[m]), m))


def _cell(config: Mapping[str, Any], cell_id: str, status: str | None) -> CellInfo:
    from ..catalog import model_columns

    model = config["model"]["name"]
    family, size, patch = model_columns(model)
    data = config.get("data") or {}
    return CellInfo(
        id=cell_id,
        model=model,
        family=family,
        size=size,
        patch=patch,
        subset=data.get("subset"),
        num_examples=data.get("num_examples"),
        status=status,
    )


def _with_settings(
    cells: Sequence[CellInfo], configs: Sequence[Mapping[str, Any]]
) -> tuple[CellInfo, ...]:
    """The cells with their setting after the model's name ("ViT-Femto/8 lr=0.003") where
    cells of one model, subset and duration differ in more than their seed: each setting
    gets its own colour and line, as in the figures (:mod:`analysis.settings`)."""
    import dataclasses

    import pandas as pd

    from analysis import settings

    flat = pd.json_normalize([dict(c) for c in configs], sep=".")
    points = pd.DataFrame(
        {
            "model": [c.model for c in cells],
            "subset": [str(c.subset) for c in cells],
            "steps": [str((cfg.get("train") or {}).get("steps")) for cfg in configs],
        },
        index=flat.index,
    )
    labels = settings.labels(flat, points)
    return tuple(
        dataclasses.replace(c, model=f"{c.model} {label}") if label else c
        for c, label in zip(cells, labels, strict=True)
    )


def _targets(configs: Iterable[Mapping[str, Any]]) -> tuple[tuple[str | None, str], ...]:
    """The (entity, project) pairs the cells log to (a config without a wandb section
    logged to the schema's default project)."""
    default = WandbConfig().project
    pairs = {
        ((c.get("wandb") or {}).get("entity"), (c.get("wandb") or {}).get("project") or default)
        for c in configs
    }
    return tuple(sorted(pairs, key=str))


def _metrics(configs: Iterable[Mapping[str, Any]]) -> tuple[tuple, tuple]:
    fewshot: dict[tuple[str, int], None] = {}
    finetune: dict[str, None] = {}
    for config in configs:
        ev = config.get("eval") or {}
        fs = ev.get("fewshot") or {}
        for ds in fs.get("datasets") or ():
            for k in fs.get("shots") or ():
                fewshot[(ds, int(k))] = None
        for ds in (ev.get("finetune") or {}).get("datasets") or ():
            finetune[ds] = None
    return tuple(sorted(fewshot)), tuple(sorted(finetune))


def from_grid_file(path: str | os.PathLike, *, overrides: Sequence[str] = ()) -> Study:
    """The cells a grid file expands to (``overrides`` as in ``vitscale grid --set``)."""
    from ..grid.spec import load_grid

    try:
        grid = load_grid(path, overrides=list(overrides))
    except ValueError as e:  # GridError, ConfigError: one message per problem
        raise StudyError(str(e)) from None
    configs = [c.config.to_dict() for c in grid.cells]
    fewshot, finetune = _metrics(configs)
    cells = tuple(_cell(cfg, c.id, None) for cfg, c in zip(configs, grid.cells, strict=True))
    cells = _with_settings(cells, configs)
    return Study(
        grid.name, cells, fewshot, finetune, grid_file=Path(path), targets=_targets(configs)
    )


def from_runs(paths: Sequence[str | os.PathLike]) -> Study:
    """The cells of run folders (a grid folder, or run folders of one grid)."""
    from ..record.cells import RunFolderError, cell_status, find_run_folders

    try:
        folders, problems = find_run_folders(paths)
    except FileNotFoundError as e:
        raise StudyError(str(e)) from None
    for p in [p for p in problems if p.stale]:
        print(f"note: {p}", file=sys.stderr)
    if not folders:
        raise StudyError(
            f"no run folders (directories with {rf.CONFIG}) under {' '.join(map(str, paths))}"
        )
    configs, cells = [], []
    for folder in folders:
        try:
            config = rf.read_json(folder / rf.CONFIG)
            status = cell_status(folder)
            cells.append(_cell(config, config.get("cell_id") or folder.name, status))
        except (OSError, ValueError, KeyError, TypeError, RunFolderError) as e:
            raise StudyError(f"{folder}: cannot read the cell: {e}") from None
        configs.append(config)
    groups = sorted(
        {c.get("grid") or Path(f).parent.name for c, f in zip(configs, folders, strict=True)}
    )
    if len(groups) > 1:
        raise StudyError(
            f"the run folders belong to {len(groups)} grids ({', '.join(groups)}); "
            "a W&B view shows one grid: give one grid folder (runs/<grid>)"
        )
    fewshot, finetune = _metrics(configs)
    cells = _with_settings(cells, configs)
    files = {c.get("grid_file") for c in configs}
    return Study(
        groups[0],
        cells,
        fewshot,
        finetune,
        grid_file=Path(files.pop()) if len(files) == 1 and None not in files else None,
        run_dirs=tuple(folders),
        targets=_targets(configs),
    )


def load_study(source: str | os.PathLike, *, overrides: Sequence[str] = ()) -> Study:
    """A grid file (``*.yaml``/``*.yml``) or run folders."""
    path = Path(source)
    if path.is_file() and path.suffix in (".yaml", ".yml"):
        return from_grid_file(path, overrides=overrides)
    if overrides:
        raise StudyError("--set applies to a grid file, not to run folders")
    if not path.exists():
        raise StudyError(f"no such grid file or run folder: {path}")
    if path.is_file():
        raise StudyError(f"{path}: expected a grid file (.yaml) or a folder of runs")
    return from_runs([path])
