"""Many ranks, one run: under ``torchrun --nproc_per_node 2`` (gloo), every rank resumes
from the checkpoint rank 0 chose, even when one rank alone fails a read, and draws its own
randomness, restored exactly on resume, and a run that one rank's error ends records
that error, named by rank, and ends promptly; the local executor's cell under torchrun,
stopped, checkpoints and is reported so, and stopped at once leaves no process behind. The runs happen in launches of
tests/helpers/ranks_driver.py and rank_fault_driver.py, faults injected on one rank."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from vitscale import record as rf
from vitscale.train import checkpoint

from ..helpers.configs import tiny_config
from ..helpers.faults import (
    Foreground,
    cell_config,
    checkpoint_steps,
    children,
    last_logged,
    read_status,
    wait_for,
)
from ..helpers.runs import assert_same_run

pytestmark = pytest.mark.slow  # torchrun and two trainer processes

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
DRIVER = HELPERS / "ranks_driver.py"
FAULT_DRIVER = HELPERS / "rank_fault_driver.py"
PROMPTLY_S = 90  # a failed launch ends within this: nobody waits out a timeout
LAUNCH_TIMEOUT_S = 240  # a hang (ranks at different steps) fails instead of waiting 30 min


def launch(
    script: Path, *args: str, timeout: float = LAUNCH_TIMEOUT_S, ok: bool = True
) -> tuple[int, str]:
    """``torchrun --standalone --nproc_per_node 2 script args`` in a session of its own:
    its exit code (0 unless not ``ok``) and output. A launch still running after
    ``timeout`` is killed, workers too, and fails the test."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(script), *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""},
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in [proc.pid, *children(proc.pid)]:  # torchrun's workers: sessions of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(
            f"still running after {timeout:.0f} s (a hang?):\n{out[-4000:]}"
        ) from None
    assert (proc.returncode == 0) == ok, out[-4000:]
    return proc.returncode, out


def ranks_config() -> dict:
    """Eight steps, checkpoints every 4, dropout on, no evaluation: seconds per run."""
    return tiny_config(
        train={"steps": 8, "checkpoint_every": 4, "eval_every": None},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> tuple[Path, list[dict], str]:
    """The driver's runs, once: ``(its folder, what each rank saw, its output)``."""
    out = tmp_path_factory.mktemp("ranks")
    config = out / "cell.json"
    config.write_text(json.dumps(ranks_config()))
    _, output = launch(DRIVER, str(config), str(out))
    return out, [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)], output


def test_every_rank_resumes_from_the_checkpoint_rank0_chose(launched):
    """Stopping, rank 1 alone saw the checkpoint of step 7 as published already (a stale
    entry): both ranks wrote it, as rank 0 decided. Rank 1 alone would find that checkpoint
    unreadable: both ranks still resume at step 7, the one rank 0 verified, and finish
    together (no hang)."""
    out, seen, output = launched
    assert [s["stopped"] for s in seen] == [7, 7]
    assert seen[0]["stopped_files"] == ["rng_rank0.pt", "rng_rank1.pt", checkpoint.STATE]
    assert [s["resumed_at"] for s in seen] == [7, 7], output[-3000:]
    assert [s["status"] for s in seen] == [rf.STATUS_DONE] * 2
    assert "(step 7, restart 1): rank 0's choice, loaded by all 2 processes" in output
    result = rf.read_json(out / "stopped" / rf.RESULT)
    assert result["steps"] == 8 and result["num_processes"] == 2


def test_one_rank_failing_to_load_fails_every_rank_with_its_error(launched):
    """Rank 1 cannot read its files of the chosen checkpoint: every rank stops at once with
    rank 1's error, which result.json records, instead of rank 0 training on alone."""
    out, seen, _ = launched
    errors = [s["load_error"] for s in seen]
    assert errors[0] == errors[1]
    assert errors[0].startswith("rank 1: ") and "Input/output error (injected)" in errors[0]
    assert "step_000000007" in errors[0]
    recorded = seen[0]["load_result"]
    assert recorded["status"] == rf.STATUS_FAILED and recorded["error"] == errors[0]


def test_a_stopped_finetune_resumes_on_every_rank_from_rank0s_checkpoint(launched):
    """Fine-tuning stopped by a signal on rank 0 alone, then resumed while rank 1 would
    see no fine-tuning checkpoint (a lagging listing): both ranks go on from the step rank
    0's checkpoint holds, and the run ends (reading alone, rank 1 started over: the ranks
    ran different numbers of steps and hung)."""
    from ..helpers.ranks_driver import FINETUNE_STOP_AT

    _, seen, output = launched
    for rank in (0, 1):
        ft = seen[rank]["finetune"]
        assert ft["stopped"] == FINETUNE_STOP_AT, output[-3000:]
        assert ft["resumed_at"] == FINETUNE_STOP_AT, (rank, ft)
        assert ft["status"] == rf.STATUS_DONE


