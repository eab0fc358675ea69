"""The local executor interrupted in every way a user (or the machine) interrupts it, one
after another on the same three-cell grid (cells a and b on two workers, c waiting), at
random moments, then run to the end: every cell must equal the uninterrupted run bit for
bit, none run twice, no process outlive its grid, no traceback appear anywhere.

    1. Ctrl-C (SIGINT to the foreground process group), a stuck writing a checkpoint,
       --stop-timeout 2     -> b checkpoints; a is stopped when the wait ends; exit 130;
                               c never starts
    2. SIGINT to the grid process alone (``timeout -s INT``, a job manager)
                            -> a and b checkpoint and stop; 130
    3. SIGTERM to the grid process, a stuck again, then Ctrl-C
                            -> b checkpoints; the second interrupt stops a at once; 143
    4. SIGKILL of the grid  -> the kernel tells its workers, which checkpoint and exit,
                               silently
    5. SIGKILL of a's worker mid-checkpoint and of b's between two steps
                            -> a and b fail with the reason in status; c runs; exit 1
    6. the same command, b's latest checkpoint corrupted and a garbled line in its
       metrics.jsonl        -> b falls back to the checkpoint before and drops the line;
                               every cell done, equal to the uninterrupted run; exit 0

The sitecustomize hook (conftest) puts the cells where a signal must find them: "a stuck"
hangs halfway through writing a checkpoint; the other cells, "held", wait for a stop
signal after a random number of steps (1 to 4), so that each run moves them a bounded
number of steps however long the test takes, and a SIGKILL of a held cell lands between
two steps. The signals all come from outside, with ``kill``, at random moments once the
cells train.
"""

from __future__ import annotations

import os
import random
import signal

import pytest

from vitscale import record as rf
from vitscale.train import checkpoint

from ..helpers.faults import (
    GridRun,
    assert_same_cell,
    checkpoint_steps,
    last_logged,
    locked_by,
    no_traceback,
    read_status,
    wait_for,
    write_grid,
)

pytestmark = pytest.mark.slow


def _stopped_cleanly(cell) -> None:
    """Stopped by a signal at a step boundary: the checkpoint holds the last logged step."""
    step = last_logged(cell)
    assert checkpoint_steps(cell)[-1] == step, cell.name
    assert (cell / rf.LOG).read_text().rstrip().endswith(f"checkpointed at step {step}")
    assert not (cell / rf.RESULT).exists()


def _hooks(rng: random.Random, markers, *, stuck=(), hold=()) -> dict[str, str]:
    """The environment that has ``stuck`` cells hang mid-checkpoint and ``hold`` cells
    wait for a stop signal after 1 to 4 steps (hooks/sitecustomize.py)."""
    for old in markers.iterdir():
        old.unlink()
    return {
        "FAULT_MARKERS": str(markers),
        "FAULT_STUCK": ",".join(c.name for c in stuck),
        "FAULT_HOLD": ",".join(c.name for c in hold),
        "FAULT_HOLD_AFTER": str(rng.randint(1, 4)),
    }


def _marked(markers, cell, what: str) -> None:
    wait_for((markers / f"{cell.name}.{what}").exists, what=f"{cell.name} to be {what}")


def _intact(cell, before: list[int]) -> None:
    """A cell stopped mid-checkpoint lost no complete checkpoint."""
    assert checkpoint_steps(cell) == before
    assert all(checkpoint.verify(p) is None for p in checkpoint.complete(cell / "checkpoints"))
    assert len(list((cell / "checkpoints").glob(".tmp-step_*"))) == 1  # the half-written one


