"""Grids on SLURM: submission as a job array, requeue mid-training, resume, resubmission.

The end-to-end test submits a 3-cell grid to the local cluster (`slurm/local-cluster.sh`)
with `slurm/profiles/local.yaml`, cells loading data with two worker processes each, then
interrupts every cell the ways a cluster does: SIGUSR1 to the job's processes (what
``--signal=USR1@N`` sends before a time limit; submitit's checkpoint/requeue protocol) in
the middle of pre-training and again in the middle of fine-tuning, and ``scontrol
requeue`` (what a preemption does: SIGTERM, then SLURM requeues). SLURM signals the loader
workers too. Every cell must resume from its checkpoint and finish exactly as an
uninterrupted run of the same cell. A second submits one cell whose trainer aborts as
NCCL's watchdog ends a process (SIGABRT, nothing written): the cell is recorded failed,
and the grid does not resubmit it.

The tests above them check the translation from grid resources and profiles to sbatch
options and to torch.distributed's environment; they need no cluster.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from vitscale import record as rf
from vitscale.grid.actions import JOB_FILE
from vitscale.grid.profile import Shape, SlurmError, load_profile, shape_for
from vitscale.grid.slurm import (
    ACTIVE_STATES,
    EPHEMERAL_PORTS,
    distributed_env,
    executor_parameters,
    job_state,
    master_port,
)

from .helpers.cluster import ensure_cluster, logged_steps, vitscale_ok

PROFILES = Path(__file__).resolve().parents[1] / "slurm" / "profiles"
LOCAL_PROFILE = PROFILES / "local.yaml"
STEPS = 50
# The fine-tunes of a cell, in order: two to choose the learning rate, one on all of train.
FINETUNES = [
    "synthetic-textures/select/lr=0.01",
    "synthetic-textures/select/lr=0.03",
    "synthetic-textures/test/lr=",
]

GRID = f"""\
name: slurm-test
base:
  model: {{name: ViT-Pico/4}}
  data: {{dataset: synthetic, image_size: 32, subset: 2k, num_workers: 2}}
  train: {{steps: {STEPS}, batch_size: 32, log_every: 1}}
  optim: {{warmup_steps: 10}}
  eval:
    fewshot: {{datasets: [synthetic-glyphs], shots: [5], seeds: 1, test_examples: 200}}
    upstream: {{examples: 0}}
    finetune:
      datasets: [synthetic-textures]
      steps: 15
      lrs: [0.01, 0.03]
      batch_size: 16
      test_examples: 64
  wandb: {{mode: disabled}}
axes:
  seed: [0, 1, 2]
resources:
  default: {{time: "00:10:00"}}
