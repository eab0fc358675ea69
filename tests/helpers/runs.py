"""Comparing runs: metrics rows without the wall clock, checkpoint weights, and a stop
signal sent at a known step, and one process alone as the checkpoint writer sees it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import torch

from vitscale import record as rf
from vitscale.train import checkpoint, step

# metrics.jsonl entries that depend on the wall clock: left out when runs are compared
TIMING_KEYS = {rf.THROUGHPUT, rf.MFU}

ALONE = SimpleNamespace(process_index=0, num_processes=1, wait_for_everyone=lambda: None)


def rows_of(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl rows without the wall-clock-dependent entries."""
    return [
        {k: v for k, v in row.items() if k not in TIMING_KEYS}
        for row in rf.iter_metrics(run_dir / rf.METRICS)
    ]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The model weights of a run's latest checkpoint."""
    latest = checkpoint.latest(run_dir / rf.CHECKPOINTS)
    return torch.load(latest / checkpoint.STATE, weights_only=True)["model"]


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), f"{key} differs"
    assert rows_of(a) == rows_of(b)
    ra, rb = (rf.read_json(p / rf.RESULT) for p in (a, b))
    assert ra["best"] == rb["best"] and ra["steps"] == rb["steps"]
    assert ra["pretrain_exaflops"] == rb["pretrain_exaflops"]


def signal_at(monkeypatch, call: int) -> None:
    """Send this process SIGUSR1 during the ``call``-th loss evaluation (mid-step)."""
    calls = {"n": 0}
    real = step.loss_fn

    def loss_then_signal(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            os.kill(os.getpid(), signal.SIGUSR1)
        return real(*args, **kwargs)

    monkeypatch.setattr(step, "loss_fn", loss_then_signal)