def test_interrupted_every_way_then_finished_equals_the_uninterrupted_run(tmp_path, reference):
    rng = random.Random()
    grid = write_grid(tmp_path)
    runs = tmp_path / "runs"
    markers = tmp_path / "markers"
    markers.mkdir()
    seeds = {0: "a", 1: "b", 2: "c"}
    cell = {seeds[s]: runs / "faults" / cid for s, cid in reference.ids.items()}
    a, b, c = cell["a"], cell["b"], cell["c"]
    outputs: list[str] = []

    def finished(run: GridRun, timeout: float = 300) -> tuple[int, str]:
        code, output = run.finish(timeout)
        outputs.append(output)
        assert run.left_behind() == [], output[-3000:]
        return code, output

    # 1. Ctrl-C of the foreground group; a stuck; the wait is bounded by --stop-timeout.
    hooks = _hooks(rng, markers, stuck=[a], hold=[b])
    run = GridRun.start(grid, runs, "--stop-timeout", "2", **hooks)
    _marked(markers, a, "stuck")
    run.when_training(rng, rows=0, every=[b])
    workers = run.workers()
    assert len(workers) == 2 and all(os.getpgid(w) != run.proc.pid for w in workers)
    run.interrupt(signal.SIGINT, group=True)
    code, output = finished(run, timeout=60)
    assert code == 130, output[-3000:]
    assert "SIGINT: no new cells; waiting up to 2 s for 2 running cell(s)" in output
    assert "no stop within 2 s: 1 cell(s) stopped at once" in output
    assert (
        f"interrupted by SIGINT: 1 cell(s) checkpointed and stopped, 1 stopped at once "
        f"({a.name}: they resume from their last periodic checkpoint), 1 not started; "
        "run the same command again to resume"
    ) in output
    assert not c.exists()  # no new cell started
    _stopped_cleanly(b)
    _intact(a, [])
    status = read_status(runs)
    assert status[b.name]["status"] == status[a.name]["status"] == "pending"
    step = last_logged(b)
    assert status[b.name]["note"] == f"interrupted; resumes from its checkpoint (step {step})"
    assert status[a.name]["note"] == "interrupted before its first checkpoint; starts over"

    # 2. SIGINT to the grid process alone: both cells checkpoint and stop.
    run = GridRun.start(grid, runs, **_hooks(rng, markers, hold=[a, b]))
    run.when_training(rng, rows=0, every=[a, b])
    run.interrupt(signal.SIGINT, group=False)
    code, output = finished(run, timeout=60)
    assert code == 130, output[-3000:]
    assert (
        "interrupted by SIGINT: 2 cell(s) checkpointed and stopped, 1 not started; "
        "run the same command again to resume"
    ) in output
    assert not c.exists()
    for stopped in (a, b):
        _stopped_cleanly(stopped)

    # 3. SIGTERM to the grid process, a stuck again; then Ctrl-C: a is stopped at once.
    run = GridRun.start(grid, runs, **_hooks(rng, markers, stuck=[a], hold=[b]))
    _marked(markers, a, "stuck")
    run.when_training(rng, rows=0, every=[b])
    stops = (b / rf.LOG).read_text().count("preempted")
    run.interrupt(signal.SIGTERM, group=False)
    wait_for(lambda: (b / rf.LOG).read_text().count("preempted") > stops, what="b to stop")
    before = checkpoint_steps(a)
    run.interrupt(signal.SIGINT, group=True)
    code, output = finished(run, timeout=60)
    assert code == 143, output[-3000:]
    assert "SIGTERM: no new cells; waiting up to 300 s" in output
    assert "a second interrupt: 1 cell(s) stopped at once" in output
    _stopped_cleanly(b)
    _intact(a, before)

    # 4. SIGKILL of the grid: the kernel tells its workers, which checkpoint and exit.
    run = GridRun.start(grid, runs, **_hooks(rng, markers, hold=[a, b]))
    run.when_training(rng, rows=0, every=[a, b])
    run.interrupt(signal.SIGKILL, group=False)
    code, output = finished(run)  # with what the orphaned workers printed
    assert code == -signal.SIGKILL
    for stopped in (a, b):
        _stopped_cleanly(stopped)

    # 5. SIGKILL of a's worker while it writes a checkpoint, and of b's between two steps.
    run = GridRun.start(grid, runs, **_hooks(rng, markers, stuck=[a], hold=[b]))
    _marked(markers, a, "stuck")
    _marked(markers, b, "held")
    before = checkpoint_steps(a)
    for killed in (a, b):
        worker = locked_by(killed)
        assert worker in run.workers()
        os.killpg(worker, signal.SIGKILL)  # its session: the worker and what it started
    code, output = finished(run)
    assert code == 1, output[-3000:]
    assert output.count("failed: the process running this cell was killed by SIGKILL") == 2
    status = read_status(runs)
    for killed in (a, b):
        assert status[killed.name]["status"] == "failed"
        assert status[killed.name]["note"].startswith("the process running this cell was killed")
    assert status[c.name]["status"] == "done"  # on a fresh worker
    _intact(a, before)
    done_at = (c / rf.RESULT).stat().st_mtime_ns

    # 6. The same command again, b's latest checkpoint corrupted on the way (bytes in the
    # middle of its weights flipped, which torch itself would load without a word) and a
    # garbled line in its metrics (a torn write, bytes lost): dropped on resume.
    steps = checkpoint_steps(b)
    assert len(steps) == 2, steps  # killed between steps: the one before is kept
    state = checkpoint.latest(b / "checkpoints") / checkpoint.STATE
    data = bytearray(state.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(x ^ 0xFF for x in data[middle : middle + 64])
    state.write_bytes(bytes(data))
    lines = (b / rf.METRICS).read_bytes().splitlines(keepends=True)
    lines.insert(1, b'\x00\xff{"step": 2, "train/lo\n')
    (b / rf.METRICS).write_bytes(b"".join(lines))
    run = GridRun.start(grid, runs)
    code, output = finished(run)
    assert code == 0, output[-3000:]
    assert "2 cells to run" in output and ", 1 done" in output  # the finished one is not run again
    assert (c / rf.RESULT).stat().st_mtime_ns == done_at
    log = (b / rf.LOG).read_text()
    assert f"skipped a checkpoint that cannot be resumed from: {state} is corrupted" in log
    assert f"resumed from {b / 'checkpoints' / checkpoint._name(steps[0])}" in log
    for seed, name in seeds.items():
        assert_same_cell(cell[name], reference.cells[seed])  # the garbled line dropped too
        no_traceback((cell[name] / rf.LOG).read_text())
        total = rf.read_json(cell[name] / rf.RESULT)["steps"]
        assert checkpoint_steps(cell[name]) == [total]  # a finished cell keeps its last only
        assert not list((cell[name] / "checkpoints").glob(".tmp-*"))
    no_traceback(*outputs)
    assert {row["status"] for row in read_status(runs).values()} == {"done"}
