"""Preemption-safe checkpoints: written aside, published by one atomic rename.

Layout under ``<run>/checkpoints/``::

    step_000001000/          the complete checkpoint before the latest: the fallback
    step_000001200/          the latest complete checkpoint
        state.pt             model, optimiser, scheduler, step, progress (rank 0)
        rng_rank0.pt ...     every RNG of every process (torch, its GPU's, numpy, python)
    .tmp-step_000001400/     a checkpoint being written: never read

A checkpoint folder gets its final name only after every process has written and
fsynced its files, so a kill at any moment leaves the previous checkpoint intact and a
partial one is never mistaken for a complete one. Files load with
``torch.load(..., weights_only=True)``: no pickled code runs on resume.

A published checkpoint can still go bad afterwards: a copy of the run folder cut short,
a disk or network filesystem that lost a write. Resuming therefore first reads every
file back against the checksums its zip container carries (:func:`verify`; torch itself
loads flipped bytes without a word) and falls back to the checkpoint before when the
latest fails (:func:`resumable`), so two complete checkpoints are kept while a run
trains. The older one is removed just before a new one is written, so the disk never
holds more than two (one of them partial), as with one kept; a finished run keeps only
its last (:func:`prune`). Checkpoints at the steps a run is told to keep (``branch.keep``:
the branch points of the cells that share its stable phase, docs/schedules.md) are never
pruned. A full disk while writing removes the partial checkpoint and
raises :class:`~vitscale.runfolder.DiskFullError` naming what was kept.
"""

from __future__ import annotations

import os
import random
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import record as rf
from ..errors import DiskFullError, disk_full_message, is_disk_full
from .runtime import from_rank0

PREFIX = rf.CHECKPOINT_PREFIX
TMP_PREFIX = ".tmp-"
STATE = rf.CHECKPOINT_STATE
complete = rf.complete_checkpoints  # the published checkpoints, oldest first


class CheckpointError(RuntimeError):
    """No checkpoint of a run can be read back; the message names the files."""


def _name(step: int) -> str:
    return f"{PREFIX}{step:09d}"


