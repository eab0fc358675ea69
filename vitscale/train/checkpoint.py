"""Preemption-safe checkpoints: written aside, published by one atomic rename.

Layout under ``<run>/checkpoints/``::

    step_000001200/          the latest complete checkpoint
        state.pt             model, optimiser, scheduler, step, progress (rank 0)
        rng_rank0.pt ...     every RNG of every process (torch, CUDA, numpy, python)
    .tmp-step_000001400/     a checkpoint being written: never read

A checkpoint folder gets its final name only after every process has written and
fsynced its files, so a kill at any moment leaves the previous checkpoint intact and a
partial one is never mistaken for a complete one. Files load with
``torch.load(..., weights_only=True)``: no pickled code runs on resume.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

PREFIX = "step_"
TMP_PREFIX = ".tmp-"
STATE = "state.pt"


def _name(step: int) -> str:
    return f"{PREFIX}{step:09d}"


def latest(directory: Path) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    if not directory.is_dir():
        return None
    complete = [
        p
        for p in directory.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and (p / STATE).is_file()
    ]
    return max(complete, key=lambda p: int(p.name[len(PREFIX) :]), default=None)


def rng_state() -> dict[str, Any]:
    """Every RNG this process draws from, as tensors and plain values (weights_only-safe)."""
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
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
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
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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


def _save(obj: Any, path: Path) -> None:
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def save(
    directory: Path, *, step: int, state: dict[str, Any], rank: int, num_processes: int, barrier
) -> Path:
    """Write a checkpoint for ``step`` from every process; rank 0 publishes it.

    ``state`` (model, optimiser, ...) is written by rank 0 only (it is replicated);
    every rank writes its own RNG state. ``barrier()`` synchronises the processes.
    """
    final = directory / _name(step)
    tmp = directory / f"{TMP_PREFIX}{_name(step)}"
    if rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    barrier()
    _save(rng_state(), tmp / f"rng_rank{rank}.pt")
    barrier()
    if rank == 0:
        _save({**state, "num_processes": num_processes}, tmp / STATE)
        _fsync_dir(tmp)
        if final.exists():  # this step is already published (resumed, then signalled at once)
            shutil.rmtree(tmp)
        else:
            os.rename(tmp, final)
        _fsync_dir(directory)
        for old in directory.iterdir():
            if old.is_dir() and old.name.startswith(PREFIX) and old != final:
                shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def load(path: Path, *, rank: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(state, this rank's RNG state or None if it was saved with fewer processes)``."""
    state = torch.load(path / STATE, map_location="cpu", weights_only=True)
    rng_file = path / f"rng_rank{rank}.pt"
    rng = (
        torch.load(rng_file, map_location="cpu", weights_only=True) if rng_file.is_file() else None
    )
    return state, rng
