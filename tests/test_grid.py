"""Grid files: expansion into cells with stable ids, validation, dry-run, the local
executor, resubmission, retries, the cell lock and `vitscale status`."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vitscale import record as rf
from vitscale.cli import main
from vitscale.grid.actions import Planned, decide, prepare, retry_hint
from vitscale.grid.cellrun import cell_lock, run_cell
from vitscale.grid.spec import load_grid

from .helpers.configs import AWAY, tiny_config

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _write(tmp_path: Path, grid: dict, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def _tiny_grid(**extra) -> dict:
    base = tiny_config(
        train={"steps": 4, "eval_every": None, "checkpoint_every": None},
        eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
    )
    return {
        "name": "tiny",
        "base": base,
        "blocks": [{"name": "vit", "axes": {"seed": [0, 1]}}],
    } | extra


# --------------------------------------------------------------------------- expansion


def test_union_of_products_with_zip_and_collapsing_duplicates(tmp_path):
    grid = {
        "name": "mixed",
        "base": tiny_config(),
        "axes": {"data.subset": [256, 512]},
        "blocks": [
            {"name": "vit", "axes": {"model.name": ["ViT-Pico/4", "ViT-Pico/8"], "seed": [0, 1]}},
            {
                "name": "bit",
                "zip": {"model.name": ["BiT-R11x0.5", "BiT-R20x0.5"], "optim.lr": [1e-3, 3e-4]},
            },
            {
                "name": "again",
                "set": {"seed": 0},
                "axes": {"model.name": ["ViT-Pico/4"]},
            },  # already in vit
        ],
    }
    g = load_grid(_write(tmp_path, grid))
    assert len(g.cells) == 2 * (2 * 2 + 2)  # the "again" block collapses into "vit"
    assert len({c.id for c in g.cells}) == len(g.cells)
    bit = {(c.config.model.name, c.config.optim.lr) for c in g.cells if c.block == "bit"}
    assert bit == {("BiT-R11x0.5", 1e-3), ("BiT-R20x0.5", 3e-4)}
    assert {c.config.grid for c in g.cells} == {"mixed"}


def test_block_set_overrides_grid_axes_and_block_axes_override_set(tmp_path):
    """Precedence (vitscale.grid.spec): base <- grid axes <- block set <- block point."""
    grid = {
        "name": "order",
        "base": tiny_config(),
        "axes": {"optim.lr": [1e-3, 2e-3], "seed": [0, 1]},
        "blocks": [
            {"name": "sweep", "axes": {"model.name": ["ViT-Pico/4"]}},
            {"name": "fixed", "set": {"optim.lr": 5e-3, "model.name": "ViT-Pico/8"}},
            {"name": "point", "set": {"optim.lr": 5e-3}, "axes": {"optim.lr": [7e-3]}},
        ],
    }
    cells = load_grid(_write(tmp_path, grid)).cells
    lrs = {
        b: sorted({c.config.optim.lr for c in cells if c.block == b})
        for b in ("sweep", "fixed", "point")
    }
    assert lrs == {"sweep": [1e-3, 2e-3], "fixed": [5e-3], "point": [7e-3]}
    assert sum(c.block == "fixed" for c in cells) == 2  # the lr axis collapses; seeds remain


def _shuffle_keys(obj, rng):
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: _shuffle_keys(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [_shuffle_keys(v, rng) for v in obj]
    return obj


@settings(max_examples=15, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 50), min_size=1, max_size=4),
    lrs=st.lists(st.sampled_from([1e-4, 3e-4, 1e-3, 3e-3]), min_size=1, max_size=3),
    shuffle=st.integers(0, 2**16),
)
def test_ids_are_stable_under_key_order_and_unique_per_config(
    tmp_path_factory, seeds, lrs, shuffle
):
    tmp = tmp_path_factory.mktemp("grid")
    grid = {
        "name": "p",
        "base": tiny_config(),
        "blocks": [{"name": "b", "axes": {"seed": seeds, "optim.lr": lrs}}],
    }
    cells = load_grid(_write(tmp, grid)).cells
    assert len(cells) == len(set(seeds)) * len(set(lrs))  # duplicates collapse, nothing else does
    shuffled = load_grid(_write(tmp, _shuffle_keys(grid, random.Random(shuffle)), "s.yaml")).cells
    assert sorted(c.id for c in cells) == sorted(c.id for c in shuffled)


# --------------------------------------------------------------------------- validation


def _errors(path: Path, capsys, *argv) -> str:
    assert main(["grid", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_every_problem_is_named_with_file_block_and_key(tmp_path, capsys):
    grid = {
        "name": "bad",
        "base": tiny_config(),
        "retires": 2,
        "blocks": [
            {"name": "vit", "axes": {"model.name": ["ViT-Pico/5", "ViT-Q/4"], "train.stpes": [3]}},
            {"name": "bit", "axis": {"model.name": ["BiT-R50x1"]}},
        ],
    }
    path = _write(tmp_path, grid)
    err = _errors(path, capsys, "--dry-run")
    assert f"{path}: unknown key 'retires'; did you mean retries?" in err
    assert f"{path}: block 'vit': unknown key 'train.stpes'; did you mean train.steps?" in err
    assert "block 'vit': model.name: ViT-Pico/5: patch size 5 does not divide resolution 32" in err
    assert "unknown ViT size 'Q'" in err and "valid sizes:" in err
    assert f"{path}: block 'bit': unknown key 'axis'; did you mean axes?" in err
    assert err.count("train.stpes") == 1  # one message per problem, not one per cell


def test_data_and_resources_are_checked_before_anything_runs(tmp_path, capsys):
    profile = tmp_path / "small.yaml"
    profile.write_text("partition: gpu\ngpus_per_node: 4\nmax_nodes: 1\ntime_limit: '04:00:00'\n")
    grid = _tiny_grid(
        blocks=[
            {
                "name": "big-subset",
                "set": {"data.dataset": "synthetic-glyphs", "data.subset": 5000},
            },
            {"name": "missing", "set": {"data.dataset": f"imagefolder:{tmp_path}/nowhere"}},
            {
                "name": "transfer",
                "set": {"eval.finetune.datasets": ["cifar10"], "data.root": str(tmp_path)},
            },
        ],
        resources={"default": {"gpus": 8, "time": "24:00:00"}},
    )
    err = _errors(_write(tmp_path, grid), capsys, "--executor", "slurm", "--profile", str(profile))
    assert (
        "block 'big-subset': data.subset: 5000 asks for more examples than synthetic-glyphs holds "
        "(2,000); allowed: a count up to 2,000 or a fraction in (0, 1]" in err
    )
    assert (
        f"block 'missing': data.dataset: imagefolder:{tmp_path}/nowhere: nothing under {tmp_path}/nowhere"
        in err
    )
    assert (
        "block 'transfer': eval.finetune.datasets: cifar10: missing cifar-10-batches-py/batches.meta"
        in err
    )
    assert "resources.default: gpus=8 on 1 node(s) but profile 'small' has 4 GPUs per node" in err
    assert "time=24:00:00 exceeds profile 'small' limit 04:00:00" in err
    assert not (tmp_path / "runs").exists()


def test_paper_grids_expand_and_cost_what_table6_says(capsys):
    assert main(["grid", str(EXPERIMENTS / "fig5_compute.yaml"), "--dry-run", "--json", *AWAY]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["cells"]) == 18  # every row of Table 6
    from vitscale.paper import table6

    paper_total = sum(float(r["pretrain_exaflops"]) for r in table6())
    assert out["total"]["exaflops"] == pytest.approx(paper_total, rel=0.01)
    for name, cells in (("fig3_pretrain_datasets", 14), ("fig4_data_requirements", 24)):
        assert main(["grid", str(EXPERIMENTS / f"{name}.yaml"), "--dry-run", "--json", *AWAY]) == 0
        assert len(json.loads(capsys.readouterr().out)["cells"]) == cells


# --------------------------------------------------------------------------- running


@pytest.fixture(scope="module")
def finished_grid(tmp_path_factory):
    """The tiny grid run once by the local executor with two workers, on a machine that
    lists two GPUs (7 and 9; without a CUDA driver the cells still train on the CPU)."""
    tmp = tmp_path_factory.mktemp("local")
    path = _write(tmp, _tiny_grid())
    runs = tmp / "runs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_VISIBLE_DEVICES", "7,9")
        args = ["grid", str(path), "--executor", "local", "--workers", "2", "--runs", str(runs)]
        assert main(args) == 0
    return path, runs


def test_local_workers_run_on_their_own_gpus(finished_grid):
    """Two cells at once never share a GPU: each worker sees only its own."""
    path, runs = finished_grid
    seen = set()
    for cell in load_grid(path).cells:
        log = (runs / "tiny" / cell.id / "log.txt").read_text()
        seen |= {gpu for gpu in ("7", "9") if f"CUDA_VISIBLE_DEVICES={gpu})" in log}
    assert seen == {"7", "9"}


def test_a_local_run_says_what_it_will_do_and_counts_steps(finished_grid, tmp_path, capsys):
    """Its first line: the cells to run, their steps, those done, and the time this
    machine's finished cells of the same model say it takes; the bar counts steps, and
    cells beside them."""
    path, runs = finished_grid
    shutil.copytree(runs, tmp_path / "runs")
    _, second = load_grid(path).cells
    shutil.rmtree(tmp_path / "runs" / "tiny" / second.id)
    assert main(["grid", str(path), "--executor", "local", "--runs", str(tmp_path / "runs")]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == (
        "1 cell to run (4 steps, 1 at a time), 1 done; ~1 min on this machine "
        "(its finished cells' step times)"
    )
    assert "1/1 cells" in err and "4/4 [" in err and ("step/s" in err or "s/step" in err)


def test_local_executor_runs_every_cell_once(finished_grid, capsys):
    path, runs = finished_grid
    cells = load_grid(path).cells
    for cell in cells:
        result = rf.read_json(runs / "tiny" / cell.id / rf.RESULT)
        assert result["status"] == rf.STATUS_DONE and result["restarts"] == 0
        assert (runs / "tiny" / cell.id / "log.txt").is_file()
    # Resubmitting runs nothing: every cell is done.
    assert main(["grid", str(path), "--executor", "local", "--runs", str(runs)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "0 cells to run, 2 done"
    assert main(["grid", str(path), "--dry-run", "--json", "--runs", str(runs)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {c["action"] for c in out["cells"]} == {"skip-done"} and out["total"]["to_run"] == 0


def test_status_reports_every_cell(finished_grid, capsys):
    _, runs = finished_grid
    assert main(["status", str(runs), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["cells"]
    assert len(rows) == 2 and {r["status"] for r in rows} == {"done"}
    assert {r["last_step"] for r in rows} == {4} and {r["total_steps"] for r in rows} == {4}
    assert main(["status", str(runs)]) == 0
    assert "2 cells: 2 done, 0 running, 0 pending, 0 failed" in capsys.readouterr().out


def test_failed_cells_are_retried_up_to_the_configured_count(tmp_path):
    g = load_grid(_write(tmp_path, _tiny_grid(retries=1)))
    runs = tmp_path / "runs"
    first = decide(g, runs)[0]
    prepare(first)
    failed = {"status": rf.STATUS_FAILED, "error": "non-finite loss at step 3", "failed_step": 3}
    rf.write_json_atomic(first.run_dir / rf.RESULT, failed)
    again = decide(g, runs)[0]
    assert (again.action, again.note) == ("submit", "retry 1/1")
    prepare(again)  # the failure is kept beside, under its attempt number
    assert rf.read_json(first.run_dir / "result.failed-1.json")["failed_step"] == 3
    rf.write_json_atomic(first.run_dir / rf.RESULT, failed)
    stuck = decide(g, runs)  # not submitted again blindly: the grid says why
    assert (stuck[0].action, stuck[0].note) == (
        "skip-failed",
        "failed 2 times, last: non-finite loss at step 3",
    )
    hint = retry_hint(stuck, grid_path=g.path, runs=runs / "tiny")
    assert "1 cell(s) failed and are not retried" in hint and "--retry-failed" in hint
    again = decide(g, runs, retry_failed=True)[0]
    assert (again.action, again.note) == ("submit", "retry 2 (--retry-failed)")


def test_a_cell_that_fails_the_same_way_twice_is_not_retried_blindly(tmp_path):
    """A cell whose resume failed the same way each time (an IndexError
    restoring the RNG on fewer GPUs) was submitted again and again. With retries left, a
    failure that repeats the one before it (error and step) is not retried: a retry would
    repeat it too; the grid says so, and --retry-failed runs it once the cause is fixed."""
    g = load_grid(_write(tmp_path, _tiny_grid(retries=4)))
    runs = tmp_path / "runs"
    run_dir = decide(g, runs)[0].run_dir

    def fail(error: str, step: int) -> Planned:
        prepare(decide(g, runs)[0])
        failed = {"status": rf.STATUS_FAILED, "error": error, "failed_step": step}
        rf.write_json_atomic(run_dir / rf.RESULT, failed)
        return decide(g, runs)[0]

    assert fail("IndexError: list index out of range", 400).note == "retry 1/4"
    assert fail("NCCL timeout", 700).note == "retry 2/4"  # not the same: retried
    assert fail("NCCL timeout", 900).note == "retry 3/4"  # another step: retried
    stuck = fail("NCCL timeout", 900)
    assert (stuck.action, stuck.note) == (
        "skip-failed",
        "failed the same way twice in a row (a retry would too): NCCL timeout",
    )
    assert "1 cell(s) failed and are not retried" in retry_hint(
        [stuck], grid_path=g.path, runs=runs / "tiny"
    )
    assert decide(g, runs, retry_failed=True)[0].note == "retry 4 (--retry-failed)"


def test_a_rerun_brings_operational_keys_to_the_cell(tmp_path):
    """A key left out of the cell id (data.skip_bad_samples) changed in the grid reaches a
    cell whose config.json exists, which then resumes with it; the rest is untouched."""
    path = _write(tmp_path, _tiny_grid())
    runs = tmp_path / "runs"
    first = decide(load_grid(path), runs)[0]
    assert prepare(first) == []
    recorded = rf.read_json(first.run_dir / rf.CONFIG)
    recorded["train"]["total_steps"] = 4  # what the trainer adds
    rf.write_json_atomic(first.run_dir / rf.CONFIG, recorded)
    again = decide(load_grid(path, overrides=["data.skip_bad_samples=2"]), runs)[0]
    assert again.cell.id == first.cell.id
    assert prepare(again) == ["data.skip_bad_samples: 0 -> 2"]
    config = rf.read_json(first.run_dir / rf.CONFIG)
    assert config["data"]["skip_bad_samples"] == 2 and config["train"]["total_steps"] == 4
    assert prepare(again) == []


def test_a_held_cell_is_neither_planned_nor_run_twice(tmp_path, capsys):
    g = load_grid(_write(tmp_path, _tiny_grid()))
    runs = tmp_path / "runs"
    item = decide(g, runs)[0]
    prepare(item)
    with cell_lock(item.run_dir) as acquired:
        assert acquired
        assert decide(g, runs)[0].action == "skip-running"
        assert run_cell(item.run_dir) == 0  # another process holds it: leaves it alone
        assert "another process is running this cell" in capsys.readouterr().out
        assert not (item.run_dir / rf.RESULT).exists()


def _held_by_a_dead_node(run_dir: Path) -> int:
    """The cell's lock as a dead node's lease leaves it on Lustre or NFS: held, in the name
    of a process no one here can see. Returns the descriptor that holds it."""
    import fcntl
    import os

    fd = os.open(run_dir / rf.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"node-b 4242\n")
    return fd


def test_a_lock_a_dead_node_left_behind_is_waited_out_and_the_cell_runs(
    tmp_path, monkeypatch, capsys
):
    """A requeued job used to find the stale lock, exit 0 (SLURM: COMPLETED) and leave
    the cell unrun until someone resubmitted it."""
    import os
    import threading

    from vitscale.grid import cellrun

    item = decide(load_grid(_write(tmp_path, _tiny_grid())), tmp_path / "runs")[0]
    prepare(item)
    fd = _held_by_a_dead_node(item.run_dir)
    lease = threading.Timer(1.5, os.close, (fd,))  # the lease runs out
    lease.start()
    monkeypatch.setattr(cellrun, "LOCK_WAIT_S", 60.0)
    assert run_cell(item.run_dir) == 0
    lease.join()
    assert "held by node-b 4242, not a live process of this node" in capsys.readouterr().out
    assert rf.read_json(item.run_dir / rf.RESULT)["status"] == rf.STATUS_DONE


def test_a_lock_that_stays_held_by_no_live_process_here_fails_loudly(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    item = decide(load_grid(_write(tmp_path, _tiny_grid())), tmp_path / "runs")[0]
    prepare(item)
    fd = _held_by_a_dead_node(item.run_dir)
    try:
        env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[1])}
        code = (
            "import sys; from vitscale.grid import cellrun; cellrun.LOCK_WAIT_S = 1.0; "
            f"sys.exit(cellrun.main([{str(item.run_dir)!r}]))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
    finally:
        os.close(fd)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "is still held by node-b 4242 after 1 s" in out.stderr
    assert "delete the lock file and run the grid again" in out.stderr
    assert not (item.run_dir / rf.RESULT).exists()  # a live holder elsewhere may be running it


def test_a_filesystem_without_locks_runs_cells_unlocked_and_says_so(tmp_path, monkeypatch, capsys):
    """flock failing as on Lustre mounted without ``-o flock`` (ENOSYS): the cell is not
    refused (rank 0 failing there would leave the other ranks waiting for it); the grid
    warns once per runs folder that cells run unlocked."""
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    g = load_grid(_write(tmp_path, _tiny_grid()))
    runs = tmp_path / "runs"
    items = decide(g, runs)
    monkeypatch.setattr(fcntl, "flock", no_locks)
    for item in items:
        prepare(item)
        with cell_lock(item.run_dir) as acquired:
            assert acquired
            assert decide(g, runs)[0].action == "submit"  # not taken for a running cell
    err = capsys.readouterr().err
    assert err.count("the filesystem has no file locks (flock: Function not implemented") == 1
    assert "mount with -o flock" in err


def test_a_worker_survives_a_broken_cell(tmp_path):
    """The local executor's persistent worker: a cell that raises is reported failed, with
    its traceback in its own log, and the next cell still runs in the same process."""
    import subprocess
    import sys

    g = load_grid(_write(tmp_path, _tiny_grid()))
    broken, good = (item.run_dir for item in decide(g, tmp_path / "runs"))
    for item in decide(g, tmp_path / "runs"):
        prepare(item)
    (broken / rf.CONFIG).write_text("{ not json")
    served = subprocess.run(
        [sys.executable, "-m", "vitscale.grid.cellrun", "--serve"],
        input=f"{broken}\n{good}\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    answers = [line.split("\t") for line in served.stdout.splitlines()]
    assert served.returncode == 0 and [code for code, _ in answers] == ["1", "0"], served.stderr
    assert answers[0][1].startswith("JSONDecodeError: ") and answers[1][1] == ""  # the reasons
    assert "JSONDecodeError" in (broken / rf.LOG).read_text()
    assert rf.read_json(good / rf.RESULT)["status"] == rf.STATUS_DONE


def test_a_worker_that_has_answered_ignores_stop_signals():
    """A stop signal that reaches a worker after its last answer (the kernel telling it
    that the grid, which read the answer, has ended) lands during the interpreter's exit:
    it must neither raise in a finaliser (a traceback on the grid's terminal) nor change
    the exit code."""
    import subprocess
    import sys

    script = (
        "import os, signal, sys\n"
        "from vitscale.grid import cellrun\n"
        "code = cellrun.serve()\n"
        "for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):\n"
        "    os.kill(os.getpid(), sig)\n"
        "print('exiting', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    served = subprocess.run(
        [sys.executable, "-c", script], input="", capture_output=True, text=True, timeout=120
    )
    assert served.returncode == 0, served.stderr
    assert served.stderr.strip() == "exiting"


def test_the_preemption_window_holds_the_largest_cells_checkpoint(tmp_path, capsys, monkeypatch):
    """H100x8 signalled 300 s before the limit "to save a ViT-H
    checkpoint", which at the write speed the trainer assumes (16 bytes a parameter at
    20 MB/s) takes 506 s; CellJob requeued after 285 s, killing the write, so every slice
    of a ViT-H cell fell back to its last periodic checkpoint. The window is checked
    against the grid's largest cell: the dry run warns, a submission refuses."""
    from vitscale.grid import slurm

    fig5 = str(EXPERIMENTS / "fig5_compute.yaml")
    assert main(["grid", fig5, "--dry-run", "--profile", "h100x8"]) == 0
    assert "signal_delay_s" not in capsys.readouterr().err  # the shipped profile has room
    short = tmp_path / "short.yaml"
    short.write_text(
        "gpus_per_node: 8\ncpus_per_node: 112\nmem_gb_per_node: 1800\nmax_nodes: 8\n"
        "time_limit: '48:00:00'\nsignal_delay_s: 300\n"
    )
    assert main(["grid", fig5, "--dry-run", "--profile", str(short)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "signal_delay" in line]
    assert len(warnings) == 1, "the dry run says nothing of the short window"
    warning = warnings[0]
    assert warning.startswith("warning: profile 'short': signal_delay_s=300 is less than the 521 s")
    assert "(ViT-H/14) needs to checkpoint and requeue (10.1 GB at 20 MB/s, then 15 s)" in warning
    assert warning.endswith("set signal_delay_s: 540 or more")
    monkeypatch.setattr(slurm, "submit", lambda *a, **k: pytest.fail("submitted"))
    tiny = short.with_name("tiny.yaml")
    tiny.write_text("gpus_per_node: 0\ntime_limit: '04:00:00'\nsignal_delay_s: 10\n")
    runs = ["--runs", str(tmp_path / "runs")]
    err = _errors(
        _write(tmp_path, _tiny_grid()), capsys, "--executor", "slurm", "--profile", str(tiny), *runs
    )
    assert "profile 'tiny': signal_delay_s=10 is less than the 15 s cell" in err


def test_the_dry_run_shows_what_each_cell_asks_slurm_for(tmp_path, capsys):
    """With a profile: nodes x GPUs per node and time per cell. A cell the grid gives no
    gpus or time asks for the fewest GPUs and the time its estimate allows (~, with a line
    saying how); where the estimate is only assumed, the whole node for the limit (*)."""
    whole = _write(tmp_path, _tiny_grid())
    assert main(["grid", str(whole), "--dry-run", "--profile", "h100x8"]) == 0
    out = capsys.readouterr().out
    assert "family  " in out  # a speed measured on the ViT family sizes it
    # 1.5 x its (tiny) estimate + 15 min to start + h100x8's 600 s signal delay: 26 min
    assert out.count("1x1 GPU 0:26h~") == 2 and "\nrequest: nodes x GPUs per node" in out
    assert "\n  ~: the grid gives no gpus or no time: the fewest GPUs" in out
    fp32 = ["--set", "train.precision=fp32"]  # no speed measured in fp32 on any GPU
    assert main(["grid", str(whole), "--dry-run", "--profile", "h100x8", *fp32]) == 0
    out = capsys.readouterr().out
    assert out.count("1x8 GPU 48:00h*") == 2 and "\n  *: the grid gives no gpus" in out
    sized = _write(tmp_path, _tiny_grid(resources={"ViT": {"gpus": 2, "time": "02:30:00"}}))
    assert main(["grid", str(sized), "--dry-run", "--profile", "h100x8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["cells"]
    assert [r["request"] for r in rows] == [
        {"nodes": 1, "gpus_per_node": 2, "time_min": 150, "from": "grid"}
    ] * 2


def test_a_cell_without_resources_asks_for_the_fewest_gpus_its_estimate_allows(tmp_path, capsys):
    """ViT-B/16 at 224 px in bf16 has a speed measured on h100x8's GPU: each cell asks for
    the fewest GPUs of the node that finish it within the 4 h the grid gives, at 1.5x its
    estimate plus 15 min and the profile's 600 s signal delay."""
    grid = {
        "name": "sized",
        "base": tiny_config(
            data={"image_size": 224, "subset": None},
            model={"name": "ViT-B/16"},
            train={"batch_size": 512, "precision": "bf16"},
            eval={"fewshot": {"datasets": []}, "upstream": {"examples": 0}},
        ),
        "axes": {"train.steps": [200, 20_000, 200_000]},
        "resources": {"ViT-B/16": {"time": "04:00:00"}},
    }
    assert (
        main(["grid", str(_write(tmp_path, grid)), "--dry-run", "--profile", "h100x8", "--json"])
        == 0
    )
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert {c["gpu_hours_basis"] for c in cells} == {"measured"}

    def minutes(c, gpus):
        return math.ceil(c["gpu_hours"] * 1.5 * 60 / gpus + 15 + 600 / 60)

    for c in cells:
        r = c["request"]
        assert r["from"] == "sized" and r["time_min"] == 240  # the grid's time stands
        assert minutes(c, r["gpus_per_node"]) <= 240
        assert all(minutes(c, g) > 240 for g in (1, 2, 4, 8) if g < r["gpus_per_node"])
    assert [c["request"]["gpus_per_node"] for c in cells] == [1, 1, 8]
