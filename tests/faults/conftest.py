"""The fault-injection suite's fixtures: the tiny grid's cells trained once,
uninterrupted (the reference every interrupted run must equal, bit for bit), and a small
disk to fill. Its helpers are in tests/helpers/faults.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from vitscale import record as rf

from ..helpers.faults import THREADS, cell_config


@dataclass
class Reference:
    ids: dict[int, str]  # seed -> cell id
    cells: dict[int, Path]  # seed -> its uninterrupted run folder


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Reference:
    """The three cells trained once, uninterrupted, here in the test process with the
    threads a grid worker gets: what every interrupted run must end as, bit for bit."""
    from vitscale.config import cell_id, resolve
    from vitscale.train import train

    tmp = tmp_path_factory.mktemp("reference")
    threads = torch.get_num_threads()
    torch.set_num_threads(int(THREADS))
    try:
        cells = {}
        for seed in (0, 1, 2):
            cells[seed] = tmp / str(seed)
            assert train(cell_config(seed), cells[seed]).status == rf.STATUS_DONE
    finally:
        torch.set_num_threads(threads)
    ids = {seed: cell_id(resolve(cell_config(seed))) for seed in cells}
    return Reference(ids=ids, cells=cells)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Callable[[int], Path]]:
    """``mount(size_bytes)`` -> a folder on a tmpfs of that size (remounted when called
    again: a disk made larger). Needs root; skipped without it outside CI."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the full-disk tests mount a tmpfs: run them as root in CI")
        pytest.skip("mounting a small tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    mounted = []

    def mount(size: int) -> Path:
        options = f"size={size}" + (",remount" if mounted else "")
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
        mounted.append(size)
        return where

    yield mount
    if mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)