"""


# --------------------------------------------------------------------------- no cluster


def test_gpu_cells_get_one_task_per_gpu_and_the_profile_options() -> None:
    profile = load_profile(PROFILES / "h100x8.yaml")
    shape = shape_for({"nodes": 2, "gpus": 16, "mem_gb": 1500, "time": "1-00:00:00"}, profile)
    assert shape == Shape(
        nodes=2,
        tasks_per_node=8,
        gpus_per_node=8,
        cpus_per_task=14,
        mem_mb=1500 * 1024,
        time_min=24 * 60,
    )
    params = executor_parameters(shape, profile, job_name="fig5")
    script = _sbatch_script(params)
    for option in (
        "--nodes=2",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--cpus-per-task=14",
        "--mem=1536000M",
        "--time=1440",
        "--partition=gpu",
        "--account=my-lab",
        "--qos=normal",
        "--constraint=h100",
        "--signal=USR1@600",  # the trainer's signal, not submitit's default USR2
        "--requeue",
    ):
        assert f"#SBATCH {option}\n" in script, option
    # submitit's handler in the job must listen for the same signal; the profile's setup runs too.
    assert "export SUBMITIT_PREEMPT_SIGNAL=USR1\n" in script
    assert "module load cuda/12.4\n" in script
    # srun is told the CPUs again (SLURM 22.05-23.02 give a step one CPU per task otherwise),
    # and leaves every GPU of the node visible: each task takes cuda:LOCAL_RANK.
    (srun,) = [line for line in script.splitlines() if line.startswith("srun ")]
    assert "--cpus-per-task=14" in srun.split() and "--gpu-bind=none" in srun.split()
    # A task that fails ends the job's other tasks (on every node) at once.
    assert "--kill-on-bad-exit=1" in srun.split()


def test_cpu_cells_default_to_one_cpu_and_the_profile_time_limit() -> None:
    profile = load_profile(LOCAL_PROFILE)
    shape = shape_for({}, profile)
    assert shape == Shape(
        nodes=1, tasks_per_node=1, gpus_per_node=0, cpus_per_task=1, mem_mb=None, time_min=240
    )
    script = _sbatch_script(executor_parameters(shape, profile, job_name="demo"))
    assert "--gpus-per-node" not in script and "--mem" not in script  # the cluster's defaults
    (srun,) = [line for line in script.splitlines() if line.startswith("srun ")]
    assert "--cpus-per-task=1" in srun.split() and "--gpu-bind" not in srun
    assert "#SBATCH --partition=debug\n" in script


def test_gpus_that_do_not_split_over_nodes_are_refused() -> None:
    profile = load_profile(PROFILES / "h100x8.yaml")
    with pytest.raises(
        SlurmError, match=r"grid.yaml: resources: gpus=10 does not split evenly over nodes=4"
    ):
        shape_for({"nodes": 4, "gpus": 10}, profile, where="grid.yaml: resources")


def test_a_time_limit_within_the_signal_margin_is_refused() -> None:
    # SLURM may send --signal up to 60 s early: such a job would be signalled at once and
    # requeue itself forever.
    profile = load_profile(LOCAL_PROFILE)  # signal_delay_s: 30
    with pytest.raises(SlurmError, match=r"time=1 min is too short .* ask for more than 2 min"):
        shape_for({"time": "00:01:00"}, profile)
    assert shape_for({"time": "00:02:00"}, profile).time_min == 2


def test_distributed_env_comes_from_submitits_job_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import submitit

    slurm_env = {
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_JOB_ID": "4242",
        "SLURM_NTASKS": "16",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_PROCID": "11",
        "SLURM_LOCALID": "3",
        "SLURM_JOB_NODELIST": "gpu[007-008]",
    }
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    env = distributed_env(submitit.JobEnvironment())
    assert env == {
        "RANK": "11",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "3",
        "LOCAL_WORLD_SIZE": "8",
        "NODE_RANK": "1",
        "MASTER_ADDR": "gpu007",  # the first node hosts rank 0
        "MASTER_PORT": "24242",
    }


def test_a_failed_rank_leaves_rank_0_time_to_record_the_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``srun --kill-on-bad-exit`` a task's failure ends every other
    task at once, rank 0's too, which may still be waiting for the failure's note (up to
    10 s) or writing result.json: the cell was left unrecorded. A task of rank > 0 whose
    trainer failed now waits (a bounded time) for rank 0's result.json before it fails."""
    import threading

    import submitit

    from vitscale.grid import slurm

    for key, value in {
        "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2",
        "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "1",
        "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "gpu[007-008]",
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    assert submitit.JobEnvironment().global_rank == 1
    monkeypatch.setattr(
        slurm, "cell_command", lambda run_dir, processes: [sys.executable, "-c", "exit(1)"]
    )
    run = tmp_path / "cell"
    run.mkdir()
    recorded = threading.Timer(1.0, rf.write_json_atomic, (run / rf.RESULT, {"status": "failed"}))
    recorded.start()
    with pytest.raises(slurm.CellFailed):
        slurm.CellJob(run)()
    assert (run / rf.RESULT).is_file(), "rank 1 failed its task before rank 0 recorded the cell"


def _as_task(monkeypatch: pytest.MonkeyPatch, rank: int) -> None:
    """This process as task ``rank`` of a two-task SLURM job, as submitit sees it."""
    for key, value in {
        "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4243", "SLURM_NTASKS": "2",
        "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": str(rank), "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "gpu[007-008]",
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)


def _cell(tmp_path: Path) -> Path:
    run = tmp_path / "cell"
    run.mkdir()
    rf.write_json_atomic(run / rf.CONFIG, {"cell_id": "c1", "model": {"name": "ViT-Pico/8"}})
    return run


def test_a_trainer_that_dies_without_a_word_is_recorded_by_its_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's trainer aborted inside NCCL (the watchdog) or killed outright writes
    nothing; the cell had no result.json and every later run submitted it again, outside
    grid.retries. Its task, which outlives it, records it."""
    from vitscale.grid import slurm

    _as_task(monkeypatch, 0)
    die = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    monkeypatch.setattr(
        slurm, "cell_command", lambda run_dir, processes: [sys.executable, "-c", die]
    )
    run = _cell(tmp_path)
    with pytest.raises(slurm.CellFailed):
        slurm.CellJob(run)()
    result = rf.read_json(run / rf.RESULT)
    assert result["status"] == rf.STATUS_FAILED and result["cell_id"] == "c1"
    assert result["error"].startswith("task 0: the process running this cell was killed by SIGKILL")


def test_a_task_whose_rank_0_never_records_records_the_cell_from_the_ranks_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 met a bad image and failed; rank 0 waits in an NCCL gather that raises
    nothing in Python, so it records nothing before srun ends it. Rank 1's task waits its
    bounded time, then records the cell with rank 1's own note as the cause."""
    import time

    from vitscale.grid import slurm

    _as_task(monkeypatch, 1)
    monkeypatch.setattr(slurm, "RANK0_RECORD_WAIT_S", 0.5)
    run = _cell(tmp_path)
    note = (
        "import sys, time; from vitscale import record as rf; "
        "rf.RankFailure(rank=1, error='OSError: image file is truncated', failed_step=7, "
        f"at=time.time()).write({str(run)!r}); sys.exit(1)"
    )
    monkeypatch.setattr(
        slurm, "cell_command", lambda run_dir, processes: [sys.executable, "-c", note]
    )
    started = time.time()
    with pytest.raises(slurm.CellFailed):
        slurm.CellJob(run)()
    assert time.time() - started >= 0.5  # it gave rank 0 its time first
    error = rf.read_json(run / rf.RESULT)["error"]
    assert error.startswith(
        "rank 1: OSError: image file is truncated (then: task 1: its trainer exited with 1)"
    )


def test_master_port_stays_out_of_linuxs_ephemeral_range() -> None:
    low, high = EPHEMERAL_PORTS
    assert (low, high) == (32768, 60999)
    assert master_port(4242) == 24242
    assert master_port(12767) == 32767  # the last port below the range...
    assert master_port(12768) == 61000  # ...then the ones above it
    assert master_port(17303) == 65535
    assert master_port(17304) == master_port(0) == 20000  # and round again
    ports = [master_port(job_id) for job_id in range(1_000_000, 1_040_000)]
    assert all(20000 <= p < low or high < p <= 65535 for p in ports)
    assert len(set(ports[:17304])) == 17304  # consecutive jobs never share a port
    assert master_port(4242, ephemeral=(30000, 40000)) == 24242
    assert master_port(10000, ephemeral=(30000, 40000)) == 40000 + 1


def test_a_node_failure_is_named_from_accounting_and_srun_on_the_jobs_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitscale.grid import slurm

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "77_0_log.err").write_text("srun: error: Node failure on n2\n")
    cell = tmp_path / "cell"
    cell.mkdir()
    job = {"job_id": "77", "logs": str(logs), "slurm_conf": "/etc/slurm/two/slurm.conf"}
    (cell / JOB_FILE).write_text(json.dumps(job))
    asked = []

    def answer(*args: str, conf: str | None = None) -> str:
        asked.append(conf)
        if args[0] == "squeue":
            return ""  # forgotten by squeue: accounting answers
        return "77|NODE_FAIL|n[1-2]|2026-11-26T01:39:15\n77|PENDING|None assigned|Unknown\n"

    monkeypatch.setattr(slurm, "_run", answer)
    monkeypatch.setattr(slurm, "_squeue", {})
    assert job_state(cell) == "PENDING"  # the latest run's
    assert slurm.job_note(cell) == (
        "node n2 failed at 2026-11-26 01:39:15: SLURM ended the job (NODE_FAIL)"
    )
    assert set(asked) == {"/etc/slurm/two/slurm.conf"}  # the cluster the job went to
    (logs / "77_0_log.err").unlink()  # srun said nothing: the job's nodes
    assert slurm.job_note(cell).startswith("a node of n[1-2] failed at 2026-11-26 01:39:15")


