"""Past one machine: a real two-node SLURM cluster (`slurm/local-cluster.sh up --nodes 2`).

Nodes n1 and n2 are slurmd in network namespaces of this machine, on a bridge, under their
own slurmctld (SLURM_CONF=/etc/slurm/two/slurm.conf); the single-node cluster beside them
is left alone. The last test brings the two-node cluster down again and checks that
nothing of it is left: no namespace, link or process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml

from vitscale import record as rf
from vitscale.grid.actions import JOB_FILE
from vitscale.grid.local import cell_command

from .helpers.cluster import (
    SCRIPT,
    TWO_CONF,
    TWO_PARTITION,
    TWO_SUBNET,
    ensure_cluster,
    ensure_two_node_cluster,
    is_done,
    logged_steps,
    run,
    two,
    vitscale_ok,
)
from .helpers.configs import in_seconds

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "slurm" / "profiles" / "local2.yaml"
STEPS = 30
# One cell over both nodes, one process per node. fp32 and no dropout: its losses must be
# bit-identical to the same cell's as two processes on one node.
GRID = f"""\
name: two-nodes
base:
  model: {{name: ViT-Pico/4, dropout: 0.0}}
  data: {{dataset: synthetic, image_size: 32, subset: 512, num_workers: 1}}
  train: {{steps: {STEPS}, batch_size: 16, log_every: 1, checkpoint_every: 5, precision: fp32}}
  optim: {{warmup_steps: 3}}
  eval:
    fewshot: {{datasets: []}}
    upstream: {{examples: 0}}
  wandb: {{mode: disabled}}
resources:
  default: {{nodes: 2, time: "00:10:00"}}
