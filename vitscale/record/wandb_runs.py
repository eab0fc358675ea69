"""Cells from W&B runs as the same tidy frame as run folders (:mod:`.cells`), ``source``
"wandb":

- online (``wandb.Api()``, a project and optionally a group = grid name):
  :func:`load_wandb`, :func:`load_wandb_history`;
- offline run folders (``wandb/offline-run-*``, before or without ``wandb sync``), read
  with wandb's own reader, ``wandb leet inspect --json``: :func:`load_wandb_offline`
  (cells and history in one pass).

Rows are built by :func:`vitscale.record.cells.cell_record` from the run's config and its
summary read back as a :class:`~vitscale.record.result.RunResult`, so the sources cannot
drift apart. A run that cannot be read is returned as a
:class:`~vitscale.record.cells.Problem`, never raised. ``wandb`` is imported only when a
loader is called; nothing here needs the network except :func:`load_wandb` itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .cells import (
    HISTORY_COLUMNS,
    STATUS_RUNNING,
    Problem,
    cell_record,
    history_frame,
    records_to_frame,
)
from .keys import EXAFLOPS, EXAMPLES_SEEN, STEP
from .result import STATUS_DONE, STATUS_FAILED, RunResult

# W&B run states -> cell statuses, for runs whose summary has no "status" yet.
_STATES = {
    "finished": STATUS_DONE,
    "running": STATUS_RUNNING,
    "pending": STATUS_RUNNING,
    "preempting": STATUS_RUNNING,
    "preempted": STATUS_RUNNING,  # requeued by SLURM: the same run id continues
    "crashed": STATUS_FAILED,
    "failed": STATUS_FAILED,
    "killed": STATUS_FAILED,
}


def run_state_status(summary: Mapping, state: str | None) -> str:
    """The trainer's ``status`` when the summary has one, else the W&B run state's."""
    status = summary.get("status")
    if status in (STATUS_DONE, STATUS_FAILED):
        return status
    return _STATES.get(str(state).lower(), STATUS_RUNNING)


def _public(mapping: Mapping) -> dict[str, Any]:
    """Drop W&B's own keys (``_wandb``, ``_step``, ``_runtime``, ``_timestamp``)."""
    return {k: v for k, v in mapping.items() if not str(k).startswith("_")}


def _row(run_id, group, config, summary, state, *, path: str) -> dict[str, Any]:
    config = _public(config)
    summary = _public(summary)
    status = run_state_status(summary, state)
    result = None
    if status in (STATUS_DONE, STATUS_FAILED):  # a crashed run's summary may say no status
        result = RunResult.from_summary(summary | {"status": status})
    return cell_record(
        config, result, status=status, source="wandb", path=path, grid=group, cell_id=run_id
    )


# --------------------------------------------------------------------------- online


def _runs(project: str, group: str | None, entity: str | None, api):
    if api is None:
        import wandb

        api = wandb.Api()
    path = f"{entity}/{project}" if entity else project
    return api.runs(path, filters={"group": group} if group else None)


def load_wandb(
    *, project: str, group: str | None = None, entity: str | None = None, api=None
) -> tuple[pd.DataFrame, list[Problem]]:
    """Cells of a W&B project (optionally one group, i.e. one grid) via ``wandb.Api()``.

    ``api`` replaces ``wandb.Api()`` (tests, or an Api built with custom settings).
    """
    records, problems = [], []
    for run in _runs(project, group, entity, api):
        where = f"wandb:{entity + '/' if entity else ''}{project}/{run.id}"
        try:
            records.append(
                _row(
                    run.id,
                    getattr(run, "group", None),
                    dict(run.config),
                    dict(run.summary_metrics),
                    getattr(run, "state", None),
                    path=where,
                )
            )
        except (ValueError, TypeError, AttributeError) as e:
            problems.append(Problem(where, f"cannot read W&B run: {e}"))
    return records_to_frame(records), problems


def load_wandb_history(
    *,
    project: str,
    group: str | None = None,
    entity: str | None = None,
    metrics: Sequence[str] | None = None,
    api=None,
) -> pd.DataFrame:
    """Per-step history of a project's runs (the metrics.jsonl rows), like load_history."""
    cells, _ = load_wandb(project=project, group=group, entity=entity, api=api)
    ident = cells.set_index("cell_id")
    keys = [STEP, EXAMPLES_SEEN, EXAFLOPS, *metrics] if metrics else None
    rows = []
    for run in _runs(project, group, entity, api):
        if run.id not in ident.index:
            continue
        cell = ident.loc[run.id]
        tag = {"cell_id": run.id} | {c: cell.get(c) for c in HISTORY_COLUMNS if c != "cell_id"}
        for item in run.scan_history(keys=keys):
            rows.append(tag | _public(item))
    return history_frame(rows)


# --------------------------------------------------------------------------- offline


def _offline_runs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """``run-<id>.wandb`` files: given directly, in a run folder, or in a wandb/ folder."""
    files: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such W&B run file or folder: {p}")
        if p.is_file():
            files.append(p)
            continue
        direct = sorted(p.glob("run-*.wandb"))
        files.extend(direct or sorted(p.glob("*run-*/run-*.wandb")))
    return files


def _inspect(run_file: Path, *extra: str) -> Any:
    """Run ``wandb leet inspect --json [extra] RUN_FILE`` and parse its output.

    WANDB_MODE=offline keeps the reader from reporting telemetry over the network.
    """
    env = os.environ | {"WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}
    cmd = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", *extra, str(run_file)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise ValueError(done.stderr.strip() or f"exit code {done.returncode}")
    return done.stdout


def load_wandb_offline(
    paths: Iterable[str | os.PathLike] | str | os.PathLike, *, history: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame | None, list[Problem]]:
    """Cells (and, with ``history``, per-step rows) of W&B offline runs.

    ``paths``: ``run-<id>.wandb`` files, offline run folders, or a ``wandb/`` folder
    holding several. Returns ``(cells, history or None, problems)``.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    records, rows, problems = [], [], []
    for run_file in _offline_runs(paths):
        try:
            summary = json.loads(_inspect(run_file, "--summary"))
            lines = _inspect(run_file).splitlines()
            recs = [json.loads(line) for line in lines if line.strip()]
        except (ValueError, subprocess.TimeoutExpired, OSError) as e:
            problems.append(Problem(str(run_file), f"wandb leet inspect failed: {e}"))
            continue
        run_rec = next((r["run"] for r in recs if r.get("type") == "run"), {})
        run_id = summary.get("run_id") or run_rec.get("run_id")
        state = summary.get("state")
        if state == "finished" and summary.get("exit_code") not in (0, None):
            state = "failed"
        try:
            record = _row(
                run_id,
                run_rec.get("run_group"),
                summary.get("config") or {},
                summary.get("summary") or {},
                state,
                path=str(run_file),
            )
        except ValueError as e:
            problems.append(Problem(str(run_file), str(e)))
            continue
        records.append(record)
        if history:
            tag = {c: record.get(c) for c in HISTORY_COLUMNS}
            for r in recs:
                if r.get("type") == "history":
                    rows.append(tag | _public(r["history"].get("item", {})))
    return records_to_frame(records), (history_frame(rows) if history else None), problems
