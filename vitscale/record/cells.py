"""Run folders -> one tidy pandas DataFrame (one row per cell), and per-step histories.

The one reader of run folders (docs/design.md, "The run folder"); the W&B loaders build
their rows with :func:`cell_record` too. It imports no torch, so results can be studied on
a laptop.

Columns of the cells frame (:data:`BASE_COLUMNS` first, then metrics, then config):

- identity: ``source`` ("runs", "wandb" or "paper"), ``path``, ``cell_id``, ``grid``,
  ``status`` (done, failed, running, pending), ``error``;
- model, decoded from its name (:func:`vitscale.catalog.model_columns`): ``model``, ``family``
  (:data:`vitscale.catalog.FAMILIES`), ``size`` ("B", "L" ... for ViTs, hybrids and Mixers,
  "R50x1" ... for ResNets), ``patch`` (pixels per token side: a hybrid's total downsampling,
  the number after its slash; empty for ResNets);
- pre-training: ``pretrain_dataset``, ``subset`` (as written in the config: "10k", 10000,
  0.1 or None), ``num_examples`` (the resolved subset size: Fig. 4's x axis),
  ``examples_seen``, ``epochs`` (= examples_seen / num_examples), ``exaflops`` (total
  pre-training compute, paper convention: Fig. 5's x axis), ``params``;
- run: ``steps``, ``last_step``, ``wall_clock_s``, ``device_hours``, ``seed``;
  ``published``: True for a published checkpoint's cell (``model.pretrained``; its
  ``exaflops`` are its recipe's, :mod:`vitscale.published`), drawn apart on Fig. 5;
- metrics, from result.json:

  - ``<metric>``: the *best* value seen during training of every accuracy metric
    (``result["best"]``), e.g. ``fewshot/imagenet/5shot``, ``upstream/top1``. Best is
    what Fig. 4 reports (early stopping on the few-shot accuracy, paper Sec. 4.3);
  - ``final/<metric>``: the last logged value of every metric (``result["final"]``),
    e.g. ``final/train/loss``, ``final/fewshot/imagenet/5shot``;
  - ``finetune/<dataset>/top1``: test accuracy after fine-tuning (``result["finetune"]``);

- ``config.<dotted.path>``: every entry of the resolved config.json (lists as tuples),
  so a plot can be grouped by any of them (``config.optim.lr``).

Accuracies are fractions in run files; here, in one place (:func:`to_percent`), they
become percentages, the paper's unit. Losses and learning rates are left as they are.

Cells without a result.json are kept as rows: ``running`` when metrics.jsonl exists
(``last_step``, ``examples_seen`` and ``exaflops`` then come from its last row),
``pending`` with only config.json. Broken folders (unreadable or malformed JSON, a
result without a config) are returned as :class:`Problem` and skipped, never raised.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .. import record as rf
from ..catalog import model_columns
from .result import RESULT_STATUSES, RunResult

# Statuses of a cell that has no result.json yet ("done" and "failed" are result.json's);
# the SLURM layer may refine "running" (queued, lost ...).
STATUS_RUNNING = "running"
STATUS_PENDING = "pending"

CONFIG_PREFIX = "config."

BASE_COLUMNS = (
    "source",
    "path",
    "cell_id",
    "grid",
    "status",
    "error",
    "model",
    "family",
    "size",
    "patch",
    "pretrain_dataset",
    "subset",
    "num_examples",
    "examples_seen",
    "epochs",
    "exaflops",
    "params",
    "steps",
    "last_step",
    "wall_clock_s",
    "device_hours",
    "seed",
    "published",
)
# Identity columns repeated on every history row.
HISTORY_COLUMNS = ("cell_id", "grid", "model", "family", "size", "pretrain_dataset", "num_examples")


@dataclass(frozen=True)
class Problem:
    """A run folder that could not be read: reported to the user, then skipped."""

    path: str
    message: str
    stale: bool = False  # not unreadable: cells of an earlier version of a grid, not counted

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class RunFolderError(ValueError):
    """A run folder that breaks the contract (malformed JSON, a result without a config)."""

    def __init__(self, path: str | os.PathLike, message: str):
        super().__init__(f"{path}: {message}")
        self.problem = Problem(str(path), message)


@dataclass(frozen=True)
class CellState:
    """What ``vitscale status`` shows for one cell.

    ``best`` holds accuracy metrics in run-file units (fractions): from result.json when
    the cell finished, else the best value in metrics.jsonl so far (only when asked to
    scan it, since that reads the whole file).
    """

    path: Path
    status: str
    last_step: int | None
    error: str | None = None
    best: dict[str, float] = field(default_factory=dict)


def to_percent(key: str, value: Any) -> Any:
    """Fraction -> percent for accuracy metrics (runfolder.is_accuracy); others unchanged."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return 100.0 * value if rf.is_accuracy(key) else value


