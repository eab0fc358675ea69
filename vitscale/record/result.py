"""``result.json`` (docs/design.md, "The run folder"): one type for a cell's outcome, in
every form it takes: built by the trainer, or by a grid worker for a cell whose process
died (:meth:`RunResult.failure`), mirrored into the W&B summary and read back from either.
A field added here is carried everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DiskFullError, disk_full_message, is_disk_full
from .folder import RANK_FAILURE, RESULT, read_json, write_json_atomic
from .keys import BEST, FINAL, finetune_key, parse_finetune_key

__all__ = [
    "STATUS_DONE",
    "STATUS_FAILED",
    "RESULT_STATUSES",
    "RunResult",
    "RankFailure",
    "describe_failure",
]

STATUS_DONE = "done"
STATUS_FAILED = "failed"
RESULT_STATUSES = (STATUS_DONE, STATUS_FAILED)  # what a result.json may hold

# Mappings flattened into the W&B summary as ``<name>/<entry>`` (``best`` and ``final``
# through their metric prefixes, ``finetune`` under the fine-tuning metric's own name).
_FLAT = ("best", "final", "finetune", "time_s", "published")


@dataclass
class RunResult:
    """A finished or failed cell. ``None`` where nothing was measured."""

    status: str  # STATUS_DONE or STATUS_FAILED
    error: str | None = None  # the failure in one line
    failed_step: int | None = None  # the step that failed
    cell_id: str | None = None
    model: str | None = None
    steps: int | None = None  # optimiser steps taken
    examples_seen: int | None = None
    pretrain_exaflops: float | None = None  # paper convention (vitscale.flops)
    params: int | None = None
    wall_clock_s: float | None = None  # all restarts
    device_hours: float | None = None  # wall-clock x processes
    final: dict[str, Any] = field(default_factory=dict)  # last value of every metric logged
    best: dict[str, float] = field(default_factory=dict)  # best accuracy seen (Fig. 4)
    finetune: dict[str, float] = field(default_factory=dict)  # {dataset: test top-1}
    precision: str | None = None  # "bf16" or "fp32"
    num_processes: int | None = None
    restarts: int | None = None  # times the run resumed from a checkpoint
    time_s: dict[str, float] = field(default_factory=dict)  # per phase (train.timing.PHASES)
    skipped_samples: int | None = None  # distinct bad examples replaced (data.skip_bad_samples)
    skipped: list[str] = field(default_factory=list)  # which ones (the first 100)
    published: dict[str, Any] | None = None  # a published start's recipe (vitscale.published)

    @property
    def done(self) -> bool:
        return self.status == STATUS_DONE

    @property
    def last_step(self) -> int | None:
        """The step the run got to: the failed one, else the steps taken."""
        return self.failed_step if self.failed_step is not None else self.steps

    # ------------------------------------------------------------------- result.json

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunResult:
        """From a ``result.json`` object, of this version or an older one (missing
        fields take their defaults; unknown ones are ignored)."""
        if data.get("status") not in RESULT_STATUSES:
            raise ValueError(f"no valid status (valid: {', '.join(RESULT_STATUSES)})")
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for name in ("final", "best", "finetune", "time_s"):
            values[name] = dict(values.get(name) or {})
        values["skipped"] = list(values.get("skipped") or [])
        return cls(**values)

    def write(self, run_dir: str | Path) -> None:
        """``run_dir/result.json``, atomically."""
        write_json_atomic(Path(run_dir) / RESULT, self.to_json())

    @classmethod
    def read(cls, run_dir: str | Path) -> RunResult:
        return cls.from_json(read_json(Path(run_dir) / RESULT))

    @classmethod
    def failure(
        cls, config: Mapping[str, Any] | None, *, error: str, failed_step: int | None
    ) -> RunResult:
        """A cell that failed before its trainer could say so (its process was killed,
        its checkpoints cannot be read): identity from its config, nothing measured."""
        config = config if isinstance(config, Mapping) else {}
        model = config.get("model")
        return cls(
            status=STATUS_FAILED,
            error=error,
            failed_step=failed_step,
            cell_id=config.get("cell_id"),
            model=model.get("name") if isinstance(model, Mapping) else None,
        )

    # ------------------------------------------------------------------- W&B summary

    def to_summary(self) -> dict[str, Any]:
        """The flat W&B run summary: ``best/<metric>``, ``final/<metric>``,
        ``finetune/<dataset>/top1`` (the metric's own name), ``time_s/<phase>``,
        ``published/<entry>``; every other field under its own name."""
        flat: dict[str, Any] = {}
        for name, value in self.to_json().items():
            if name not in _FLAT:
                flat[name] = value
            elif name == "finetune":
                flat.update({finetune_key(ds): v for ds, v in value.items()})
            elif name == "published" and value is None:
                flat[name] = None
            else:
                prefix = {"best": BEST, "final": FINAL}.get(name, f"{name}/")
                flat.update({prefix + k: v for k, v in value.items()})
        return flat

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> RunResult:
        """From a W&B run summary, flat (:meth:`to_summary`) or with the mappings kept
        nested as W&B may return them; W&B's own keys and anything else are ignored."""
        values: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {name: {} for name in _FLAT}
        for key, value in summary.items():
            if key in _FLAT and isinstance(value, Mapping):
                nested[key].update(value)
            elif (dataset := parse_finetune_key(key)) is not None:
                nested["finetune"][dataset] = value
            elif key.startswith((BEST, FINAL)) or "/" in key:
                name, _, entry = key.partition("/")
                if name in nested:
                    nested[name][entry] = value
            else:
                values[key] = value
        data = values | {k: v for k, v in nested.items() if k != "published"}
        data["published"] = nested["published"] or None
        return cls.from_json(data)


def describe_failure(
    error: BaseException,
    *,
    kept: str = "the last checkpoint is kept: free space and run again to resume",
) -> str:
    """One line for result.json and the grid's report: a full disk in plain words (with
    what was ``kept``), any other error as ``Type: message``."""
    if isinstance(error, DiskFullError):
        return str(error)
    if is_disk_full(error):
        return disk_full_message(error, kept=kept)
    return f"{type(error).__name__}: {error}"


# How a process says it lost a peer (gloo, NCCL, the TCP store): what the others of a run
# report when one of them dies, never the cause.
_LOST_PEER = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "DistNetworkError",
    "DistBackendError",
)


