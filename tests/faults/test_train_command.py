"""``vitscale train`` in a terminal, with W&B on (offline, as with no API key), interrupted
every way one after another, then run to the end: it must equal the uninterrupted run bit
for bit, leave no process behind and print no traceback.

    1. Ctrl-C at a random moment -> a checkpoint at the next step; exit 130
    2. Ctrl-C while the trainer is stuck writing its next checkpoint, then a second one
                                 -> stopped at once, no complete checkpoint lost; exit 130
    3. the same command; W&B's service process (``wandb-core``) killed mid-run, as the
       out-of-memory killer would
                                 -> one warning, W&B off for the run, training goes on to
                                    the end; exit 0
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
import yaml

from vitscale import record as rf
from vitscale.train import checkpoint
from vitscale.train.signals import SECOND_INTERRUPT_S

from ..helpers.faults import (
    Foreground,
    assert_same_cell,
    cell_config,
    checkpoint_steps,
    children,
    last_logged,
    no_traceback,
    wait_for,
)

pytestmark = pytest.mark.slow  # three trainer processes


def _wandb_core(pid: int) -> int | None:
    for child in children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as fh:
                if fh.read().split(b"\0")[0].endswith(b"wandb-core"):
                    return child
        except OSError:
            continue
    return None


def test_ctrl_c_twice_then_wandb_killed_then_it_finishes_as_the_uninterrupted_run(
    tmp_path, reference
):
    config = tmp_path / "cell.yaml"
    config.write_text(yaml.safe_dump(cell_config(0) | {"wandb": {"mode": "offline"}}))
    run = tmp_path / reference.ids[0]  # W&B's mode is no part of the cell: same id
    command = ("train", str(config), "--workdir", str(run))
    logs = tmp_path / "logs"
    outputs = []

    def finished(job: Foreground) -> int:
        code, output = job.finish(timeout=120)
        outputs.append(output)
        assert job.left_behind() == [], output[-3000:]
        return code

    # 1. Ctrl-C at a random moment (the trainer held after 1 to 4 steps until it comes,
    # so that it comes mid-run): a checkpoint at the next step, said in one line.
    hold = {"FAULT_HOLD": run.name, "FAULT_HOLD_AFTER": str(random.randint(1, 4))}
    job = Foreground.start(logs, *command, **hold, FAULT_MARKERS=str(tmp_path))
    wait_for(lambda: (run / rf.METRICS).is_file() and last_logged(run), what="a step")
    time.sleep(random.uniform(0, 0.2))
    job.interrupt(signal.SIGINT, group=True)
    assert finished(job) == 130, outputs[-1][-3000:]
    step = last_logged(run)
    assert (
        f"preempted by SIGINT: checkpointed at step {step}; run the same command again to resume"
    ) in outputs[-1]
    assert checkpoint_steps(run)[-1] == step

    # 2. Stuck writing its next checkpoint: Ctrl-C cannot be answered; a second stops it.
    job = Foreground.start(logs, *command, FAULT_STUCK=run.name, FAULT_MARKERS=str(tmp_path))
    wait_for((tmp_path / f"{run.name}.stuck").exists, what="the trainer to get stuck")
    before = checkpoint_steps(run)
    job.interrupt(signal.SIGINT, group=True)
    time.sleep(SECOND_INTERRUPT_S + 0.2)  # a second Ctrl-C, not one delivered twice
    job.interrupt(signal.SIGINT, group=True)
    assert finished(job) == 130, outputs[-1][-3000:]
    assert (
        "interrupted: stopped at once; run the same command again to resume from the last "
        "checkpoint"
    ) in outputs[-1]
    assert checkpoint_steps(run) == before
    assert all(checkpoint.verify(p) is None for p in checkpoint.complete(run / "checkpoints"))

    # 3. The same command: it resumes from the last complete checkpoint; W&B's service
    # dies under it a few steps later, and it finishes all the same.
    job = Foreground.start(logs, *command)
    service = wait_for(lambda: _wandb_core(job.proc.pid), what="wandb-core to start")
    wait_for(lambda: last_logged(run) >= before[-1] + 2, what="training to go on")
    os.kill(service, signal.SIGKILL)
    killed_at = last_logged(run)
    assert finished(job) == 0, outputs[-1][-3000:]
    assert killed_at < rf.read_json(run / rf.RESULT)["steps"]  # it was mid-run
    last = run / "checkpoints" / checkpoint._name(before[-1])
    assert f"resumed from {last} (step {before[-1]}, restart 1)" in outputs[-1]
    (warning,) = [line for line in outputs[-1].splitlines() if "W&B disabled" in line]
    assert warning.endswith("Error); training goes on, metrics.jsonl keeps every row")
    no_traceback(*outputs)
    assert_same_cell(run, reference.cells[0])