"""

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def two_nodes() -> None:
    ensure_cluster()
    ensure_two_node_cluster()


def _host_addresses() -> set[str]:
    out = run("ip", "-4", "-o", "addr", "show").stdout
    return set(re.findall(r"inet (\S+)/", out))


def test_each_node_runs_one_task_under_its_own_name_and_address(two_nodes: None) -> None:
    # One task per node: each sees its node's hostname and, besides loopback, only its
    # node's address.
    step = two(
        "srun",
        f"--partition={TWO_PARTITION}",
        "--nodes=2",
        "--ntasks=2",
        "--time=1",
        "sh",
        "-c",
        "echo \"$SLURM_PROCID $SLURM_NODEID $(hostname)\" $(ip -4 -o addr show | awk '{print $4}')",
    )
    assert step.returncode == 0, step.stderr
    rows = sorted(line.split() for line in step.stdout.splitlines())
    assert rows == [
        ["0", "0", "n1", "127.0.0.1/8", f"{TWO_SUBNET}.11/24"],
        ["1", "1", "n2", "127.0.0.1/8", f"{TWO_SUBNET}.12/24"],
    ], step.stdout
    # The nodes' addresses live in their namespaces only; the host has the bridge's.
    host = _host_addresses()
    assert f"{TWO_SUBNET}.1" in host
    assert not {f"{TWO_SUBNET}.11", f"{TWO_SUBNET}.12"} & host
    # The single-node cluster is untouched: its own partition, its own node.
    single = run("sinfo", "--noheader", "--format=%P %D")
    assert single.returncode == 0 and single.stdout.split() == ["debug*", "1"], single.stdout


# ------------------------------------------------------------------------ a cell on both


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(row[rf.STEP], row[rf.TRAIN_LOSS]) for row in rf.iter_metrics(run_dir / rf.METRICS)]


def _wait(what: str, predicate, *, timeout_s: float, debug) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{debug()}", pytrace=False)


def _runs_of(job_id: str) -> list[str]:
    """The final state of every run of a job in accounting, requeued ones first."""
    out = two(
        "sacct", "--jobs", job_id, "--duplicates", "--allocations", "--noheader",
        "--parsable2", "--format=JobID,State",
    ).stdout  # fmt: skip
    return [
        line.split("|")[1].split()[0] for line in out.splitlines() if line.startswith(f"{job_id}|")
    ]


def _ended(job_id: str, debug) -> None:
    """Wait until the job of a finished cell leaves the queue (its processes exit) and
    accounting has recorded its end (slurmdbd lags the controller by seconds)."""
    _wait(
        "the job to leave the queue and accounting to record its end",
        lambda: (
            not two("squeue", "--noheader", "--jobs", job_id).stdout.strip()
            and not {"RUNNING", "PENDING", "REQUEUED"} & set(_runs_of(job_id)[-1:])
        ),
        timeout_s=60,
        debug=debug,
    )


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    state = run_dir / rf.CHECKPOINTS / f"step_{STEPS:09d}" / "state.pt"
    return torch.load(state, map_location="cpu", weights_only=True)["model"]


def _logs(cell: Path) -> str:
    return "\n".join(
        f"--- {log.name}\n{log.read_text()[-2000:]}" for log in sorted(cell.glob("log*.txt"))
    )


@pytest.mark.slow
def test_a_cell_over_both_nodes_survives_a_preemption_and_matches_one_node(
    two_nodes: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``nodes: 2``: one task per node, ranks and rendezvous from SLURM; SIGUSR1 to the
    job's steps mid-training (what ``--signal`` sends): both nodes checkpoint at the same
    step, the job requeues and resumes; the cell ends as the same cell run as two
    processes on one node, bit for bit (two ranks: each all-reduce sums the same two
    numbers, and a + b == b + a exactly)."""
    monkeypatch.setenv("SLURM_CONF", TWO_CONF)
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(GRID)
    runs = tmp_path / "runs"
    out = vitscale_ok(
        capsys, "grid", str(grid_file), "--executor", "slurm", "--profile", str(PROFILE),
        "--runs", str(runs),
    )  # fmt: skip
    assert "2 node(s) x 1 task(s)" in out, out
    (cell,) = [p.parent for p in (runs / "two-nodes").glob(f"*/{JOB_FILE}")]
    job_id = json.loads((cell / JOB_FILE).read_text())["job_id"]

    def debug() -> str:
        return two("squeue").stdout + _logs(cell)

    # The reference meanwhile: two processes on this machine (torchrun), one thread each.
    reference = tmp_path / "reference" / cell.name
    reference.mkdir(parents=True)
    shutil.copy(cell / rf.CONFIG, reference / rf.CONFIG)
    ref = subprocess.Popen(
        cell_command(reference, processes=2),
        env=os.environ | {"OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(
            "training on both nodes",
            lambda: len(logged_steps(cell)) >= 8,
            timeout_s=180,
            debug=debug,
        )
        signalled = two("scancel", "--signal=USR1", job_id)
        assert signalled.returncode == 0, signalled.stderr
        _wait(
            "the cell to finish",
            lambda: is_done(cell),
            timeout_s=240,
            debug=debug,
        )
        _ended(job_id, debug)
        _, err = ref.communicate(timeout=240)
        assert ref.returncode == 0, err[-3000:]
    finally:
        two("scancel", job_id)
        ref.kill()

    # One task per node, each on its own node; both stopped at the same step, and resumed.
    log, rank1 = (cell / "log.txt").read_text(), (cell / "log.rank1.txt").read_text()
    assert re.search(r"task 0 of 2 on n1\b", log) and re.search(r"task 1 of 2 on n2\b", rank1)
    (stopped,) = re.findall(r"preempted by SIGUSR1: checkpointed at step (\d+)", log)
    assert 0 < int(stopped) < STEPS, log
    assert re.findall(r"resumed from \S+ \(step (\d+), restart 1\)", log) == [stopped], log
    assert "DataLoader worker" not in log + rank1
    # Rank 0's trainer stopped at that checkpoint (exit 75: checkpointed after a signal), as
    # its task's submitit log says, and requeued the job; rank 1's exits 75 too, or, still
    # tearing down after the checkpoint was published, is ended by that requeue's SIGTERM
    # (a race the load decides; harmless: the checkpoint is whole). None failed.
    tasks = runs / "two-nodes" / ".slurm" / job_id
    said = [(tasks / f"{job_id}_{task}_log.out").read_text() for task in (0, 1)]
    assert "(exit 75)" in said[0], said[0]
    assert "(exit 75)" in said[1] or "stopped by a signal (exit -15)" in said[1], said[1]
    assert not any("CellFailed" in text for text in said), said
    assert _runs_of(job_id) == ["REQUEUED", "COMPLETED"]
    ours, theirs = rf.read_json(cell / rf.RESULT), rf.read_json(reference / rf.RESULT)
    assert ours["num_processes"] == theirs["num_processes"] == 2
    assert ours["restarts"] == 1 and theirs["restarts"] == 0
    # The same examples and losses at every step; the same weights at the end.
    assert logged_steps(cell) == list(range(1, STEPS + 1))
    assert _losses(cell) == _losses(reference)
    for key in ("steps", "examples_seen", "pretrain_exaflops"):
        assert ours[key] == theirs[key], key
    weights, expected = _weights(cell), _weights(reference)
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    _REFERENCE_LOSSES[cell.name] = _losses(reference)


_REFERENCE_LOSSES: dict[str, list[tuple[int, float]]] = {}  # the cell's, once run above
# The two-node cluster marks a silent node DOWN after SlurmdTimeout (10 s, two.conf.in),
# then ends the job's steps (SIGTERM, SIGKILL after KillWait, 30 s): the most a job may
# take to end after it lost a node.
LOST_NODE_TIMEOUT_S = 10 + 20 + 30


def _job_processes(node: str) -> list[str]:
    """The processes in a node's namespace other than its slurmd: ``pid:name`` each."""
    pids = run("ip", "netns", "pids", f"vitscale-{node}").stdout.split()
    names = {pid: Path(f"/proc/{pid}/comm") for pid in pids}
    found = []
    for pid, comm in names.items():
        try:
            name = comm.read_text().strip()
        except OSError:
            continue  # ended meanwhile
        if name != "slurmd":
            found.append(f"{pid}:{name}")
    return found


@pytest.mark.slow
def test_a_lost_node_ends_the_job_and_the_cell_resumes_when_it_returns(
    two_nodes: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every process of node n2 (its slurmd, the job's task, its trainer, its loader worker)
    is SIGKILLed mid-training: the job ends within the cluster's timeouts, nothing of it is
    left on n1, SLURM requeues it, `vitscale status` says which node failed and where the
    cell resumes; once n2 is back the cell resumes from its last complete checkpoint and
    ends as an uninterrupted run."""
    monkeypatch.setenv("SLURM_CONF", TWO_CONF)
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(GRID)
    runs = tmp_path / "runs"
    vitscale_ok(
        capsys, "grid", str(grid_file), "--executor", "slurm", "--profile", str(PROFILE),
        "--runs", str(runs),
    )  # fmt: skip
    (cell,) = [p.parent for p in (runs / "two-nodes").glob(f"*/{JOB_FILE}")]
    job_id = json.loads((cell / JOB_FILE).read_text())["job_id"]

    def debug() -> str:
        return two("squeue").stdout + two("sinfo", "--Node").stdout + _logs(cell)

    def state() -> str:
        return two("squeue", "--noheader", "--jobs", job_id, "--format=%T").stdout.strip()

    try:
        _wait(
            "a checkpoint, and training past it",
            lambda: (
                (done := rf.complete_checkpoints(cell / rf.CHECKPOINTS))
                and len(logged_steps(cell)) > rf.checkpoint_step(done[-1])
            ),
            timeout_s=180,
            debug=debug,
        )
        pids = run("ip", "netns", "pids", "vitscale-n2").stdout.split()
        assert len(pids) >= 4, pids  # slurmd, slurmstepd, the task, the trainer (+ worker)
        lost_at = time.monotonic()
        run("kill", "-KILL", *pids)

        # The job ends, nothing of it is left on n1, and SLURM requeues it (n2 is DOWN).
        _wait(
            "the job to end on n1",
            lambda: state() == "PENDING" and not _job_processes("n1"),
            timeout_s=LOST_NODE_TIMEOUT_S + 15,
            debug=debug,
        )
        ended_s = time.monotonic() - lost_at
        assert ended_s < LOST_NODE_TIMEOUT_S, ended_s
        checkpoints = rf.complete_checkpoints(cell / rf.CHECKPOINTS)
        resume_step = rf.checkpoint_step(checkpoints[-1])
        assert 0 < resume_step < STEPS

        # status says what happened, asking the cluster the job went to (job.json).
        monkeypatch.delenv("SLURM_CONF")
        (row,) = json.loads(vitscale_ok(capsys, "status", str(runs), "--json"))["cells"]
        assert row["status"] == "pending", row
        assert re.search(
            r"^node n2 failed at \S+ \S+: SLURM ended the job \(NODE_FAIL\)", row["note"]
        )
        assert "SLURM PENDING" in row["note"], row["note"]
        assert f"resumes from its checkpoint (step {resume_step})" in row["note"], row["note"]
        note = row["note"]
        monkeypatch.setenv("SLURM_CONF", TWO_CONF)

        # n2 comes back (`up` starts its slurmd again): the job runs again and resumes.
        ensure_two_node_cluster()
        _wait(
            "the cell to finish",
            lambda: is_done(cell),
            timeout_s=240,
            debug=debug,
        )
        _ended(job_id, debug)
    finally:
        two("scancel", job_id)

    assert _runs_of(job_id) == ["NODE_FAIL", "COMPLETED"]
    log = (cell / "log.txt").read_text()
    assert re.findall(r"resumed from \S+ \(step (\d+), restart 1\)", log) == [str(resume_step)]
    result = rf.read_json(cell / rf.RESULT)
    assert result["restarts"] == 1 and result["num_processes"] == 2
    assert logged_steps(cell) == list(range(1, STEPS + 1))
    if cell.name in _REFERENCE_LOSSES:  # run above (the same cell, uninterrupted)
        assert _losses(cell) == _REFERENCE_LOSSES[cell.name]
    print(f"lost node: the job ended {ended_s:.1f} s after n2 died; status said: {note}")


def _small_demo(folder: Path) -> Path:
    """experiments/demo.yaml cut to its ViT cell at the smallest subset, seed 0, a few
    steps: what `make demo-slurm NODES=2` does with the demo, in seconds."""
    grid = in_seconds(yaml.safe_load((ROOT / "experiments" / "demo.yaml").read_text()))
    grid["axes"] = {"data.subset": grid["axes"]["data.subset"][:1], "seed": [0]}
    grid["blocks"] = [b for b in grid["blocks"] if b["name"] == "vit"]
    path = folder / "demo.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


@pytest.mark.slow
def test_make_demo_slurm_nodes2_runs_each_cell_over_both_nodes_then_brings_them_down(
    two_nodes: None, tmp_path: Path
) -> None:
    """`make demo-slurm NODES=2` (the demo's grid, cut short by DEMO_GRID): every cell one
    task per node, 2 processes in its result; the two-node cluster is down afterwards and
    the demo's report printed."""
    runs = tmp_path / "runs"
    made = subprocess.run(
        ["make", "--no-print-directory", "demo-slurm", "NODES=2",
         f"DEMO_GRID={_small_demo(tmp_path)}", f"RUNS={runs}", f"FIGURES={tmp_path / 'fig'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = made.stdout + made.stderr
    assert made.returncode == 0, output[-3000:]
    assert "every cell over 2 nodes" in output and "== the paper's question" in output
    (cell,) = [p.parent for p in (runs / "demo").glob(f"*/{rf.RESULT}")]
    result = rf.read_json(cell / rf.RESULT)
    assert result["status"] == rf.STATUS_DONE and result["num_processes"] == 2
    assert re.search(r"task 0 of 2 on n1\b", (cell / "log.txt").read_text())
    assert re.search(r"task 1 of 2 on n2\b", (cell / "log.rank1.txt").read_text())
    assert not [n for n in run("ip", "netns", "list").stdout.split() if n.startswith("vitscale")]


# ------------------------------------------------------------------------ last: down


def test_down_leaves_no_namespace_link_or_process(two_nodes: None) -> None:
    down = run(str(SCRIPT), "down", "--nodes", "2")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [ns for ns in run("ip", "netns", "list").stdout.split() if ns.startswith("vitscale")]
    links = run("ip", "-o", "link", "show").stdout
    assert "vitscale" not in links, links
    assert not {a for a in _host_addresses() if a.startswith(f"{TWO_SUBNET}.")}
    for pid_file in Path("/run/vitscale-slurm/two").glob("*.pid"):
        pytest.fail(f"{pid_file} left behind")
    assert two("scontrol", "ping", timeout=30).stdout.count("UP") == 0
    # The single-node cluster still runs, and `status` shows nothing of the two-node one.
    status = run(str(SCRIPT), "status")
    assert status.returncode == 0, status.stdout
    assert "vitscale2" not in status.stdout and all(n not in status.stdout for n in ("n1 ", "n2 "))