@dataclass(frozen=True, kw_only=True)
class RankFailure:
    """One process's failure of a multi-process run, in the run folder
    (:data:`~vitscale.record.folder.RANK_FAILURE`), written as it fails: when one process
    dies the others fail next with "Connection closed by peer", and the run's result must
    name the first one's error, not the follow-on rank 0 happens to see."""

    rank: int
    error: str  # describe_failure's line
    failed_step: int | None
    at: float  # time.time() when it failed

    @property
    def lost_peer(self) -> bool:
        """A follow-on failure: this process lost another one."""
        return any(marker in self.error for marker in _LOST_PEER)

    def write(self, run_dir: str | Path) -> None:
        write_json_atomic(Path(run_dir) / RANK_FAILURE.format(rank=self.rank), vars(self))

    @classmethod
    def read_all(cls, run_dir: str | Path, *, world: int, since: float) -> list[RankFailure]:
        """The failures the ``world`` processes wrote at or after ``since`` (this attempt;
        an older attempt's file stays until that rank fails again). Each file is opened by
        its name: a listing of a shared folder may lag on another node."""
        found = []
        for rank in range(world):
            try:
                failure = cls(**read_json(Path(run_dir) / RANK_FAILURE.format(rank=rank)))
            except (OSError, ValueError, TypeError):  # none, or not readable: not there
                continue
            if failure.at >= since:
                found.append(failure)
        return found

    @staticmethod
    def first(failures: list[RankFailure]) -> RankFailure:
        """The cause: the earliest failure that is not a lost peer (the earliest of all
        when every one is)."""
        return min(failures, key=lambda f: (f.lost_peer, f.at))

    def describe(self) -> str:
        """result.json's ``error``: the process named."""
        return f"rank {self.rank}: {self.error}"
