"""A full disk, for real: the run folder on a tmpfs too small for what the trainer
writes next. The error must say "disk full" in one line (no traceback), name the file and
what was kept; with room again the same command goes on, ending as the uninterrupted run.
"""

from __future__ import annotations

import pytest
import yaml

from vitscale import record as rf
from vitscale.train import checkpoint

from ..helpers.faults import (
    assert_same_cell,
    cell_config,
    checkpoint_steps,
    cli,
    copy_cell,
    fill,
    no_traceback,
)

pytestmark = pytest.mark.slow  # each trains a cell in a process of its own

MiB = 1 << 20


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