def test_a_cell_never_submitted_has_no_job_state(tmp_path: Path) -> None:
    assert job_state(tmp_path) is None
    (tmp_path / JOB_FILE).write_text("{not json")
    assert job_state(tmp_path) is None


def _sbatch_script(params: dict) -> str:
    """The job script submitit writes for these executor parameters."""
    from submitit.slurm.slurm import _make_sbatch_string

    return _make_sbatch_string(
        command="python -m submitit.core._submit FOLDER", folder="/logs/%j", **params
    )


# --------------------------------------------------------------------------- the cluster


@pytest.fixture(scope="module")
def cluster() -> None:
    ensure_cluster()


def _slurm(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed: {done.stderr}"
    return done.stdout


def _job_id(run_dir: Path) -> str:
    return json.loads((run_dir / JOB_FILE).read_text())["job_id"]


def _result(run_dir: Path) -> dict | None:
    path = run_dir / rf.RESULT
    return rf.read_json(path) if path.is_file() else None


def _wait(what: str, predicate, *, timeout_s: float, debug) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{debug()}", pytrace=False)


def _mid_training(cells: list[Path], exclude: set[Path]) -> list[Path]:
    """The cells that have trained a few steps and have many left (a signal lands mid-way)."""
    return [c for c in cells if c not in exclude and 3 <= len(logged_steps(c)) <= STEPS // 2]


def _finetuning(cell: Path) -> bool:
    """Whether the cell has started fine-tuning (45 fine-tuning steps lie ahead)."""
    log = cell / "log.txt"
    return log.exists() and f"fine-tuning {FINETUNES[0]}" in log.read_text()


def _runs_of(job_id: str) -> list[str]:
    """Every run of a job in accounting, requeued ones included: their final states."""
    out = _slurm(
        "sacct",
        "--jobs",
        job_id,
        "--duplicates",
        "--allocations",
        "--noheader",
        "--parsable2",
        "--format=JobID,State",
    )
    return [
        line.split("|")[1].split()[0] for line in out.splitlines() if line.split("|")[0] == job_id
    ]


def _model_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    state = run_dir / rf.CHECKPOINTS / f"step_{STEPS:09d}" / "state.pt"
    return torch.load(state, map_location="cpu", weights_only=True)["model"]


@pytest.mark.slurm
@pytest.mark.slow
def test_grid_array_survives_requeue_and_resubmits_nothing(
    cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(GRID)
    runs = tmp_path / "runs"
    submit_args = [
        "grid",
        str(grid_file),
        "--executor",
        "slurm",
        "--profile",
        str(LOCAL_PROFILE),
        "--runs",
        str(runs),
    ]

    printed = vitscale_ok(capsys, *submit_args, "--dry-run", "--sbatch")
    out = vitscale_ok(capsys, *submit_args)
    assert "3 submit" in out and "submitted 3 cell(s) as job" in out, out
    # the dry-run's script is the one sbatch got (submitit keeps it beside the logs)
    (script,) = (runs / "slurm-test").glob("**/*_submission.sh")
    assert "\n".join(printed.splitlines()[1:]).strip() == script.read_text().strip()
    cells = sorted(p.parent for p in (runs / "slurm-test").glob(f"*/{JOB_FILE}"))
    assert len(cells) == 3
    jobs = {cell: _job_id(cell) for cell in cells}
    # One job array, one task per cell.
    arrays = {job.split("_")[0] for job in jobs.values()}
    assert len(arrays) == 1 and sorted(job.split("_")[1] for job in jobs.values()) == [
        "0",
        "1",
        "2",
    ], jobs
    (array,) = arrays

    def debug() -> str:
        logs = "\n".join(
            f"--- {c.name} steps={len(logged_steps(c))} job={jobs[c]}\n"
            + ((c / "log.txt").read_text()[-1500:] if (c / "log.txt").exists() else "")
            for c in cells
        )
        return _slurm("squeue") + logs

    references: list[subprocess.Popen] = []
    try:
        # 1. Interrupt two cells mid-training: the time-limit signal, and a preemption. The
        # node runs two cells at once, in near lockstep, so the two are usually mid-way together
        # (and signalled together); else the second is the third cell, which starts when the
        # first leaves the node, and may pass its start-up slowly on a loaded machine.
        mid_way = _wait(
            "a cell mid-training", lambda: _mid_training(cells, set()), timeout_s=90, debug=debug
        )
        signalled = mid_way[0]
        _slurm("scancel", "--signal=USR1", jobs[signalled])
        if len(mid_way) > 1:
            preempted = mid_way[1]
        else:
            preempted = _wait(
                "a second cell mid-training",
                lambda: next(iter(_mid_training(cells, {signalled})), None),
                timeout_s=240,
                debug=debug,
            )
        _slurm("scontrol", "requeue", jobs[preempted])
        tuning = next(c for c in cells if c not in (signalled, preempted))
        _wait("the third cell fine-tuning", lambda: _finetuning(tuning), timeout_s=240, debug=debug)
        _slurm("scancel", "--signal=USR1", jobs[tuning])

        # The uninterrupted references, meanwhile, with the same thread count.
        ref_root = tmp_path / "reference"
        for cell in (signalled, preempted, tuning):
            (ref_root / cell.name).mkdir(parents=True)
            shutil.copy(cell / rf.CONFIG, ref_root / cell.name / rf.CONFIG)
            references.append(
                subprocess.Popen(
                    [sys.executable, "-m", "vitscale.grid.cellrun", str(ref_root / cell.name)],
                    env=os.environ | {"OMP_NUM_THREADS": "1"},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )

        # 2. While they wait to be requeued, a resubmission submits nothing: all queued or running.
        assert job_state(signalled) in ACTIVE_STATES
        out = vitscale_ok(capsys, *submit_args)
        assert "nothing to submit" in out and not re.search(r"\d+ submit\b", out), out
        assert {cell: _job_id(cell) for cell in cells} == jobs

        # 3. Every cell ends done and its job leaves the queue.
        _wait(
            "every cell to finish",
            lambda: all((r := _result(c)) and r["status"] == rf.STATUS_DONE for c in cells),
            timeout_s=300,
            debug=debug,
        )
        _wait(
            "the array to leave the queue",
            lambda: not _slurm("squeue", "--noheader", "--jobs", array).strip(),
            timeout_s=30,
            debug=debug,
        )
        for ref in references:
            _, err = ref.communicate(timeout=120)
            assert ref.returncode == 0, err
    finally:
        subprocess.run(["scancel", array], check=False)  # leave the cluster idle, also on failure
        for ref in references:
            ref.kill()

    # 4. The interrupted cells resumed from a checkpoint, once each: two mid-training (their
    # loader workers signalled too), one mid-fine-tuning (its first fine-tune kept).
    for cell, signal_name in ((signalled, "SIGUSR1"), (preempted, "SIGTERM")):
        log = (cell / "log.txt").read_text()
        assert f"preempted by {signal_name}: checkpointed at step" in log, log
        resumed = re.findall(r"resumed from \S+ \(step (\d+), restart 1\)", log)
        assert len(resumed) == 1 and 0 < int(resumed[0]) < STEPS, log
        assert "DataLoader worker" not in log, log
    log = (tuning / "log.txt").read_text()
    (stopped,) = re.findall(r"preempted by SIGUSR1: checkpointed fine-tuning (\S+) at step", log)
    assert re.findall(r"resumed from \S+ \(step (\d+), restart 1\)", log) == [str(STEPS)], log
    assert re.search(rf"fine-tuning {re.escape(stopped)}: .*resumed at step", log), log
    before = FINETUNES[: next(i for i, k in enumerate(FINETUNES) if stopped.startswith(k))]
    for key in before:  # finished before the signal: kept, never run again
        assert log.count(f"fine-tuning {key}") == 1, log
    for cell in (signalled, preempted, tuning):
        assert _result(cell)["restarts"] == 1
        assert _runs_of(jobs[cell]) == ["REQUEUED", "COMPLETED"]

    # 5. No step ran twice in any cell, and each requeued cell equals its uninterrupted run.
    for cell in cells:
        assert logged_steps(cell) == list(range(1, STEPS + 1)), cell.name
    for cell in (signalled, preempted, tuning):
        ours, reference = _result(cell), _result(ref_root / cell.name)
        assert reference["restarts"] == 0
        for key in ("steps", "examples_seen", "pretrain_exaflops", "best", "finetune"):
            assert ours[key] == reference[key], key
        varying = {rf.THROUGHPUT}  # wall-clock dependent
        assert {k: v for k, v in ours["final"].items() if k not in varying} == {
            k: v for k, v in reference["final"].items() if k not in varying
        }
        weights, reference_weights = _model_weights(cell), _model_weights(ref_root / cell.name)
        assert weights.keys() == reference_weights.keys()
        assert all(torch.equal(weights[k], reference_weights[k]) for k in weights), cell.name

    # 6. Resubmitting the finished grid submits nothing (and --wait returns at once, all
    # done); status reports every cell done.
    out = vitscale_ok(capsys, *submit_args, "--wait")
    assert "3 skip-done" in out and "nothing to submit" in out, out
    assert {cell: _job_id(cell) for cell in cells} == jobs
    status = json.loads(vitscale_ok(capsys, "status", str(runs), "--json"))
    assert [
        (c["cell_id"], c["status"], c["last_step"])
        for c in sorted(status["cells"], key=lambda c: c["cell_id"])
    ] == [(cell.name, "done", STEPS) for cell in cells]
    assert status["problems"] == []


ABORT_GRID = """\
name: slurm-abort
retries: 0
base:
  model: {name: ViT-Pico/4}
  data: {dataset: synthetic, image_size: 32, subset: 512}
  train: {steps: 20, batch_size: 16, log_every: 1, checkpoint_every: 5}
  optim: {warmup_steps: 2}
  eval: {fewshot: {datasets: []}, upstream: {examples: 0}}
  wandb: {mode: disabled}
resources:
  default: {time: "00:05:00"}
"""


@pytest.mark.slurm
@pytest.mark.slow
def test_a_trainer_aborted_as_nccls_watchdog_does_is_recorded_and_not_resubmitted(
    cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """Under SLURM, a trainer that NCCL's watchdog aborts (SIGABRT inside a collective: no
    Python exception, nothing written) left no result.json, so every later run of the
    grid submitted the cell again, outside ``grid.retries``. Its task records the death,
    the job ends FAILED, and the next run of the grid says why it does not resubmit."""
    from .helpers.faults import HOOKS

    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(ABORT_GRID)
    runs = tmp_path / "runs"
    args = ["grid", str(grid_file), "--executor", "slurm", "--profile", str(LOCAL_PROFILE)]
    args += ["--runs", str(runs)]
    (cell_id,) = re.findall(r"^([0-9a-f]{10}) ", vitscale_ok(capsys, *args, "--dry-run"), re.M)
    python_path = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", python_path)  # sbatch passes the environment on
    monkeypatch.setenv("FAULT_ABORT", cell_id)
    monkeypatch.setenv("FAULT_ABORT_AFTER", "3")
    assert "submitted 1 cell(s) as job" in vitscale_ok(capsys, *args)
    cell = runs / "slurm-abort" / cell_id
    job = _job_id(cell)
    try:
        _wait(
            "the job to leave the queue",
            lambda: not _slurm("squeue", "--noheader", "--jobs", job).strip(),
            timeout_s=180,
            debug=lambda: _slurm("squeue") + _read(cell / "log.txt"),
        )
    finally:
        subprocess.run(["scancel", job], check=False)
    result = _result(cell)
    assert result is not None, _read(cell / "log.txt")
    assert result["status"] == rf.STATUS_FAILED and "SIGABRT" in result["error"], result
    assert _runs_of(job) == ["FAILED"]
    monkeypatch.delenv("FAULT_ABORT")
    out = vitscale_ok(capsys, *args, "--dry-run")
    assert "failed (not retried)" in out and "0 cells to run" in out, out


def _read(path: Path) -> str:
    return path.read_text()[-3000:] if path.is_file() else f"({path} absent)"