def at(directory: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` is published under ``directory``."""
    return directory / _name(step)


def latest(directory: Path) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    found = complete(directory)
    return found[-1] if found else None


def verify(path: Path) -> str | None:
    """None when every file of the checkpoint at ``path`` reads back whole, else what is
    wrong with the first that does not (a truncated file, a checksum that fails)."""
    for f in sorted(path.glob("*.pt")):
        try:
            with zipfile.ZipFile(f) as archive:
                bad = archive.testzip()
        except Exception as e:  # noqa: BLE001 - any way a zip container can be broken
            return f"{f} cannot be read ({type(e).__name__}: {e})"
        if bad is not None:
            return f"{f} is corrupted ({bad} fails its checksum)"
    return None


def resumable(directory: Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint that reads back whole (None when there is none at all), and
    what was wrong with the newer ones skipped. Raises :class:`CheckpointError` when
    checkpoints exist but none reads back."""
    problems = []
    for path in reversed(complete(directory)):
        problem = verify(path)
        if problem is None:
            return path, problems
        problems.append(problem)
    if problems:
        raise CheckpointError(
            f"no checkpoint of this run can be read back: {'; '.join(problems)}; "
            f"delete {directory} to train the cell from the start"
        )
    return None, []


def prune(directory: Path, *, keep: int, pinned=()) -> None:
    """Remove all but the newest ``keep`` complete checkpoints (and partial ones), never
    those of the ``pinned`` steps."""
    if not directory.is_dir():
        return
    for stale in directory.glob(f"{TMP_PREFIX}{PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    found = [p for p in complete(directory) if rf.checkpoint_step(p) not in pinned]
    for old in found[: max(0, len(found) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def rng_state() -> dict[str, Any]:
    """Every RNG this process draws from, as tensors and plain values (weights_only-safe):
    the CPU's, numpy's, Python's and, on a GPU, its own device's (the current one:
    Accelerate's ``cuda:LOCAL_RANK``). Not every visible GPU's: under ``--gpu-bind=none`` a
    process sees all of its node's, and a resume on fewer (2 x 4 after 1 x 8, ``--processes
    4``) indexed past them, or gave a process whose local rank changed another GPU's RNG."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": pos,
            "has_gauss": has_gauss,
            "cached_gaussian": cached,
        },
        "python": _python_state_to_tensor(random.getstate()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """:func:`rng_state` restored, the saved GPU's into this process's own. A checkpoint
    from before holds every visible GPU's: the one at this device's index, if any."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (
            n["kind"],
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    random.setstate(_python_state_from_tensor(state["python"]))
    gpu = state.get("cuda")
    if gpu is None or not torch.cuda.is_available():
        return
    if isinstance(gpu, list):
        index = torch.cuda.current_device()
        gpu = gpu[index] if index < len(gpu) else None
    if gpu is not None:
        torch.cuda.set_rng_state(gpu)


def _python_state_to_tensor(state: tuple) -> dict[str, Any]:
    version, internal, gauss = state
    return {
        "version": version,
        "internal": torch.tensor(internal, dtype=torch.int64),
        "gauss": gauss,
    }


def _python_state_from_tensor(state: dict[str, Any]) -> tuple:
    return state["version"], tuple(int(v) for v in state["internal"].tolist()), state["gauss"]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Writes:
    """A file torch.save writes through, keeping the OSError behind a failed write:
    torch reports a full disk only as "unexpected pos"."""

    def __init__(self, fh) -> None:
        self.fh, self.error = fh, None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.fh.flush()


def _save(obj: Any, path: Path) -> None:
    try:
        with open(path, "wb") as fh:
            out = _Writes(fh)
            try:
                torch.save(obj, out)
            except RuntimeError:
                if out.error is None:
                    raise
                raise out.error from None
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as e:
        e.filename = e.filename or str(path)
        raise


def save(
    directory: Path,
    *,
    step: int,
    state: dict[str, Any],
    accelerator,
    pinned=(),
) -> Path:
    """Write a checkpoint for ``step`` from every process of ``accelerator``; rank 0
    publishes it.

    ``state`` (model, optimiser, ...) is written by rank 0 only (it is replicated);
    every rank writes its own RNG state. Whether the step is published already is rank 0's
    answer on every rank: a stale entry that one node's filesystem still lists would
    otherwise send that rank past the barriers the others wait at. The latest complete
    checkpoint before this one is kept (the fallback), older ones go first, but for the
    ``pinned`` steps'.
    """
    rank, barrier = accelerator.process_index, accelerator.wait_for_everyone
    final = directory / _name(step)
    tmp = directory / f"{TMP_PREFIX}{_name(step)}"
    if from_rank0(accelerator, final.exists()):  # published already (a stop at a periodic step)
        return final
    previous = latest(directory)
    try:
        if rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            prune(directory, keep=1, pinned=pinned)
            tmp.mkdir()
        barrier()
        _save(rng_state(), tmp / f"rng_rank{rank}.pt")
        barrier()
        if rank == 0:
            _save({**state, "num_processes": accelerator.num_processes}, tmp / STATE)
            _fsync_dir(tmp)
            os.rename(tmp, final)
            _fsync_dir(directory)
    except OSError as e:
        if not is_disk_full(e):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # the partial checkpoint: its room back
        kept = (
            f"the previous checkpoint ({previous}) is kept: free space and run again to "
            "resume from it"
            if previous is not None and previous != final
            else "no earlier checkpoint: free space and run again to start the cell over"
        )
        raise DiskFullError(
            disk_full_message(e, what=f"checkpoint {final} ({e.filename})", kept=kept)
        ) from e
    barrier()
    return final


def load(path: Path, *, rank: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(state, this rank's RNG state or None if it was saved with fewer processes)``.

    The state is memory-mapped, not read: every rank of a node loads the same file, and
    eight private copies of a large model's weights and optimiser state at once are what
    the out-of-memory killer ends a resume with. The pages are the node's page cache,
    shared, until a rank writes to them (then that page is its own)."""
    state = torch.load(path / STATE, map_location="cpu", weights_only=True, mmap=True)
    rng_file = path / f"rng_rank{rank}.pt"
    rng = (
        torch.load(rng_file, map_location="cpu", weights_only=True) if rng_file.is_file() else None
    )
    return state, rng
