"""Metric logging: ``metrics.jsonl`` in the run folder, mirrored to W&B (docs/design.md,
"The run folder"). Only rank 0 logs. ``examples_seen`` and ``compute/exaflops`` are
declared as metrics other charts can use as their x-axis. Offline files go under
``<run>/wandb/`` (``WANDB_DIR`` overrides). Any W&B error is reported once and W&B is
switched off: it never stops training. API keys are never written anywhere by this module.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

from .. import record as rf
from ..errors import DiskFullError, disk_full_message, is_disk_full
from ..record.wandb import (
    FINISH_TIMEOUT_ENV,
    FINISH_TIMEOUT_S,
    UPLOAD_UNFINISHED,
    identity,
    run_name,
    wandb_mode,
)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; the failure itself is recorded in result.json
    return value


class Tracker:
    """Appends rows to ``metrics.jsonl`` and mirrors them to W&B (rank 0 only)."""

    def __init__(
        self, *, run_dir: Path, config: dict, cell_id: str, enabled: bool, resume_step: int = 0
    ) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self._wandb = None
        if not enabled:
            return
        self.path = self.run_dir / rf.METRICS
        self._truncate_after(resume_step)
        # line-buffered: a crash loses at most the line being written; closed in close()
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115
        self._start_wandb(config, cell_id)

    def _truncate_after(self, step: int) -> None:
        """On resume, drop rows logged after the checkpoint (they will be logged again) and
        lines that are not rows (torn by a crash, corrupted); rewrite nothing otherwise."""
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            lines = [line for line in fh if line.strip()]
        rows = [r for line in lines if (r := rf.parse_row(line)) and r[rf.STEP] <= step]
        if len(rows) == len(lines):
            return
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.path)

    def _start_wandb(self, config: dict, cell_id: str) -> None:
        wcfg = config["wandb"]
        mode = wandb_mode(wcfg["mode"])
        if mode == "disabled":
            return
        try:
            import wandb

            self._wandb = wandb.init(
                project=wcfg["project"],
                entity=wcfg["entity"],
                id=cell_id,
                name=run_name(config, cell_id),
                resume="allow",
                group=config.get("grid") or "adhoc",
                job_type=f"pretrain-{config['data']['dataset']}",
                tags=[*_tags(config), *wcfg["tags"]],
                config=config,
                dir=os.environ.get("WANDB_DIR") or str(self.run_dir),
                mode=mode,
                settings=wandb.Settings(
                    console="off",
                    silent=True,
                    x_disable_stats=True,
                    finish_timeout=self._finish_timeout,
                    finish_timeout_raises=True,
                ),
            )
            self._wandb.define_metric(rf.EXAMPLES_SEEN)
            self._wandb.define_metric(rf.EXAFLOPS)
            self._wandb.define_metric("*", step_metric=rf.EXAMPLES_SEEN)
            # The run table of `vitscale wandb dashboard` shows these while the cell runs.
            self._wandb.summary.update(identity(config["model"]["name"]))
        except Exception as e:  # noqa: BLE001 - W&B must never stop training
            self._wandb_failed(e)

    def _wandb_failed(self, error: Exception) -> None:
        warnings.warn(
            f"W&B disabled for this run after an error: {error} ({type(error).__name__}); "
            f"training goes on, {rf.METRICS} keeps every row",
            stacklevel=3,
        )
        self._wandb = None
        if isinstance(error, ConnectionError):  # its service process is gone
            _forget_wandb_service()

    def log(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        row = {k: _finite_or_none(v) for k, v in row.items()}
        try:
            self._file.write(json.dumps(row) + "\n")
        except OSError as e:
            if not is_disk_full(e):
                raise
            raise DiskFullError(
                disk_full_message(
                    e,
                    what=str(self.path),
                    kept="the last checkpoint is kept: free space and run again to resume",
                )
            ) from e
        if self._wandb is not None:
            try:
                self._wandb.log(
                    {k: v for k, v in row.items() if k != rf.STEP and v is not None},
                    step=row[rf.STEP],
                )
            except Exception as e:  # noqa: BLE001
                self._wandb_failed(e)

    def summary(self, result: rf.RunResult) -> None:
        """Mirror result.json into the W&B run summary (:meth:`RunResult.to_summary`)."""
        if self._wandb is None:
            return
        flat = result.to_summary()
        try:
            self._wandb.summary.update({k: _finite_or_none(v) for k, v in flat.items()})
        except Exception as e:  # noqa: BLE001
            self._wandb_failed(e)

    def close(self, *, failed: bool = False) -> None:
        if not self.enabled or self._file.closed:
            return
        try:
            self._file.close()
        except OSError:  # a full disk: the write that failed has said so
            if not failed:
                raise
        if self._wandb is not None:
            local = Path(self._wandb.dir).parent  # run-<time>-<id>/: wandb's record of it
            try:
                self._wandb.finish(exit_code=1 if failed else 0)
            except TimeoutError:  # the server stopped answering: the record is kept
                (local / UPLOAD_UNFINISHED).touch()
                warnings.warn(
                    f"W&B could not finish uploading this run within "
                    f"{self._finish_timeout:g} s (its server does not answer): "
                    f"{rf.METRICS} keeps every row, W&B's record of the run is kept in "
                    f"{local}; `vitscale wandb sync` uploads it once the server answers",
                    stacklevel=2,
                )
            except Exception as e:  # noqa: BLE001
                self._wandb_failed(e)
            self._wandb = None

    @property
    def _finish_timeout(self) -> float:
        return float(os.environ.get(FINISH_TIMEOUT_ENV) or FINISH_TIMEOUT_S)


def _forget_wandb_service() -> None:
    """Let go of a W&B service process (``wandb-core``) that died, killed or out of
    memory: otherwise wandb's exit hook tries to tear it down at exit and prints a
    traceback, and the next cell of a grid worker would find the dead service instead of
    starting a fresh one."""
    import wandb

    with contextlib.suppress(Exception, SystemExit):
        wandb.teardown()


def _tags(config: dict) -> list[str]:
    """Tags a dashboard can slice by: family, size, patch, subset."""
    from ..catalog import model_columns

    family, size, patch = model_columns(config["model"]["name"])
    tags = [f"family:{family}", f"size:{size}"] + ([f"patch:{patch}"] if patch else [])
    tags.append(f"subset:{config['data']['subset']}")
    return tags
