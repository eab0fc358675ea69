"""One cell end to end: the run folder, exact resume after a signal or a SIGKILL mid-
checkpoint, a non-finite loss, 2 CPU processes against 1, and the W&B mirror."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vitscale import runfolder as rf
from vitscale.train import Preempted, checkpoint, loop, train
from vitscale.train.timing import PHASES

from .conftest import tiny_config

TIMING_KEYS = {rf.THROUGHPUT, rf.MFU}


def _rows(run: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock-dependent entries."""
    return [
        {k: v for k, v in row.items() if k not in TIMING_KEYS}
        for row in rf.iter_metrics(run / rf.METRICS)
    ]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    latest = checkpoint.latest(run / rf.CHECKPOINTS)
    return torch.load(latest / checkpoint.STATE, weights_only=True)["model"]


def _assert_same_run(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), f"{key} differs"
    assert _rows(a) == _rows(b)
    ra, rb = (rf.read_json(p / rf.RESULT) for p in (a, b))
    assert ra["best"] == rb["best"] and ra["steps"] == rb["steps"]
    assert ra["pretrain_exaflops"] == rb["pretrain_exaflops"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted")
    result = train(tiny_config(), run)
    assert result["status"] == rf.STATUS_DONE and result["restarts"] == 0
    return run


def test_run_folder_contract(uninterrupted):
    config = rf.read_json(uninterrupted / rf.CONFIG)
    result = rf.read_json(uninterrupted / rf.RESULT)
    assert set(rf.RESULT_KEYS) <= set(result)
    assert config["cell_id"] == result["cell_id"] and config["data"]["num_examples"] == 512
    rows = list(rf.iter_metrics(uninterrupted / rf.METRICS))
    assert [r[rf.STEP] for r in rows] == list(range(1, 13))
    for row in rows:
        for key in (rf.EXAMPLES_SEEN, rf.TRAIN_LOSS, rf.LR, rf.EXAFLOPS, rf.THROUGHPUT):
            assert key in row
        assert row[rf.EXAMPLES_SEEN] == 16 * row[rf.STEP]
    # Compute is cumulative, paper convention: 3 x 2 x MACs per example seen.
    from vitscale.flops import count

    per_example = count("ViT-Pico/4", 32, num_classes=256, head="pretrain").train_flops_per_example
    assert rows[-1][rf.EXAFLOPS] == pytest.approx(per_example * 12 * 16 / 1e18)
    assert result["pretrain_exaflops"] == pytest.approx(rows[-1][rf.EXAFLOPS])
    # Few-shot at steps 6 and 12: each seed and the mean; best kept over the run.
    key = rf.fewshot_key("synthetic-textures", 2)
    evals = [r for r in rows if key in r]
    assert [r[rf.STEP] for r in evals] == [6, 12]
    assert result["best"][key] == max(r[key] for r in evals)
    assert rows[-1][key] == pytest.approx((rows[-1][key + "/seed0"] + rows[-1][key + "/seed1"]) / 2)
    # Where the time went, by phase (benchmarks/overhead.py reads it).
    assert set(result["time_s"]) == set(PHASES) and result["time_s"]["step"] > 0
    assert sum(result["time_s"].values()) <= result["wall_clock_s"]
    # One complete checkpoint, loadable without unpickling code.
    (ckpt,) = (uninterrupted / rf.CHECKPOINTS).iterdir()
    state = torch.load(ckpt / checkpoint.STATE, weights_only=True)
    assert state["progress"]["step"] == 12


def _signal_at(monkeypatch, call: int) -> None:
    """Send this process SIGUSR1 during the ``call``-th loss evaluation (mid-step)."""
    calls = {"n": 0}
    real = loop.loss_fn

    def loss_then_signal(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            os.kill(os.getpid(), signal.SIGUSR1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "loss_fn", loss_then_signal)


@pytest.mark.parametrize("interrupt_step", [3, 8])
def test_resume_after_signal_is_exact(tmp_path, monkeypatch, uninterrupted, interrupt_step):
    """SIGUSR1 at a step between periodic checkpoints: checkpoint there, stop, resume."""
    with monkeypatch.context() as patch:
        _signal_at(patch, interrupt_step)
        with pytest.raises(Preempted) as stopped:
            train(tiny_config(), tmp_path)
    assert stopped.value.step == interrupt_step and stopped.value.signal_name == "SIGUSR1"
    assert not (tmp_path / rf.RESULT).exists()
    assert checkpoint.latest(tmp_path / rf.CHECKPOINTS).name.endswith(f"{interrupt_step:09d}")
    result = train(tiny_config(), tmp_path)
    assert result["status"] == rf.STATUS_DONE and result["restarts"] == 1
    _assert_same_run(uninterrupted, tmp_path)


_DIE_DURING_SECOND_CHECKPOINT = """
import json, os, signal, sys
from vitscale.train import checkpoint, train

real, written = checkpoint._save, []

def save_then_die(obj, path):
    if path.name == checkpoint.STATE:
        written.append(path)
        if len(written) == 2:  # half of the second checkpoint's state, then SIGKILL
            path.write_bytes(b"partial")
            os.kill(os.getpid(), signal.SIGKILL)
    real(obj, path)

checkpoint._save = save_then_die
train(json.loads(sys.argv[1]), sys.argv[2])
"""


def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, uninterrupted):
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            _DIE_DURING_SECOND_CHECKPOINT,
            json.dumps(tiny_config()),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    ckpts = tmp_path / rf.CHECKPOINTS
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == [".tmp-step_000000010", "step_000000005"]  # the torn one never published
    assert checkpoint.latest(ckpts).name == "step_000000005"
    result = train(tiny_config(), tmp_path)
    assert result["restarts"] == 1
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_000000012"]
    _assert_same_run(uninterrupted, tmp_path)


def test_non_finite_loss_stops_and_marks_the_run_failed(tmp_path, monkeypatch):
    real, calls = loop.loss_fn, {"n": 0}

    def nan_at_step_4(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 4 else loss

    monkeypatch.setattr(loop, "loss_fn", nan_at_step_4)
    cfg = tiny_config(train={"checkpoint_every": 2})
    result = train(cfg, tmp_path)
    assert result["status"] == rf.STATUS_FAILED and result["failed_step"] == 4
    assert "non-finite loss at step 4" in result["error"]
    assert rf.read_json(tmp_path / rf.RESULT) == json.loads(json.dumps(result))
    # The last good state (step 2) is kept; no update from the bad step was applied.
    assert checkpoint.latest(tmp_path / rf.CHECKPOINTS).name == "step_000000002"
    assert [r[rf.STEP] for r in rf.iter_metrics(tmp_path / rf.METRICS)] == [1, 2, 3]


def test_two_cpu_processes_match_one(tmp_path):
    """torchrun --nproc_per_node 2 (gloo) and 1 process with the same global batch: the
    same examples per step, the same loss curve within float tolerance."""
    config = tiny_config(
        model={"dropout": 0.0},  # dropout masks depend on how the batch is split
        train={"precision": "fp32", "steps": 6, "eval_every": None, "checkpoint_every": None},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(config))
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    runs = {}
    for procs in (1, 2):
        run = tmp_path / f"p{procs}"
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={procs}",
        ]
        done = subprocess.run(
            [*launcher, "-m", "vitscale.cli", "train", str(path), "--workdir", str(run)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[procs] = run
    result = rf.read_json(runs[2] / rf.RESULT)
    assert result["num_processes"] == 2  # a silent single-process fallback fails here
    assert result["device_hours"] == pytest.approx(2 * result["wall_clock_s"] / 3600)
    one, two = _rows(runs[1]), _rows(runs[2])
    assert [r[rf.STEP] for r in one] == [r[rf.STEP] for r in two]
    for a, b in zip(one, two, strict=True):
        assert a[rf.TRAIN_LOSS] == pytest.approx(b[rf.TRAIN_LOSS], rel=1e-5)
        assert a[rf.EXAMPLES_SEEN] == b[rf.EXAMPLES_SEEN]
