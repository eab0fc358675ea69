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


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as fh:
        return json.load(fh)


def iter_metrics(path: str | os.PathLike) -> Iterator[dict]:
    """Rows of a metrics.jsonl; a torn last line (a crash mid-write) is skipped."""
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def is_run_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / CONFIG).is_file()