def test_with_data_download_rank0_builds_each_dataset_before_the_others(launched):
    """``data.download``: rank 0 fetches (here: builds, 0.3 s) each dataset while rank 1
    waits, then rank 1 builds from its files; never both into one folder at once."""
    _, seen, _ = launched
    builds = [
        {(name, split): (start, end) for name, split, start, end in s["builds"]} for s in seen
    ]
    assert set(builds[0]) == set(builds[1]) == {("synthetic", "train"), ("synthetic", "test")}
    for key, (_, rank0_done) in builds[0].items():
        assert rank0_done <= builds[1][key][0], key


def test_the_stop_signals_group_beside_nccl_waits_as_long_as_the_run(launched):
    """The gloo group the ranks agree on a stop over (beside NCCL) gets the run's process
    group timeout, not gloo's 30 min default."""
    from ..helpers.ranks_driver import STOP_GROUP_TIMEOUT_S

    _, seen, _ = launched
    assert [s["stop_group_timeout_s"] for s in seen] == [STOP_GROUP_TIMEOUT_S] * 2


def test_between_sync_steps_every_rank_stops_at_the_same_step_soon_after(launched):
    """Between sync steps the loop agrees on a stop about once a second, without waiting
    for the answer (its round trip overlaps the next steps): rank 0 alone signalled, both
    ranks stop at one step, within about two seconds' steps, before the next sync step."""
    from vitscale.train.signals import STOP_CHECK_S

    from ..helpers.ranks_driver import SIGNAL_STEP, STEP_S, SYNC_EVERY

    _, seen, _ = launched
    stopped = [s["stopped_between_syncs"] for s in seen]
    assert stopped[0] == stopped[1], stopped
    assert stopped[0] is not None and stopped[0] < SYNC_EVERY, stopped
    assert SIGNAL_STEP < stopped[0] <= SIGNAL_STEP + 2 * STOP_CHECK_S / STEP_S + 1, stopped


def test_each_rank_draws_its_own_dropout_and_a_resume_is_exact(launched):
    """The ranks drop different units (seed + rank), and the run stopped at step 7 and
    resumed on two ranks ends bit for bit as the uninterrupted one: each rank's RNGs are
    restored from its own file."""
    out, seen, _ = launched
    masks = [s["mask"] for s in seen]
    assert len(masks[0]) == len(masks[1]) and 0 < sum(masks[0]) < len(masks[0])
    assert masks[0] != masks[1]
    assert_same_run(out / "whole", out / "stopped")


@pytest.mark.parametrize(
    ("fault", "recorded", "failed_step"),
    [
        ("raise-on-rank1", "rank 1: RuntimeError: injected on rank 1 at step 5", 5),
        (
            "checkpoint-write-on-rank0",
            "rank 0: OSError: [Errno 5] Input/output error (injected): ",
            5,  # the checkpoint after step 4
        ),
    ],
)
def test_the_first_failing_ranks_error_is_recorded_and_the_run_ends(
    tmp_path, fault, recorded, failed_step
):
    """One rank dies of its error; the other then loses it ("Connection closed by peer").
    result.json and ``vitscale status`` name the first rank and its error, and the launch
    ends promptly."""
    run = tmp_path / "grid" / "cell"
    config = tmp_path / "cell.json"
    config.write_text(json.dumps(ranks_config()))
    started = time.monotonic()
    code, output = launch(FAULT_DRIVER, str(config), str(run), fault, ok=False)
    assert time.monotonic() - started < PROMPTLY_S, output[-3000:]
    result = rf.read_json(run / rf.RESULT)
    assert result["status"] == rf.STATUS_FAILED
    assert result["error"].startswith(recorded), output[-3000:]
    assert result["failed_step"] == failed_step
    (row,) = read_status(tmp_path / "grid").values()
    assert row["status"] == rf.STATUS_FAILED and recorded in row["note"]


