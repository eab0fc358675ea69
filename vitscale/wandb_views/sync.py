"""``vitscale wandb sync``: upload a grid's offline W&B runs, for clusters whose compute
nodes have no internet (what it does for the user: docs/wandb.md, "Weights & Biases"), and the
online runs whose upload did not finish.

A cell that ran offline left ``<run folder>/wandb/offline-run-<time>-<cell id>/`` (one
per start: a requeued cell adds one, with the same run id), or the same under
``$WANDB_DIR/wandb/`` when that was set. An online run whose server stopped answering
left ``run-<time>-<cell id>/`` marked :data:`~vitscale.record.wandb.UPLOAD_UNFINISHED` by
the trainer. wandb marks an uploaded run with ``run-<id>.wandb.synced`` beside its log;
runs with that mark are skipped. Ctrl-C stops after the run being uploaded (``wandb
sync`` gets the signal too and leaves that run unmarked).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..record.wandb import UPLOAD_UNFINISHED

SYNCED_SUFFIX = ".synced"  # wandb's mark of an uploaded offline run


@dataclass(frozen=True)
class OfflineRun:
    cell: Path  # the run folder
    path: Path  # the offline-run-* folder
    log: Path  # its run-<id>.wandb

    @property
    def synced(self) -> bool:
        return self.log.with_name(self.log.name + SYNCED_SUFFIX).exists()


def _in(folder: Path, cell: Path, cell_id: str | None) -> list[OfflineRun]:
    """Runs to upload in a wandb/ folder (offline ones, online ones whose upload did not
    finish): all of them in a run folder's own, only the cell's (its id ends the folder
    name) in a shared ``$WANDB_DIR``."""
    suffix = f"-{cell_id}" if cell_id else ""
    offline = folder.glob(f"offline-run-*{suffix}")
    unfinished = (d for d in folder.glob(f"run-*{suffix}") if (d / UPLOAD_UNFINISHED).exists())
    return [
        OfflineRun(cell=cell, path=d, log=log)
        # <offline-run|run>-<YYYYmmdd_HHMMSS>-<id>: by time
        for d in sorted([*offline, *unfinished], key=lambda d: d.name.split("run-", 1)[1])
        if d.is_dir()
        for log in sorted(d.glob("run-*.wandb"))[:1]
    ]


def find_offline_runs(run_dirs: list[Path]) -> list[OfflineRun]:
    """Offline runs of these cells, oldest first per cell."""
    shared = os.environ.get("WANDB_DIR")
    found: dict[Path, OfflineRun] = {}
    for cell in run_dirs:
        runs = _in(cell / "wandb", cell, None)
        if shared:
            runs += _in(Path(shared) / "wandb", cell, cell.name)
        for run in runs:
            found.setdefault(run.path.resolve(), run)
    return list(found.values())


def upload(run: OfflineRun, *, entity: str | None, project: str | None) -> tuple[bool, str]:
    """``wandb sync`` one offline run; returns (uploaded, wandb's last line of output)."""
    cmd = [sys.executable, "-m", "wandb", "sync", "--no-skip-online"]
    if entity:
        cmd += ["--entity", entity]
    if project:
        cmd += ["--project", project]
    cmd.append(str(run.path))
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return done.returncode == 0 and run.synced, (lines[-1] if lines else f"exit {done.returncode}")