# --------------------------------------------------------------------------- discovery


def _names(path: Path) -> set[str] | None:
    try:
        with os.scandir(path) as it:
            return {e.name for e in it}
    except OSError:
        return None


def _subdirs(path: Path) -> list[str] | None:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir())
    except OSError:
        return None


def find_run_folders(
    paths: Iterable[str | os.PathLike] | str | os.PathLike,
) -> tuple[list[Path], list[Problem]]:
    """Run folders under ``paths``: each a run folder, a grid folder or a parent ``runs/``.

    A run folder is a directory with a config.json. A sibling of run folders that holds a
    result.json or metrics.jsonl but no config.json is reported as a problem. A path that
    does not exist raises ``FileNotFoundError`` (a user mistake, not a broken run).
    """
    found, problems = _find(paths)
    return [path for path, _ in found], problems


def _find(paths) -> tuple[list[tuple[Path, set[str]]], list[Problem]]:
    """Run folders with the names of the files in each (listed once, read by the caller)."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    found: list[tuple[Path, set[str]]] = []
    problems: list[Problem] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such run folder, grid folder or runs directory: {p}")
        before = len(found), len(problems)
        _walk(p, found, problems, depth=0)
        if (len(found), len(problems)) == before:
            problems.append(Problem(str(p), f"no run folders (directories with {rf.CONFIG})"))
    # Same folder named twice (a grid and its parent): read it once.
    unique: dict[str, tuple[Path, set[str]]] = {}
    for path, names in found:
        unique.setdefault(os.path.abspath(path), (path, names))
    return list(unique.values()), problems


_MAX_DEPTH = 2  # runs/ -> <grid>/ -> <cell>/


def _walk(path: Path, found: list, problems: list[Problem], depth: int) -> None:
    names = _names(path)
    if names is None:
        if path.is_dir():
            problems.append(Problem(str(path), "cannot list directory"))
        return
    if rf.CONFIG in names:
        found.append((path, names))
        return
    if depth >= _MAX_DEPTH:
        return
    current, stale = _grid_cells(path) if rf.GRID_CELLS in names else (None, [])
    for name in _subdirs(path) or ():
        child = path / name
        child_names = _names(child) or set()
        if rf.CONFIG in child_names and current is not None and name not in current["cells"]:
            stale.append(name)
        elif rf.CONFIG in child_names:
            found.append((child, child_names))
        elif child_names & {rf.RESULT, rf.METRICS}:
            problems.append(Problem(str(child), f"has run files but no {rf.CONFIG}; skipped"))
        else:
            _walk(child, found, problems, depth + 1)
    if stale:
        problems.append(
            Problem(
                str(path),
                f"{len(stale)} cell(s) from an earlier version of this grid, not counted "
                f"(`{current['command']} --prune` moves them to {path / rf.STALE}/)",
                stale=True,
            )
        )


def grid_versions(path: Path) -> list[dict] | None:
    """A grid folder's :data:`~vitscale.record.folder.GRID_CELLS`: each version's
    ``grid_file``, ``overrides`` and ``cells``, the most recent last; None where it is
    missing or unreadable (every cell counts, as before any was written)."""
    try:
        versions = rf.read_json(path / rf.GRID_CELLS)["versions"]
        if all(isinstance(v, dict) and isinstance(v["cells"], list) for v in versions):
            return list(versions)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _grid_cells(path: Path) -> tuple[dict | None, list[str]]:
    """``{"cells": every version's cells, "command": the latest version's prune command}``
    (None: no versions, so every cell counts) and the stale cells found so far."""
    versions = grid_versions(path)
    if not versions:
        return None, []
    latest = versions[-1]
    sets = "".join(f" --set {shlex.quote(o)}" for o in latest.get("overrides", ()))
    cells = {c for v in versions for c in v["cells"]}
    return {"cells": cells, "command": f"vitscale grid {latest.get('grid_file')}{sets}"}, []


# --------------------------------------------------------------------------- one cell

_BAD_STATUS = f"{rf.RESULT} has no valid status (valid: {', '.join(RESULT_STATUSES)})"


def _read_json(path: Path) -> Any:
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunFolderError(path.parent, f"cannot read {path.name}: {e}") from None


def _last_metrics_row(path: Path) -> dict | None:
    """The last complete row of a metrics.jsonl, reading only its tail.

    Lines that are not rows (a torn last line after a crash, a corrupted one) are skipped,
    as in :func:`vitscale.runfolder.iter_metrics`.
    """
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            block = 4096
            while True:
                start = max(0, size - block)
                fh.seek(start)
                lines = fh.read(size - start).splitlines()
                # The first line of a partial block may be cut; only trust it at offset 0.
                candidates = lines if start == 0 else lines[1:]
                for line in reversed(candidates):
                    if line.strip() and (row := rf.parse_row(line)) is not None:
                        return row
                if start == 0:
                    return None
                block *= 4
    except OSError:
        return None


def cell_status(run_dir: str | os.PathLike) -> str:
    """done / failed (from result.json), running (metrics.jsonl, no result), pending."""
    return cell_state(run_dir, scan_metrics=False).status


def cell_state(run_dir: str | os.PathLike, *, scan_metrics: bool = True) -> CellState:
    """Status, last step and best accuracies of one cell (see :class:`CellState`). Raises
    :class:`RunFolderError` for a folder without config.json or a malformed result.

    ``scan_metrics`` reads a running cell's whole metrics.jsonl for its best accuracies;
    without it only the last row is read (for ``last_step``).
    """
    path = Path(run_dir)
    names = _names(path)
    if names is None or rf.CONFIG not in names:
        raise RunFolderError(path, f"not a run folder (no {rf.CONFIG})")
    if rf.RESULT in names:
        result = _read_result(path)
        return CellState(
            path=path,
            status=result.status,
            last_step=result.last_step,
            error=result.error,
            best=dict(result.best),
        )
    if rf.METRICS not in names:
        return CellState(path=path, status=STATUS_PENDING, last_step=None)
    best: dict[str, float] = {}
    last: dict | None
    if scan_metrics:
        last = None
        for row in rf.iter_metrics(path / rf.METRICS):
            last = row
            for k, v in row.items():
                if rf.is_accuracy(k) and isinstance(v, int | float):
                    best[k] = max(v, best.get(k, v))
    else:
        last = _last_metrics_row(path / rf.METRICS)
    return CellState(
        path=path,
        status=STATUS_RUNNING,
        last_step=None if last is None else last.get(rf.STEP),
        best=best,
    )


def _flatten(obj: Mapping, prefix: str, out: dict[str, Any]) -> None:
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):  # JSON objects; a plain type check is 5x cheaper than the ABC
            _flatten(v, key + ".", out)
        elif isinstance(v, list):
            out[key] = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        else:
            out[key] = v


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def cell_record(
    config: Mapping,
    result: RunResult | None,
    *,
    status: str,
    source: str,
    path: str | None = None,
    last: Mapping | None = None,
    grid: str | None = None,
    cell_id: str | None = None,
) -> dict[str, Any]:
    """One row of the cells frame from a resolved config and a result (None if unfinished,
    then ``status`` says how far it got and ``last`` is its last metrics row).

    The W&B loaders build rows through this function too, so every source yields the same
    columns. Raises ``ValueError`` for an unknown model name.
    """
    model = _get(config, "model", "name") or (result.model if result else None)
    rec: dict[str, Any] = {
        "source": source,
        "path": path,
        "cell_id": config.get("cell_id") or cell_id or (result.cell_id if result else None),
        "grid": config.get("grid") or grid,
        "status": result.status if result else status,
        "error": None,
        "model": model,
        "pretrain_dataset": _get(config, "data", "dataset"),
        "subset": _get(config, "data", "subset"),
        "num_examples": _get(config, "data", "num_examples"),
        "seed": config.get("seed"),
        "published": bool(_get(config, "model", "pretrained")),
    }
    if isinstance(rec["subset"], list | dict):
        rec["subset"] = str(rec["subset"])
    if model is not None:
        rec["family"], rec["size"], rec["patch"] = model_columns(model)
    if result:
        rec |= {
            "error": result.error,
            "examples_seen": result.examples_seen,
            "exaflops": result.pretrain_exaflops,
            "params": result.params,
            "steps": result.steps,
            "last_step": result.last_step,
            "wall_clock_s": result.wall_clock_s,
            "device_hours": result.device_hours,
        }
        for k, v in result.best.items():
            rec[k] = to_percent(k, v)
        for k, v in result.final.items():
            rec[rf.FINAL + k] = to_percent(k, v)
        for ds, v in result.finetune.items():
            key = rf.finetune_key(ds)
            rec[key] = to_percent(key, v)
    elif last:
        rec["last_step"] = last.get(rf.STEP)
        rec["examples_seen"] = last.get(rf.EXAMPLES_SEEN)
        rec["exaflops"] = last.get(rf.EXAFLOPS)
    seen, size = rec.get("examples_seen"), rec["num_examples"]
    if isinstance(seen, int | float) and isinstance(size, int | float) and size > 0:
        rec["epochs"] = seen / size
    _flatten(config, CONFIG_PREFIX, rec)
    return rec


def _read_result(path: Path) -> RunResult:
    data = _read_json(path / rf.RESULT)
    try:
        return RunResult.from_json(data if isinstance(data, dict) else {})
    except (ValueError, TypeError):
        raise RunFolderError(path, _BAD_STATUS) from None


def _read_cell(path: Path, names: set[str]) -> dict[str, Any]:
    config = _read_json(path / rf.CONFIG)
    if not isinstance(config, dict):
        raise RunFolderError(path, f"{rf.CONFIG} is not a JSON object")
    result = last = None
    if rf.RESULT in names:
        result = _read_result(path)
        status = result.status
    elif rf.METRICS in names:
        status, last = STATUS_RUNNING, _last_metrics_row(path / rf.METRICS)
    else:
        status = STATUS_PENDING
    if _get(config, "model", "name") is None and not (result and result.model):
        raise RunFolderError(path, f"{rf.CONFIG} has no model.name")
    try:
        return cell_record(
            config,
            result,
            status=status,
            source="runs",
            path=str(path),
            last=last,
            grid=path.parent.name,
            cell_id=path.name,
        )
    except ValueError as e:
        raise RunFolderError(path, str(e)) from None


# --------------------------------------------------------------------------- frames


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """The metric columns of a cells frame (best, ``final/`` and fine-tuning values)."""
    return [c for c in frame.columns if c not in BASE_COLUMNS and not c.startswith(CONFIG_PREFIX)]


def records_to_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Build the cells frame once from row dicts: base columns, metrics, then config."""
    keys: dict[str, None] = {}
    for r in records:
        keys.update(dict.fromkeys(r))
    extra = sorted(k for k in keys if k not in BASE_COLUMNS and not k.startswith(CONFIG_PREFIX))
    config = sorted(k for k in keys if k.startswith(CONFIG_PREFIX))
    columns = [*BASE_COLUMNS, *extra, *config]
    data = {c: [r.get(c) for r in records] for c in columns}
    frame = pd.DataFrame(data, columns=columns)
    # Quantities plotted on log axes stay float (NaN where unknown); counts are nullable ints.
    for c in (
        "num_examples",
        "examples_seen",
        "epochs",
        "exaflops",
        "wall_clock_s",
        "device_hours",
    ):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    for c in ("patch", "params", "steps", "last_step", "seed"):
        values = pd.to_numeric(frame[c], errors="coerce")
        integral = values.dropna().mod(1).eq(0).all()
        frame[c] = values.astype("Int64") if integral else values
    return frame