def _one_cell_grid(tmp_path: Path) -> tuple[list[str], Path]:
    """``vitscale grid`` of one fault-grid cell on the local executor, 2 processes under
    torchrun: the command's arguments and the cell's run folder."""
    from vitscale.config import cell_id, resolve

    config = cell_config(seed=0)
    grid = tmp_path / "ranks.yaml"
    spec = {"name": "ranks", "base": config, "blocks": [{"name": "one", "axes": {"seed": [0]}}]}
    grid.write_text(yaml.safe_dump(spec, sort_keys=False))
    runs = tmp_path / "runs"
    command = ["grid", str(grid), "--executor", "local", "--processes", "2", "--runs", str(runs)]
    return command, runs / "ranks" / cell_id(resolve(config))


def _held_grid(tmp_path: Path) -> tuple[list[str], Path, Foreground]:
    """:func:`_one_cell_grid` started, its cell held after 2 steps until a stop signal
    comes (tests/faults/hooks): the command, the cell's folder and the running grid."""
    command, cell = _one_cell_grid(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    hold = {"FAULT_MARKERS": str(markers), "FAULT_HOLD": cell.name, "FAULT_HOLD_AFTER": "2"}
    run = Foreground.start(tmp_path / "logs", *command, **hold)
    wait_for((markers / f"{cell.name}.held").exists, timeout=180, what="the cell to train")
    return command, cell, run


@pytest.mark.parametrize(
    ("signum", "group"), [(signal.SIGTERM, False), (signal.SIGINT, True)], ids=["kill", "ctrl-c"]
)
def test_a_grid_cell_under_torchrun_stopped_is_reported_checkpointed(tmp_path, signum, group):
    """``vitscale grid --processes 2`` (one cell under torchrun), SIGTERM to the grid (as
    `kill` sends) or SIGINT to its process group (Ctrl-C) while the cell trains: the
    cell's two ranks checkpoint and exit 75, which torchrun reports as 1; the grid reads
    rank 0's own answer and says the cell checkpointed and stopped, and ``vitscale
    status`` that it resumes from that checkpoint."""
    command, cell, run = _held_grid(tmp_path)
    run.interrupt(signum, group=group)
    code, output = run.finish(timeout=180)
    assert code == 128 + signum, output[-3000:]
    assert "1 cell(s) checkpointed and stopped" in output, output[-3000:]
    assert "failed" not in output, output[-3000:]
    assert run.left_behind() == [], output[-3000:]
    step = last_logged(cell)
    assert checkpoint_steps(cell)[-1] == step and not (cell / rf.RESULT).exists()
    (row,) = read_status(cell.parent).values()
    assert f"resumes from its checkpoint (step {step})" in row["note"]


def test_a_grid_cell_under_torchrun_stopped_at_once_leaves_no_process(tmp_path):
    """Rank 0 stuck writing a checkpoint (a hung filesystem: it ignores signals), so the
    grid kills torchrun after --stop-timeout: its workers, in sessions of their own that
    the grid's signal does not reach, die with it instead of training on as orphans."""
    command, cell = _one_cell_grid(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    stuck = {"FAULT_MARKERS": str(markers), "FAULT_STUCK": cell.name}
    run = Foreground.start(tmp_path / "logs", *command, "--stop-timeout", "1", **stuck)
    wait_for((markers / f"{cell.name}.stuck").exists, timeout=180, what="the checkpoint to hang")
    run.interrupt(signal.SIGTERM, group=False)
    code, output = run.finish(timeout=120)
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert f"1 stopped at once ({cell.name}" in output, output[-3000:]
    assert run.left_behind() == [], output[-3000:]


def test_a_grid_killed_under_torchrun_leaves_no_process_and_the_cell_resumes(tmp_path):
    """SIGKILL to ``vitscale grid --processes 2`` while its cell trains: the cell's worker,
    torchrun and both ranks die with it (checkpointing first), none is left behind, and the
    same command then resumes the cell from a complete checkpoint and finishes it."""
    command, cell, run = _held_grid(tmp_path)
    run.interrupt(signal.SIGKILL, group=False)
    code, output = run.finish(timeout=60)
    assert code == -signal.SIGKILL
    assert run.left_behind() == [], output[-3000:]
    kept = checkpoint_steps(cell)
    assert kept and all(
        checkpoint.verify(p) is None for p in checkpoint.complete(cell / rf.CHECKPOINTS)
    )
    assert not (cell / rf.RESULT).exists()

    again = Foreground.start(tmp_path / "logs", *command)
    code, output = again.finish(timeout=300)
    assert code == 0, output[-3000:]
    assert again.left_behind() == [], output[-3000:]
    assert rf.read_json(cell / rf.RESULT)["status"] == rf.STATUS_DONE
    assert f"(step {kept[-1]}, restart 1)" in (cell / rf.LOG).read_text()
