"""The run folder on disk (docs/design.md, "The run folder"): file names, atomic writes,
metrics rows, checkpoints. Imports no torch."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .keys import STEP

__all__ = [
    "CONFIG",
    "METRICS",
    "RESULT",
    "CHECKPOINTS",
    "LOCK",
    "LOG",
    "GRID_CELLS",
    "STALE",
    "RANK_FAILURE",
    "CHECKPOINT_PREFIX",
    "CHECKPOINT_STATE",
    "write_json_atomic",
    "write_text_atomic",
    "write_json_if_changed",
    "read_json",
    "parse_row",
    "iter_metrics",
    "checkpoint_step",
    "complete_checkpoints",
]

CONFIG = "config.json"
METRICS = "metrics.jsonl"
RESULT = "result.json"
CHECKPOINTS = "checkpoints"
LOCK = ".lock"
LOG = "log.txt"  # what the executors capture of a cell's output
# In a grid folder: for each grid file and --set overrides run into it, the cell ids as last
# run or submitted (vitscale grid writes it); a run folder beside them that no version
# lists is a cell of an earlier version of the grid, read by no count (status, summary,
# figures, W&B sync) and moved to STALE by ``vitscale grid --prune``.
GRID_CELLS = "cells.json"
STALE = ".stale"
# one process's failure of a multi-process run, written as it fails (record.RankFailure)
RANK_FAILURE = "failure_rank{rank}.json"
CHECKPOINT_PREFIX = "step_"  # checkpoints/step_000001200/ (vitscale.train.checkpoint)
CHECKPOINT_STATE = "state.pt"  # written last: a folder without it is not a checkpoint


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    write_text_atomic(path, _dumps(obj))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` through a flushed temporary file and one rename (as JSON above).

    The file gets the mode any other file written here gets (``0o666`` less the umask, as
    the tar shards beside an ``index.json`` have), not ``mkstemp``'s ``0o600``: these
    files are for colleagues sharing the folder to read too."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:
            e.filename = str(path)  # a failed write names no file by itself
        raise


def write_json_if_changed(path: str | os.PathLike, obj: Any) -> None:
    """:func:`write_json_atomic`, unless the file already holds exactly this: a resumed
    run rewrites nothing it need not (it may resume on a disk with no room left)."""
    try:
        if Path(path).read_text() == _dumps(obj):
            return
    except (OSError, UnicodeDecodeError):
        pass
    write_json_atomic(path, obj)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as fh:
        return json.load(fh)


def parse_row(line: str | bytes) -> dict | None:
    """One line of a metrics.jsonl as a row: a JSON object with a whole-number ``step``;
    None for anything else (a torn last line after a crash mid-write, a corrupted one)."""
    try:
        row = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(row, dict):
        return None
    step = row.get(STEP)
    return row if isinstance(step, int) and not isinstance(step, bool) else None


def iter_metrics(path: str | os.PathLike) -> Iterator[dict]:
    """Rows of a metrics.jsonl; a line that is not a row (:func:`parse_row`) is skipped."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip() and (row := parse_row(line)) is not None:
                yield row


def checkpoint_step(path: Path) -> int:
    return int(path.name[len(CHECKPOINT_PREFIX) :])


def complete_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The published checkpoints in a run's ``checkpoints/``, oldest first (torch-free, for
    ``vitscale status``; :mod:`vitscale.train.checkpoint` writes and reads them)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [
        p
        for p in directory.iterdir()
        if p.is_dir()
        and p.name.startswith(CHECKPOINT_PREFIX)
        and p.name[len(CHECKPOINT_PREFIX) :].isdigit()
        and (p / CHECKPOINT_STATE).is_file()
    ]
    return sorted(found, key=checkpoint_step)
