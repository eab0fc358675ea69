"""A full disk, for real: the run folder on a tmpfs too small for what the trainer
writes next. The error must say "disk full" in one line (no traceback), name the file and
what was kept; with room again the same command goes on, ending as the uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
import yaml

from vitscale import record as rf
from vitscale.train import checkpoint

from ..helpers.faults import (
    Foreground,
    assert_same_cell,
    cell_config,
    checkpoint_steps,
    cli,
    copy_cell,
    fill,
    last_logged,
    no_traceback,
    wait_for,
    write_grid,
)
from ..helpers.runs import rows_of

pytestmark = pytest.mark.slow  # each trains a cell in a process of its own

MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


def test_full_disk_while_writing_a_checkpoint_keeps_the_one_before(tmp_path, small_disk, reference):
    config = tmp_path / "cell.yaml"
    config.write_text(yaml.safe_dump(cell_config(0)))
    first = checkpoint.latest(reference.cells[0] / rf.CHECKPOINTS)
    size = sum(f.stat().st_size for f in first.iterdir())
    disk = small_disk(int(1.5 * size) + MiB // 4)  # room for one checkpoint, not two
    run = disk / "run"

    failed = cli("train", str(config), "--workdir", str(run))
    assert failed.returncode == 1, failed.stderr[-3000:]
    no_traceback(failed.stdout, failed.stderr)
    kept = run / "checkpoints" / "step_000000004"
    line = (
        f"error: disk full: cannot write checkpoint {run / 'checkpoints' / 'step_000000008'} "
        f"({run / 'checkpoints' / '.tmp-step_000000008'}"
    )
    assert line in failed.stderr
    assert f"No space left on device); the previous checkpoint ({kept}) is kept" in failed.stderr
    result = rf.read_json(run / rf.RESULT)
    assert result["status"] == rf.STATUS_FAILED and result["error"].startswith("disk full: ")
    assert checkpoint_steps(run) == [4] and checkpoint.verify(kept) is None
    assert not list((run / "checkpoints").glob(".tmp-*"))  # the partial one, removed

    small_disk(64 * MiB)  # room again: the same command resumes from step 4
    resumed = cli("train", str(config), "--workdir", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {kept} (step 4, restart 1)" in resumed.stdout
    assert_same_cell(run, reference.cells[0])


def test_full_disk_while_writing_the_result_keeps_the_last_checkpoint(small_disk, reference):
    """Training ended, its last checkpoint written, then the process died before writing
    result.json (a copy of the finished run without it); the disk is full when the same
    command runs again."""
    disk = small_disk(16 * MiB)
    run = copy_cell(reference.cells[0], disk / "run", without=(rf.RESULT,))
    filler = fill(disk)

    failed = cli("train", str(run / rf.CONFIG), "--workdir", str(run))
    assert failed.returncode == 1, failed.stderr[-3000:]
    no_traceback(failed.stdout, failed.stderr)
    assert (
        f"error: disk full: cannot write {run / rf.RESULT} (No space left on device); training "
        "is complete and its last checkpoint is kept: free space and run again to write the "
        "result"
    ) in failed.stderr
    assert sorted(p.name for p in run.iterdir()) == sorted(
        p.name for p in reference.cells[0].iterdir() if p.name != rf.RESULT
    )  # nothing half-written left behind
    (last,) = checkpoint.complete(run / rf.CHECKPOINTS)
    assert checkpoint.verify(last) is None

    filler.unlink()
    again = cli("train", str(run / rf.CONFIG), "--workdir", str(run))
    assert again.returncode == 0, again.stderr[-3000:]
    assert_same_cell(run, reference.cells[0])


def test_full_disk_while_appending_metrics_keeps_every_row_and_the_checkpoint(
    tmp_path, small_disk, reference
):
    """Stopped by Ctrl-C mid-run (a checkpoint at that step), then resumed with no byte
    free: the first write is the next step's metrics row. (A tmpfs lets an append use the
    rest of the file's last page, so the file is first padded to a page boundary with
    blank lines, which every reader of metrics.jsonl skips.) The rows logged so far and
    the checkpoint stay whole, and with room again the same command ends as the
    uninterrupted run."""
    config = tmp_path / "cell.yaml"
    config.write_text(yaml.safe_dump(cell_config(0)))
    run = small_disk(16 * MiB) / "run"
    command = ("train", str(config), "--workdir", str(run))
    hold = {"FAULT_HOLD": run.name, "FAULT_HOLD_AFTER": "3"}
    job = Foreground.start(tmp_path / "logs", *command, **hold, FAULT_MARKERS=str(tmp_path))
    wait_for(lambda: (run / rf.METRICS).is_file() and last_logged(run), what="a step")
    job.interrupt(signal.SIGINT, group=True)
    code, output = job.finish(timeout=120)
    assert code == 130, output[-3000:]
    step, rows = last_logged(run), rows_of(run)
    assert checkpoint_steps(run) == [step]
    with open(run / rf.METRICS, "a") as fh:
        fh.write("\n" * (-fh.tell() % PAGE))
    filler = fill(run)

    failed = cli(*command)
    assert failed.returncode == 1, failed.stderr[-3000:]
    no_traceback(failed.stdout, failed.stderr)
    assert (
        f"error: disk full: cannot write {run / rf.METRICS} (No space left on device); the "
        "last checkpoint is kept: free space and run again to resume"
    ) in failed.stderr
    assert rows_of(run) == rows  # no row lost, none torn
    assert checkpoint_steps(run) == [step]
    assert checkpoint.verify(checkpoint.latest(run / rf.CHECKPOINTS)) is None

    filler.unlink()
    resumed = cli(*command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"(step {step}, restart 1)" in resumed.stdout
    assert_same_cell(run, reference.cells[0])


def test_full_disk_while_the_grid_prepares_run_folders(tmp_path, small_disk):
    """No room for a cell's config.json: each cell fails before it starts, saying so in
    one line, with no half-written file; with room again the same grid plans every cell
    to run."""
    grid = write_grid(tmp_path)
    runs = small_disk(MiB) / "runs"
    runs.mkdir()
    filler = fill(runs)
    command = ("grid", str(grid), "--executor", "local", "--workers", "2", "--runs", str(runs))

    failed = cli(*command)
    assert failed.returncode == 1, failed.stderr[-3000:]
    output = failed.stdout + failed.stderr
    no_traceback(output)
    cells = sorted(p for p in (runs / "faults").iterdir() if p.is_dir())
    assert len(cells) == 3
    for cell in cells:
        assert (
            f"{cell.name} (ViT-Femto/8) failed: disk full: cannot write {cell / rf.CONFIG} "
            "(No space left on device); the cell did not start: free space and run the grid again"
        ) in output
        assert list(cell.iterdir()) == []  # no half-written config, no temporary file
    assert "3/3 cells (3 failed)" in output  # the bar's end says so, not only "100%"

    filler.unlink()
    planned = cli(*command, "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert [c["action"] for c in json.loads(planned.stdout)["cells"]] == ["submit"] * 3