def load_runs(
    paths: Iterable[str | os.PathLike] | str | os.PathLike, *, progress: bool = False
) -> tuple[pd.DataFrame, list[Problem]]:
    """Every cell under ``paths`` (run, grid or ``runs/`` folders) as one row.

    Returns the frame (columns in the module docstring) and the folders skipped, each a
    :class:`Problem`. Reads config.json and result.json with the standard library and
    builds the frame once; of metrics.jsonl only an unfinished cell's last row is read.
    ``progress`` shows a tqdm bar over the folders.
    """
    folders, problems = _find(paths)
    records = []
    if progress:
        from tqdm import tqdm

        folders = tqdm(folders, desc="reading runs", unit="run", leave=False)
    for folder, names in folders:
        try:
            records.append(_read_cell(folder, names))
        except RunFolderError as e:
            problems.append(e.problem)
    return records_to_frame(records), problems


def history_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy per-step frame from metrics rows (already tagged with identity columns)."""
    rows = list(rows)
    keys: set[str] = set()
    for r in rows:
        keys.update(r)
    # Fixed order whatever the source wrote first: identity, x axes, then metrics by name.
    lead = [*HISTORY_COLUMNS, rf.STEP, rf.EXAMPLES_SEEN, rf.EXAFLOPS]
    columns = [*lead, *sorted(keys - set(lead))]
    frame = pd.DataFrame({c: [r.get(c) for r in rows] for c in columns}, columns=columns)
    for c in columns:
        if rf.is_accuracy(c):
            frame[c] = 100.0 * pd.to_numeric(frame[c], errors="coerce")
    return frame


def load_history(
    source: pd.DataFrame | Iterable[str | os.PathLike] | str | os.PathLike,
    *,
    metrics: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, list[Problem]]:
    """Per-step curves from metrics.jsonl: one row per (cell, logged step).

    ``source`` is a cells frame from :func:`load_runs` (its ``path`` column) or the same
    paths :func:`load_runs` takes. Columns: :data:`HISTORY_COLUMNS`, ``step``,
    ``examples_seen``, ``compute/exaflops`` and every logged metric, or only ``metrics``
    when given. Accuracies in percent.
    """
    problems: list[Problem] = []
    if isinstance(source, pd.DataFrame):
        cells = source[source["path"].notna()]
    else:
        cells, problems = load_runs(source)
    keep = None
    if metrics is not None:
        keep = {rf.STEP, rf.EXAMPLES_SEEN, rf.EXAFLOPS, *metrics}
    rows: list[dict[str, Any]] = []
    ident = [c for c in HISTORY_COLUMNS if c in cells.columns]
    for cell in cells[["path", *ident]].itertuples(index=False):
        metrics_file = Path(cell.path) / rf.METRICS
        if not metrics_file.is_file():
            continue
        tag = {c: getattr(cell, c) for c in ident}
        try:
            for row in rf.iter_metrics(metrics_file):
                if keep is not None:
                    row = {k: v for k, v in row.items() if k in keep}
                rows.append(tag | row)
        except (OSError, UnicodeDecodeError) as e:
            problems.append(Problem(str(cell.path), f"cannot read {rf.METRICS}: {e}"))
    return history_frame(rows), problems
