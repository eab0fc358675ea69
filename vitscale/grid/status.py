"""``vitscale status``: per cell done / running / pending / failed, last step, best few-shot.

The run folders say most of it (:func:`vitscale.record.cells.cell_state`); two live facts
refine a cell without a result: whether a process holds its lock (running here), and,
for SLURM cells, the scheduler's state of its job (queued, running, requeued).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from .. import record as rf
from ..record.cells import (
    STATUS_PENDING,
    STATUS_RUNNING,
    Problem,
    RunFolderError,
    cell_state,
    find_run_folders,
)
from .actions import JOB_FILE
from .cellrun import is_locked

STATUS_ORDER = ("done", "running", "pending", "failed")


@dataclass(frozen=True)
class CellRow:
    grid: str
    cell_id: str
    model: str
    subset: str
    status: str
    last_step: int | None
    total_steps: int | None
    best_fewshot: float | None  # the best few-shot accuracy: see _best_fewshot
    note: str
    setting: str = ""  # what sets it apart from other cells of its model, subset, steps
    exaflops: float | None = None  # what its model embodies (result.json)
    spent_exaflops: float | None = None  # what it trained itself (less its trunk's share)


def _best_fewshot(best: dict[str, float], config: dict, shots: int | None) -> float | None:
    """With ``shots``, the mean over transfer datasets of the best ``shots``-shot accuracy;
    without, the best accuracy on the cell's first few-shot set at 5 shots, or its first
    shot count where it measures no 5-shot (what ``vitscale summary`` compares by default)."""
    if shots is None:
        fewshot = _section(_section(config, "eval"), "fewshot")
        sets, counts = fewshot.get("datasets") or [], fewshot.get("shots") or []
        k = 5 if 5 in counts else counts[0] if counts else None  # analysis.metrics.default_shots
        return best.get(rf.fewshot_key(sets[0], k)) if sets and k else None
    values = [
        v for k, v in best.items() if (parsed := rf.parse_fewshot_key(k)) and parsed[1] == shots
    ]
    return statistics.fmean(values) if values else None


def _section(config: dict, name: str) -> dict:
    """A section of a config.json, empty where it has none (a folder from an older
    version, or edited by hand): status shows what it can of any run folder."""
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def cell_row(run_dir: Path, *, shots: int | None = None, job_state=None, job_note=None) -> CellRow:
    state = cell_state(run_dir)
    config = rf.read_json(run_dir / rf.CONFIG)
    if not isinstance(config, dict):
        raise RunFolderError(run_dir, f"{rf.CONFIG} is not a JSON object")
    status, note = state.status, state.error or ""
    if status in (STATUS_RUNNING, STATUS_PENDING):
        scheduler = job_state(run_dir) if job_state else None
        if is_locked(run_dir):
            status = STATUS_RUNNING
        elif scheduler:
            status = STATUS_RUNNING if scheduler in ("RUNNING", "COMPLETING") else STATUS_PENDING
            note = f"SLURM {scheduler}"
            if status == STATUS_PENDING and (resume := _resumes(run_dir, state)):
                note += f"; {resume}"
        else:
            status = STATUS_PENDING
            if resume := _resumes(run_dir, state):
                note = resume if resume.startswith("interrupted") else f"interrupted; {resume}"
    queued = ("PENDING", "RUNNING", "REQUEUED")
    if (
        status == rf.STATUS_FAILED
        and (run_dir / JOB_FILE).is_file()
        and job_state
        and ((scheduler := job_state(run_dir)) in queued)
    ):
        resume = _resumes(run_dir, state)
        status = STATUS_PENDING
        note = (
            f"retry queued (SLURM {scheduler}){f'; {resume}' if resume else ''}; last error: {note}"
        )
    if job_note and status != rf.STATUS_DONE and (event := job_note(run_dir)):
        note = f"{event}; {note}" if note else event
    result = rf.RunResult.read(run_dir) if (run_dir / rf.RESULT).is_file() else None
    if result and result.branched_from:
        b = result.branched_from
        note = f"branch of {b['trunk']} at step {b['step']}" + (f"; {note}" if note else "")
    return CellRow(
        grid=str(config.get("grid") or run_dir.parent.name),
        cell_id=run_dir.name,
        model=str(_section(config, "model").get("name") or "?"),
        subset=str(_section(config, "data").get("subset") or "all"),
        status=status,
        last_step=state.last_step,
        total_steps=_section(config, "train").get("total_steps"),
        best_fewshot=_best_fewshot(state.best, config, shots),
        note=note,
        exaflops=result.pretrain_exaflops if result else None,
        spent_exaflops=result.spent_exaflops if result else None,
    )


def _resumes(run_dir: Path, state) -> str:
    """Where the cell resumes when it runs again."""
    if checkpoints := rf.complete_checkpoints(run_dir / rf.CHECKPOINTS):
        return f"resumes from its checkpoint (step {rf.checkpoint_step(checkpoints[-1])})"
    if state.last_step is not None:
        return "interrupted before its first checkpoint; starts over"
    return ""


def collect(
    paths: list[Path], *, shots: int | None = None, job_state=None, job_note=None
) -> tuple[list[CellRow], list]:
    """The rows of every counted cell under ``paths`` and the folders not read (each a
    :class:`~vitscale.record.cells.Problem`: unreadable, or a grid's stale cells)."""
    folders, problems = find_run_folders(paths)
    rows, read = [], []
    for folder in folders:
        try:
            rows.append(cell_row(Path(folder), shots=shots, job_state=job_state, job_note=job_note))
            read.append(Path(folder))
        except (RunFolderError, OSError, ValueError, KeyError) as e:
            problems.append(Problem(str(folder), str(e)))
    return _with_settings(rows, read), problems


def _with_settings(rows: list[CellRow], folders: list[Path]) -> list[CellRow]:
    """Each row's setting (:mod:`analysis.settings`): the config keys, besides the seed,
    in which it differs from the other cells of its grid, model, subset and steps."""
    import dataclasses

    import pandas as pd

    from analysis import settings

    if not rows:
        return rows
    configs = [rf.read_json(folder / rf.CONFIG) for folder in folders]
    flat = pd.json_normalize(configs, sep=".")
    points = pd.DataFrame(
        [(r.grid, r.model, r.subset, str(r.total_steps)) for r in rows], index=flat.index
    )
    labels = settings.labels(flat, points)
    return [dataclasses.replace(r, setting=s) for r, s in zip(rows, labels, strict=True)]


def format_table(rows: list[CellRow], *, shots: int | None = None) -> str:
    fewshot = f"{shots}-shot" if shots else "k-shot"
    models = {r: f"{r.model} {r.setting}" if r.setting else r.model for r in rows}
    w = max([16, *map(len, models.values())])
    head = f"{'grid':<16} {'cell':<10} {'model':<{w}} {'subset':>8} {'status':<8} {'step':>13} {fewshot:>7}  note"
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r.grid, STATUS_ORDER.index(r.status), r.model, r.subset)):
        step = (
            ""
            if r.last_step is None
            else f"{r.last_step}" + (f"/{r.total_steps}" if r.total_steps else "")
        )
        acc = "" if r.best_fewshot is None else f"{100 * r.best_fewshot:.1f}%"
        lines.append(
            f"{r.grid:<16} {r.cell_id:<10} {models[r]:<{w}} {r.subset:>8} {r.status:<8} {step:>13} {acc:>7}  {r.note}"
        )
    counts = {s: sum(r.status == s for r in rows) for s in STATUS_ORDER}
    if shots is None and rows:
        lines.append(
            "k-shot: the best accuracy on each cell's first few-shot set, 5-shot (else its "
            "first shot count); --shots K: the mean over its sets at K"
        )
    lines.append("")
    lines.append(f"{len(rows)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if any(r.spent_exaflops != r.exaflops for r in rows):
        lines.append(compute_line(rows))
    return "\n".join(lines)


def compute_line(rows: list[CellRow]) -> str:
    """The compute the finished cells embody and what was spent on them, where branches
    shared their trunks' stable phases (docs/schedules.md), per grid and per family."""
    from ..catalog import family

    def totals(of: list[CellRow]) -> str:
        embodied = sum(r.exaflops or 0 for r in of)
        spent = sum(r.spent_exaflops or 0 for r in of)
        saved = 1 - spent / embodied if embodied else 0.0
        return f"{spent:.4g} of {embodied:.4g} exaFLOPs ({saved:.0%} saved)"

    grids = sorted({r.grid for r in rows})
    parts = [f"{g} {totals([r for r in rows if r.grid == g])}" for g in grids]
    families = sorted({family(r.model) for r in rows if r.model != "?"})
    parts += [f"{f} {totals([r for r in rows if family(r.model) == f])}" for f in families]
    return "compute spent (trunks once + cooldowns) of what the cells embody: " + "; ".join(parts)
