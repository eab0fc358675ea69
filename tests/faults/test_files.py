"""A run folder's files damaged after the fact (a copy cut short, a disk that lost a
write, a folder written by an older vitscale): the trainer fails naming the file, and the
commands that only read run folders (status, figures, summary) skip or report what they
cannot read, never crash."""

from __future__ import annotations

import json

import pytest

from vitscale import record as rf
from vitscale.train import checkpoint

from ..helpers import run_folders as fixtures
from ..helpers.faults import cli, copy_cell, no_traceback


@pytest.mark.slow  # a trainer process
def test_a_truncated_only_checkpoint_fails_naming_the_file(tmp_path, reference):
    """Its only checkpoint cut in half (a finished run keeps one): nothing to fall back
    to, so the run fails saying which file and what to do, and deletes nothing itself.
    (A corrupted latest checkpoint with one before it falls back: test_interrupts.)"""
    run = copy_cell(reference.cells[0], tmp_path / "run", without=(rf.RESULT,))
    (latest,) = checkpoint.complete(run / rf.CHECKPOINTS)
    state = latest / checkpoint.STATE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])

    failed = cli("train", str(run / rf.CONFIG), "--workdir", str(run))
    assert failed.returncode == 1, failed.stderr[-3000:]
    no_traceback(failed.stdout, failed.stderr)
    advice = f"delete {run / rf.CHECKPOINTS} to train the cell from the start"
    (line,) = [x for x in failed.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith(
        f"error: no checkpoint of this run can be read back: {state} cannot be read (BadZipFile"
    )
    assert line.endswith(advice)
    result = rf.read_json(run / rf.RESULT)
    assert result["status"] == rf.STATUS_FAILED and result["error"] == line[len("error: ") :]
    assert checkpoint.complete(run / rf.CHECKPOINTS) == [latest]  # nothing deleted


def test_status_figures_and_summary_read_past_damaged_and_old_run_folders(tmp_path):
    runs = tmp_path / "runs"
    folders = fixtures.write_runs(
        runs,
        cells=4,
        models=("ViT-Pico/4", "BiT-R11x0.5"),
        subsets=(100, 1000),
        steps=(200,),
        datasets=("synthetic-shapes",),
    )
    garbled, running, old, unreadable = folders
    # A done cell's metrics with garbled lines in the middle: bytes lost, a row that is no
    # JSON object, a row without a whole-number step.
    lines = (garbled / rf.METRICS).read_bytes().splitlines(keepends=True)
    lines[1:1] = [b'\x00\xff{"step": 10, "train/lo\n', b"42\n", b'{"step": "ten"}\n']
    (garbled / rf.METRICS).write_bytes(b"".join(lines))
    # A cell stopped mid-run whose last lines are damaged: its last good row counts.
    (running / rf.RESULT).unlink()
    good = (running / rf.METRICS).read_text().splitlines()[:2]
    (running / rf.METRICS).write_text("\n".join(good) + '\n["junk"]\n{"step": 150, "examp')
    # A folder from an older vitscale: keys added since missing, one since removed, the
    # model a plain string, a result without the newer keys.
    config = json.loads((old / rf.CONFIG).read_text())
    for key in ("cell_id", "grid"):
        del config[key]
    del config["data"]["num_examples"]
    config["model"] = config["model"]["name"]
    config["train"]["warmup_epochs"] = 1
    (old / rf.CONFIG).write_text(json.dumps(config))
    result = json.loads((old / rf.RESULT).read_text())
    for key in ("params", "device_hours", "finetune", "final"):
        del result[key]
    (old / rf.RESULT).write_text(json.dumps(result))
    # And one no version could read: its config a list.
    (unreadable / rf.CONFIG).write_text("[1, 2]")

    status = cli("status", str(runs), "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    no_traceback(status.stdout, status.stderr)
    cells = {row["cell_id"]: row for row in json.loads(status.stdout)["cells"]}
    assert sorted(cells) == sorted(p.name for p in (garbled, running, old))
    assert cells[garbled.name]["status"] == cells[old.name]["status"] == "done"
    assert cells[running.name]["status"] == "pending"
    assert cells[running.name]["last_step"] == json.loads(good[-1])[rf.STEP]
    assert cells[old.name]["model"] == "?" and cells[old.name]["last_step"] == 200
    problems = json.loads(status.stdout)["problems"]
    assert len(problems) == 1 and unreadable.name in problems[0], problems

    figures = cli("figures", str(runs), "--out", str(tmp_path / "figures"), "--curves")
    assert figures.returncode == 0, figures.stderr[-3000:]
    no_traceback(figures.stdout, figures.stderr)
    assert "skipped 1 unreadable run folder" in figures.stderr
    assert unreadable.name in figures.stderr
    drawn = {p.rsplit("/", 1)[-1].split(".")[0] for p in figures.stdout.split()}
    assert {"fig4_fewshot_synthetic-shapes_5shot", "table6"} <= drawn, drawn

    summary = cli("summary", str(runs))
    assert summary.returncode == 0, summary.stderr[-3000:]
    no_traceback(summary.stdout, summary.stderr)
    assert unreadable.name in summary.stderr
