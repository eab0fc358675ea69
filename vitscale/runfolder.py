"""The run-folder contract (../shared/DESIGN.md, "Contracts"): file names, metric names,
statuses, and atomic writes. The trainer writes through this module and every reader
(``vitscale.results``, ``analysis``, ``vitscale status``) reads through it, so a name is
spelled in one place. Imports no torch.

A run folder ``runs/<grid>/<cell-id>/`` holds:

- ``config.json``: the resolved config, written before training starts;
- ``metrics.jsonl``: one JSON object per logged step (rank 0 only), always with ``step``,
  ``examples_seen``, ``train/loss``, ``lr``, ``compute/exaflops``; evaluation rows add
  ``fewshot/<dataset>/<k>shot`` (mean over sampling seeds), ``upstream/top1`` ...;
- ``result.json``: written last and atomically; see :data:`RESULT_KEYS`;
- ``checkpoints/``: the latest complete training state.

Accuracies are fractions in [0, 1] in run files and W&B; the analysis package shows
percentages, the paper's unit.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CONFIG = "config.json"
METRICS = "metrics.jsonl"
RESULT = "result.json"
CHECKPOINTS = "checkpoints"
LOCK = ".lock"
LOG = "log.txt"  # what the executors capture of a cell's output
CHECKPOINT_PREFIX = "step_"  # checkpoints/step_000001200/: vitscale.train.checkpoint
CHECKPOINT_STATE = "state.pt"  # written last: a folder without it is not a checkpoint

STATUS_DONE = "done"
STATUS_FAILED = "failed"

# Step metrics: every metrics.jsonl row has these.
STEP = "step"
EXAMPLES_SEEN = "examples_seen"
TRAIN_LOSS = "train/loss"
LR = "lr"
EXAFLOPS = "compute/exaflops"
THROUGHPUT = "throughput/images_per_s"
MFU = "throughput/mfu"
UPSTREAM_TOP1 = "upstream/top1"

# result.json keys (all present; None where not measured).
RESULT_KEYS = (
    "status",  # "done" or "failed"
    "error",  # failure message, or None
    "failed_step",  # step of the failure, or None
    "cell_id",
    "model",
    "steps",  # optimiser steps taken
    "examples_seen",
    "pretrain_exaflops",  # paper convention (vitscale.flops)
    "params",
    "wall_clock_s",
    "device_hours",  # wall-clock x processes
    "final",  # last value of every metric logged
    "best",  # best value of every accuracy metric seen (Fig. 4's early stopping)
    "finetune",  # {dataset: test top-1} after fine-tuning, {} when none ran
    "time_s",  # wall-clock seconds per phase (vitscale.train.timing.PHASES), all restarts
    "skipped_samples",  # bad examples replaced (data.skip_bad_samples), all restarts
    "published",  # a published checkpoint's recipe and compute (vitscale.published), or None
)

_FEWSHOT_RE = re.compile(r"fewshot/(?P<dataset>[^/]+)/(?P<shots>\d+)shot")


def fewshot_key(dataset: str, shots: int) -> str:
    """``fewshot/<dataset>/<k>shot``: mean accuracy over the sampling seeds."""
    return f"fewshot/{dataset}/{shots}shot"


def parse_fewshot_key(key: str) -> tuple[str, int] | None:
    """``(dataset, k)`` for a few-shot metric name, else None."""
    m = _FEWSHOT_RE.fullmatch(key)
    return (m["dataset"], int(m["shots"])) if m else None


def finetune_key(dataset: str) -> str:
    """``finetune/<dataset>/top1``: test accuracy after fine-tuning."""
    return f"finetune/{dataset}/top1"


def is_accuracy(key: str) -> bool:
    """Accuracy metrics (higher is better): the ones ``best`` keeps."""
    return key.startswith(("fewshot/", "finetune/")) or key == UPSTREAM_TOP1


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path = Path(path)
    text = _dumps(obj)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


# --------------------------------------------------------------------------- faults

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFullError(RuntimeError):
    """A write failed because the disk (or the user's quota) is full. The message names
    the file and says what was kept and how to go on."""


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


def disk_full_message(error: OSError, *, what: str | None = None, kept: str) -> str:
    """``disk full: cannot write WHAT (No space left on device); KEPT``."""
    what = what or (str(error.filename) if error.filename else "a file of the run")
    return f"disk full: cannot write {what} ({error.strerror or error}); {kept}"


def describe_failure(error: BaseException) -> str:
    """One line for result.json and the grid's report: a full disk in plain words, any
    other error as ``Type: message``."""
    if isinstance(error, DiskFullError):
        return str(error)
    if is_disk_full(error):
        return disk_full_message(
            error, kept="the last checkpoint is kept: free space and run again to resume"
        )
    return f"{type(error).__name__}: {error}"


def failure_result(config: dict, *, error: str, failed_step: int | None) -> dict[str, Any]:
    """A result.json for a cell that failed before the trainer could write one (its
    process was killed, its checkpoints cannot be read): every :data:`RESULT_KEYS` entry,
    ``None`` where nothing was measured."""
    result: dict[str, Any] = dict.fromkeys(RESULT_KEYS)
    model = config.get("model") if isinstance(config, dict) else None
    result |= {
        "status": STATUS_FAILED,
        "error": error,
        "failed_step": failed_step,
        "cell_id": config.get("cell_id") if isinstance(config, dict) else None,
        "model": model.get("name") if isinstance(model, dict) else None,
        "final": {},
        "best": {},
        "finetune": {},
        "time_s": {},
    }
    return result


def is_run_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / CONFIG).is_file()
