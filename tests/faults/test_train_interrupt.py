"""Ctrl-C on ``vitscale train`` in a terminal: the first checkpoints at the next step and
exits 130; a second, while the first cannot finish (the process is stuck writing its
checkpoint), stops at once, losing no complete checkpoint; the same command then resumes
and ends as the uninterrupted run."""

from __future__ import annotations

import random
import signal
import time

import pytest
import yaml

from vitscale.train import checkpoint
from vitscale.train.signals import SECOND_INTERRUPT_S

from .conftest import (
    Foreground,
    assert_same_cell,
    cell_config,
    checkpoint_steps,
    cli,
    last_logged,
    no_traceback,
    wait_for,
)

pytestmark = pytest.mark.slow  # three trainer processes


def test_ctrl_c_checkpoints_a_second_stops_at_once_then_it_resumes(tmp_path, reference):
    config = tmp_path / "cell.yaml"
    config.write_text(yaml.safe_dump(cell_config(0)))
    run = tmp_path / reference.ids[0]
    command = ("train", str(config), "--workdir", str(run))
    logs = tmp_path / "logs"

    # 1. Ctrl-C at a random moment (the trainer held after 1 to 4 steps until it comes,
    # so that it comes mid-run): a checkpoint at the next step, said in one line.
    hold = {"FAULT_HOLD": run.name, "FAULT_HOLD_AFTER": str(random.randint(1, 4))}
    job = Foreground.start(logs, *command, **hold, FAULT_MARKERS=str(tmp_path))
    wait_for(lambda: (run / "metrics.jsonl").is_file() and last_logged(run), what="a step")
    time.sleep(random.uniform(0, 0.2))
    job.interrupt(signal.SIGINT, group=True)
    code, output = job.finish(timeout=60)
    assert code == 130, output[-3000:]
    step = last_logged(run)
    assert (
        f"preempted by SIGINT: checkpointed at step {step}; run the same command again to resume"
    ) in output
    assert checkpoint_steps(run)[-1] == step
    assert job.left_behind() == []

    # 2. Stuck writing its next checkpoint: Ctrl-C cannot be answered; a second stops it.
    job = Foreground.start(logs, *command, FAULT_STUCK=run.name, FAULT_MARKERS=str(tmp_path))
    wait_for((tmp_path / f"{run.name}.stuck").exists, what="the trainer to get stuck")
    before = checkpoint_steps(run)
    job.interrupt(signal.SIGINT, group=True)
    time.sleep(SECOND_INTERRUPT_S + 0.2)  # a second Ctrl-C, not one delivered twice
    job.interrupt(signal.SIGINT, group=True)
    code, again = job.finish(timeout=60)
    assert code == 130, again[-3000:]
    assert (
        "interrupted: stopped at once; run the same command again to resume from the last "
        "checkpoint"
    ) in again
    assert checkpoint_steps(run) == before
    assert all(checkpoint.verify(p) is None for p in checkpoint.complete(run / "checkpoints"))
    assert job.left_behind() == []

    # 3. The same command: it resumes from the last complete checkpoint and finishes.
    done = cli(*command)
    assert done.returncode == 0, done.stderr[-3000:]
    last = run / "checkpoints" / checkpoint._name(before[-1])
    assert f"resumed from {last} (step {before[-1]}, restart 1)" in done.stdout
    no_traceback(output, again, done.stdout, done.stderr)
    assert_same_cell(run, reference.cells[0])
