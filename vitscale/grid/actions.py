"""What a (re)submission of a grid does with each cell.

- done: skipped, never run again;
- running (a process holds its lock) or queued (its SLURM job is still pending): skipped;
- failed: rerun while it has retries left (the failed result.json is kept beside as
  ``result.failed-<n>.json``) unless it failed the same way (error and step) as the attempt
  before, which a retry would only repeat; else skipped and reported with its last error and
  how to retry it (``--retry-failed`` gives every failed cell one more attempt);
- otherwise (never started, or interrupted with a checkpoint): submitted; an interrupted
  cell resumes from its checkpoint.

A cell that runs again takes the grid's current values of the keys that change how it runs,
not what it computes (:data:`vitscale.config.identity.OPERATIONAL_KEYS`, left out of its
id): raising ``data.skip_bad_samples`` after a bad example stopped it, or moving
``data.root``, reaches the cell's config.json, and it resumes with them.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import record as rf
from ..config import set_key
from ..config.identity import OPERATIONAL_KEYS
from ..config.load import get_key
from ..record.cells import grid_versions
from .cellrun import is_locked
from .spec import Cell, Grid

JOB_FILE = "job.json"  # the scheduler's id for the cell's latest submission
FAILED_RESULT = "result.failed-{n}.json"


@dataclass(frozen=True)
class Planned:
    cell: Cell
    run_dir: Path
    action: str  # submit, skip-done, skip-running, skip-queued or skip-failed
    note: str = ""


def summary(planned: list[Planned]) -> str:
    """How many cells get each action, e.g. ``2 skip-done, 4 submit``."""
    counts = Counter(p.action for p in planned)
    return ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))


def headline(planned: list[Planned], *, workers: int) -> str:
    """What a local run is about to do, in one line: "8 cells to run (4,800 steps, 2 at a
    time), 0 done", and "~6 min on this machine" where every model to run has a finished
    cell here whose wall-clock time per step (training, evaluation and fine-tuning) says
    it."""
    todo = [p for p in planned if p.action == "submit"]
    done = [p for p in planned if p.action == "skip-done"]
    steps = [p.cell.plan.total_steps for p in todo]
    known = sum(s or 0 for s in steps)
    line = f"{len(todo)} cell{'s' * (len(todo) != 1)} to run"
    if todo:
        line += f" ({known:,} steps, {min(workers, len(todo))} at a time)"
    line += f", {len(done)} done"
    others = Counter(p.action for p in planned if p.action not in ("submit", "skip-done"))
    line += "".join(f", {n} {a.removeprefix('skip-')}" for a, n in sorted(others.items()))
    per_step: dict[str, list[float]] = {}
    for p in done:
        try:
            result = rf.RunResult.read(p.run_dir)
        except (OSError, ValueError):
            continue
        if result.wall_clock_s and result.steps:
            per_step.setdefault(p.cell.config.model.name, []).append(
                result.wall_clock_s / result.steps
            )
    rates = [(s, per_step.get(p.cell.config.model.name)) for s, p in zip(steps, todo, strict=True)]
    if todo and all(s and r for s, r in rates):
        seconds = sum(s * sum(r) / len(r) for s, r in rates) / min(workers, len(todo))
        line += (
            f"; ~{max(1, round(seconds / 60))} min on this machine (its finished cells' step times)"
        )
    return line


def failed_attempts(run_dir: Path) -> int:
    return len(list(run_dir.glob(FAILED_RESULT.format(n="*"))))


def decide(
    grid: Grid, runs_root: Path, *, is_queued=lambda run_dir: False, retry_failed: bool = False
) -> list[Planned]:
    """Decide each cell's action; ``is_queued(run_dir)`` asks the scheduler (SLURM);
    ``retry_failed``: a failed cell that is not retried (module docstring) runs once more."""
    out = []
    for cell in grid.cells:
        run_dir = runs_root / grid.name / cell.id
        result = run_dir / rf.RESULT
        status = failure = None
        if result.is_file():
            try:
                recorded = rf.read_json(result)
                status, failure = recorded.get("status"), _failure(recorded)
            except (OSError, ValueError):
                status = None
        if status == rf.STATUS_DONE:
            out.append(Planned(cell, run_dir, "skip-done"))
        elif is_locked(run_dir):
            out.append(Planned(cell, run_dir, "skip-running"))
        elif is_queued(run_dir):
            out.append(Planned(cell, run_dir, "skip-queued"))
        elif status == rf.STATUS_FAILED:
            attempts = failed_attempts(run_dir) + 1
            if attempts > grid.retries:
                stop = f"failed {attempts} times, last: {failure[0]}"
            elif failure == _failure_before(run_dir, attempts):
                stop = f"failed the same way twice in a row (a retry would too): {failure[0]}"
            else:
                stop = None
            if stop is None:
                out.append(Planned(cell, run_dir, "submit", f"retry {attempts}/{grid.retries}"))
            elif retry_failed:
                out.append(Planned(cell, run_dir, "submit", f"retry {attempts} (--retry-failed)"))
            else:
                out.append(Planned(cell, run_dir, "skip-failed", stop))
        else:
            out.append(Planned(cell, run_dir, "submit"))
    return out


def _failure(result: dict) -> tuple:
    """What makes two failures of a cell the same: its error at the same step."""
    return result.get("error"), result.get("failed_step")


def _failure_before(run_dir: Path, attempts: int) -> tuple | None:
    """The failure of the attempt before the latest (set aside by :func:`prepare`)."""
    try:
        return _failure(rf.read_json(run_dir / FAILED_RESULT.format(n=attempts - 1)))
    except (OSError, ValueError):
        return None


def prepare(planned: Planned) -> list[str]:
    """Make a cell's run folder ready to run: config.json written, or its operational keys
    brought up to the grid's (module docstring), a failure set aside. Returns what changed
    in config.json, one ``key: old -> new`` each."""
    run_dir = planned.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    result = run_dir / rf.RESULT
    if result.is_file():  # a failure being retried: keep it, under its attempt number
        result.rename(run_dir / FAILED_RESULT.format(n=failed_attempts(run_dir) + 1))
    config = run_dir / rf.CONFIG
    wanted = planned.cell.config.to_dict() | {"cell_id": planned.cell.id}
    if planned.cell.plan.data_content:
        wanted["data_content"] = planned.cell.plan.data_content
    if not config.is_file():
        rf.write_json_atomic(config, wanted)
        return []
    recorded = rf.read_json(config)
    changed = []
    for key in OPERATIONAL_KEYS:
        old, new = get_key(recorded, key), get_key(wanted, key)
        if old != new:
            changed.append(f"{key}: {old!r} -> {new!r}")
            set_key(recorded, key, new)
    if changed:
        rf.write_json_atomic(config, recorded)
    return changed


def retry_hint(planned: list[Planned], *, grid_path: Path, runs: Path) -> str | None:
    """How to run the failed cells that are not retried, or None when there are none."""
    stuck = [p for p in planned if p.action == "skip-failed"]
    if not stuck:
        return None
    return (
        f"{len(stuck)} cell(s) failed and are not retried: `vitscale status {runs}` shows "
        f"each error; fix its cause, then `vitscale grid {grid_path} --retry-failed` runs them "
        "again (a change to an operational key, e.g. --set data.skip_bad_samples=N, reaches them)"
    )


def _version(grid: Grid) -> dict:
    """The grid as run now: its file, its ``--set`` overrides, its cells."""
    return {
        "grid_file": str(grid.path.resolve()),
        "overrides": list(grid.overrides),
        "cells": [c.id for c in grid.cells],
    }


def _versions(grid: Grid, runs_root: Path) -> list[dict]:
    """The versions recorded in the grid folder's :data:`vitscale.record.GRID_CELLS`, this
    one replacing the one of its file and overrides (last: the most recent)."""
    now = _version(grid)
    key = (now["grid_file"], now["overrides"])
    recorded = grid_versions(runs_root / grid.name) or []
    return [v for v in recorded if (v.get("grid_file"), v.get("overrides")) != key] + [now]


def write_cells(grid: Grid, runs_root: Path) -> None:
    """Record the grid's cells as the current version of its file and overrides
    (:data:`vitscale.record.GRID_CELLS`): a run folder beside them that no recorded version
    has (another file or ``--set`` of the same name keeps its own) is no longer counted."""
    folder = runs_root / grid.name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        versions = _versions(grid, runs_root)
        rf.write_json_if_changed(folder / rf.GRID_CELLS, {"grid": grid.name, "versions": versions})
    except OSError as e:  # a full disk: each cell then says so itself
        print(f"warning: cannot record the grid's cells in {folder}: {e}", file=sys.stderr)


def stale_cells(grid: Grid, runs_root: Path) -> list[Path]:
    """The run folders in the grid's folder that no version of it has: not this grid as
    it is now, nor one recorded from another file or other ``--set`` overrides."""
    folder = runs_root / grid.name
    if not folder.is_dir():
        return []
    ids = {cell for v in _versions(grid, runs_root) for cell in v.get("cells", ())}
    return sorted(d for d in folder.iterdir() if (d / rf.CONFIG).is_file() and d.name not in ids)


def prune(grid: Grid, runs_root: Path, *, dry_run: bool, is_queued=lambda d: False) -> int:
    """``vitscale grid FILE --prune``: move the grid's stale cells to its ``.stale/``
    folder (kept, not deleted; a running or queued one stays), then record its cells."""
    stale = stale_cells(grid, runs_root)
    busy = [d for d in stale if is_locked(d) or is_queued(d)]
    moving = [d for d in stale if d not in busy]
    aside = runs_root / grid.name / rf.STALE
    for d in moving if not dry_run else ():
        aside.mkdir(exist_ok=True)
        target = aside / d.name
        while target.exists():  # pruned before, and back in a version since
            target = target.with_name(target.name + "+")
        d.rename(target)
    if not dry_run:
        write_cells(grid, runs_root)
    verb = "would move" if dry_run else "moved"
    print(f"{verb} {len(moving)} cell(s) from an earlier version of {grid.name!r} to {aside}/")
    for d in moving:
        print(f"  {d.name}")
    for d in busy:
        print(f"left {d.name}: it is running or queued (prune again once it has ended)")
    return 0
