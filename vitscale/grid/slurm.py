"""Submit a grid to SLURM with submitit, and ask SLURM about a cell's job.

    vitscale grid FILE --executor slurm --profile slurm/profiles/NAME.yaml

Submission
    Of the cells :func:`vitscale.grid.actions.decide` submits (a cell's latest job is recorded
    in ``<run>/job.json``), each one's resources become a :class:`Shape`; the cells of one
    shape go into one job array (a grid usually has one shape, hence one array), at most
    ``array_parallelism`` of them running at once.

A cell's job
    Each array task runs :class:`CellJob` under ``srun``: one task per GPU (one per node for
    CPU-only cells). A task starts ``python -m vitscale.grid.cellrun RUN_DIR`` as a child
    process with the rank, world size and master address Accelerate reads, taken from
    submitit's ``JobEnvironment``, and its output appended to ``RUN_DIR/log.txt``.

Time limits and preemption
    SLURM sends SIGUSR1 ``signal_delay_s`` seconds before the time limit (``--signal=USR1@N``
    reaches the processes ``srun`` started: submitit's and the trainer's). The trainer
    checkpoints at the next step boundary and exits with ``EXIT_PREEMPTED``; submitit's
    handler calls :meth:`CellJob.checkpoint`, which waits for that checkpoint (up to
    ``signal_delay_s`` less :data:`~vitscale.grid.profile.REQUEUE_S`, which the grid checks
    holds its largest cell's checkpoint write), then submitit requeues the job and the requeued task starts the cell again, which resumes from its
    checkpoint. SIGUSR1 rather than submitit's default SIGUSR2: where SLURM tracks jobs by
    cgroup every process of the step gets the signal, and SIGUSR2 would kill the trainer
    (which only handles SIGUSR1 and SIGTERM). A preemption by SLURM itself (SIGTERM, then
    SLURM requeues the job) takes the same route without submitit.

Trunks and branches (docs/schedules.md)
    A branch's job depends on its trunk's (``--dependency=afterok:<trunk job>``): it starts
    once the trunk has finished, from the trunk's checkpoint at its cooldown start. A trunk
    that is requeued (time limit, preemption) is not finished, so its branches wait on;
    one that fails cancels them (``--kill-on-invalid-dep=yes``) rather than leaving them
    pending for ever, and the next submission runs them again: after the retried trunk, or,
    when it has no retries left, at once (from its checkpoint if it got there, else alone).

A lost node
    The other nodes' trainers fail at their next collective (the peer's sockets closed) or
    wait in it until SLURM, having marked the node DOWN after ``SlurmdTimeout``, ends the
    job (NODE_FAIL: SIGTERM, SIGKILL after ``KillWait``); ``--kill-on-bad-exit`` ends the
    rest at once. With ``--requeue`` the job waits for nodes and the cell resumes from its
    last complete checkpoint; :func:`job_note` tells ``vitscale status`` which node failed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .. import record as rf
from ..record import LOG
from .actions import JOB_FILE, Planned, decide, prepare, retry_hint, summary
from .cellrun import EXIT_OK, EXIT_PREEMPTED, describe_death, is_done, record_failure
from .local import cell_command
from .profile import REQUEUE_S, Profile, Shape, SlurmError, shape_for
from .spec import Grid

# SLURM job states in which a job may still run the cell (squeue/sacct spellings).
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "SUSPENDED",
        "STOPPED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)
PREEMPT_SIGNAL = "USR1"  # what the trainer checkpoints on (vitscale.train.signals)
# A cell's exit codes that mean "stopped, not failed": the trainer checkpointed after a
# signal, or a signal killed it outside the training loop (while starting, evaluating, or
# shutting down after another rank stopped), where the last checkpoint still holds.
STOPPED_BY_SIGNAL = frozenset({EXIT_PREEMPTED, -signal.SIGTERM, -signal.SIGUSR1})
# Requeues after a time limit before submitit gives up on a cell. A long cell runs as a
# chain of time-limit slices; preemptions do not count. Generous: a cell that needs more
# slices than this is better split (or given a longer time limit).
MAX_TIMEOUT_REQUEUES = 100
SLURM_FOLDER = ".slurm"  # submitit's scripts and logs, beside the grid's run folders
# How long one `squeue` snapshot answers job_state: one query for a whole `status` table or
# submission plan instead of one per cell.
SQUEUE_TTL_S = 5.0
# How long a task of rank > 0 whose trainer failed waits for rank 0 to record the cell before
# it fails too: ``--kill-on-bad-exit`` then ends every task, rank 0's with it. Rank 0 learns of
# the failure at its next collective, waits up to vitscale.train.run.PEER_FAILURE_WAIT_S
# for the failed process's note, then writes result.json. Bounded: a rank 0 hung in a
# collective (NCCL raises nothing in Python) is what --kill-on-bad-exit is there to end, and
# this task then records the cell itself (CellJob.__call__).
RANK0_RECORD_WAIT_S = 60.0


# --------------------------------------------------------------------------- shapes


def srun_args(shape: Shape) -> list[str]:
    """What ``srun`` must be told although ``sbatch`` was: SLURM 22.05 to 23.02 do not pass
    ``--cpus-per-task`` from the allocation to the step, so each task would get one CPU for
    its loader workers and threads. GPUs: every task sees all of its node's GPUs and picks
    ``cuda:LOCAL_RANK`` (what the trainer's Accelerate does); ``--gpu-bind=none`` keeps a
    cluster default from hiding the others (NCCL's peer-to-peer paths need them visible).
    ``--kill-on-bad-exit=1``: a task that fails ends the others at once, instead of leaving
    them waiting in a collective for a peer that is gone (a task other than rank 0's first
    gives rank 0 time to record the cell: :meth:`CellJob._await_record`)."""
    args = [f"--cpus-per-task={shape.cpus_per_task}", "--kill-on-bad-exit=1"]
    if shape.gpus_per_node:
        args.append("--gpu-bind=none")
    return args


def executor_parameters(
    shape: Shape, profile: Profile, *, job_name: str, after: str | None = None
) -> dict[str, Any]:
    """``submitit.SlurmExecutor.update_parameters`` arguments for one array; ``after``:
    the trunk's job, which the array's branches wait for (module docstring)."""
    params: dict[str, Any] = {
        "job_name": job_name,
        "nodes": shape.nodes,
        "ntasks_per_node": shape.tasks_per_node,
        "cpus_per_task": shape.cpus_per_task,
        "time": shape.time_min,
        "array_parallelism": profile.array_parallelism,
        # submitit's handler listens for $SUBMITIT_PREEMPT_SIGNAL (read when the job's
        # Python starts): make it the trainer's signal, as sent by --signal below.
        "setup": [*profile.setup, f"export SUBMITIT_PREEMPT_SIGNAL={PREEMPT_SIGNAL}"],
        # --requeue: clusters with JobRequeue=0 refuse `scontrol requeue` otherwise.
        "additional_parameters": {
            "signal": f"{PREEMPT_SIGNAL}@{profile.signal_delay_s}",
            "requeue": True,
        },
        "srun_args": srun_args(shape),
    }
    if after:
        params["additional_parameters"] |= {
            "dependency": f"afterok:{after}",
            "kill_on_invalid_dep": "yes",
        }
    if shape.gpus_per_node:
        params["gpus_per_node"] = shape.gpus_per_node
    if shape.mem_mb:
        params["mem"] = f"{shape.mem_mb}M"
    for key in ("partition", "account", "qos", "constraint"):
        if value := getattr(profile, key):
            params[key] = value
    return params


# --------------------------------------------------------------------------- the job


# Linux's default range for the ports it picks itself (net.ipv4.ip_local_port_range): a
# rendezvous port in it may already be held by some outgoing connection on the node.
EPHEMERAL_PORTS = (32768, 60999)
MASTER_PORT_MIN = 20000  # above the well-known and most registered services' ports


def master_port(job_id: int, ephemeral: tuple[int, int] = EPHEMERAL_PORTS) -> int:
    """Rank 0's rendezvous port for a job: from ``MASTER_PORT_MIN`` up to 65535, never in
    ``ephemeral``. It derives from the job id, so jobs sharing a node differ (unless their
    ids are 17,304 apart) and a requeued job (same id) uses the same port."""
    below = ephemeral[0] - MASTER_PORT_MIN  # 20000-32767
    above = 65535 - ephemeral[1]  # 61000-65535
    i = job_id % (below + above)
    return MASTER_PORT_MIN + i if i < below else ephemeral[1] + 1 + i - below


def distributed_env(job: Any) -> dict[str, str]:
    """torch.distributed's environment for this task, from submitit's ``JobEnvironment``
    (SLURM's: ``SLURM_PROCID``, ``SLURM_NODEID``, the first node of
    ``SLURM_JOB_NODELIST`` as the rendezvous host, :func:`master_port` there)."""
    return {
        "RANK": str(job.global_rank),
        "WORLD_SIZE": str(job.num_tasks),
        "LOCAL_RANK": str(job.local_rank),
        "LOCAL_WORLD_SIZE": str(job.num_tasks // job.num_nodes),
        "NODE_RANK": str(job.node),
        "MASTER_ADDR": job.hostnames[0],
        "MASTER_PORT": str(master_port(int(job.raw_job_id))),
    }


class CellFailed(RuntimeError):
    """The cell's training process failed: the SLURM task fails too (sacct shows FAILED)."""


class CellJob:
    """The callable each array task runs: train one cell, checkpoint and requeue on a signal.

    submitit pickles it (only ``run_dir``, ``cpus_per_task`` and ``stop_timeout_s``: the child
    process is per run) and, on SIGUSR1, calls :meth:`checkpoint` in the global rank 0.
    """

    def __init__(
        self, run_dir: str | Path, *, cpus_per_task: int = 1, stop_timeout_s: float = 60.0
    ) -> None:
        self.run_dir = str(run_dir)
        self.cpus_per_task = cpus_per_task
        self.stop_timeout_s = stop_timeout_s
        self._child: subprocess.Popen | None = None
        self._exited = threading.Event()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "cpus_per_task": self.cpus_per_task,
            "stop_timeout_s": self.stop_timeout_s,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(
            state["run_dir"],
            cpus_per_task=state["cpus_per_task"],
            stop_timeout_s=state["stop_timeout_s"],
        )

    def __repr__(self) -> str:
        return f"CellJob({self.run_dir!r})"

    def __call__(self) -> int:
        import submitit

        job = submitit.JobEnvironment()
        started = time.time()
        run_dir = Path(self.run_dir)
        env = os.environ | {"OMP_NUM_THREADS": str(self.cpus_per_task), "PYTHONUNBUFFERED": "1"}
        if job.num_tasks > 1:
            env |= distributed_env(job)
        rank = job.global_rank
        log = run_dir / (LOG if rank == 0 else f"log.rank{rank}.txt")
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        print(f"{job}: cell {run_dir} (restart {restart}), output in {log}", flush=True)
        with open(log, "a") as out:
            out.write(
                f"--- SLURM job {job.job_id}, restart {restart}, task {rank} of {job.num_tasks} on {job.hostname}\n"
            )
            out.flush()
            self._child = subprocess.Popen(
                cell_command(run_dir, processes=1), stdout=out, stderr=subprocess.STDOUT, env=env
            )
        # The child is reaped by a helper thread so that this (main) thread only ever waits on
        # an Event: submitit's signal handler runs here and waits on the same Event in
        # checkpoint(); a nested Popen.wait would deadlock on Popen's internal lock.
        threading.Thread(target=self._reap, daemon=True).start()
        while not self._exited.wait(1.0):
            pass
        code = self._child.returncode
        if code == EXIT_OK:
            return code
        if code in STOPPED_BY_SIGNAL:
            # SLURM is ending or requeuing the job (SIGTERM: preemption, scancel, requeue; or
            # rank 0 requeues it after SIGUSR1). Not a failure: the cell resumes when run again.
            print(
                f"cell {run_dir.name} stopped by a signal (exit {code}); it resumes when run again",
                flush=True,
            )
            return code
        if rank > 0:
            self._await_record()
        # Whoever is left records the cell: a trainer aborted inside NCCL, or killed, wrote
        # nothing, and a cell without result.json is submitted again on every run.
        how = describe_death(code) if code < 0 else f"its trainer exited with {code}"
        record_failure(run_dir, f"task {rank}: {how}", world=job.num_tasks, since=started)
        raise CellFailed(f"cell {run_dir.name} exited with {code}; see {log}")

    def _await_record(self) -> None:
        """Wait (at most :data:`RANK0_RECORD_WAIT_S`) for rank 0 to write result.json:
        failing this task first would have ``srun --kill-on-bad-exit`` end rank 0 before it
        records the cell with its own words. (A failed cell's earlier result.json is set
        aside before it runs again.)"""
        result = Path(self.run_dir) / rf.RESULT
        deadline = time.monotonic() + RANK0_RECORD_WAIT_S
        while not result.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)

    def _reap(self) -> None:
        assert self._child is not None
        self._child.wait()
        self._exited.set()

    def checkpoint(self) -> Any:
        """submitit's checkpoint hook (SIGUSR1 before the time limit, or preemption).

        The trainer checkpoints on the same signal at its next step boundary and exits; wait
        for that (up to ``stop_timeout_s``), then hand submitit a fresh copy of this job to
        requeue. The requeued task resumes the cell from the checkpoint. If the trainer is too
        slow, the job is requeued anyway and resumes from its previous checkpoint (a partial
        checkpoint is never used).
        """
        from submitit.helpers import DelayedSubmission

        child = self._child
        if child is not None and not self._exited.is_set():
            # SLURM signalled the child too when it shares our process group; once more is harmless.
            child.send_signal(signal.SIGUSR1)
            started = time.monotonic()
            if self._exited.wait(self.stop_timeout_s):
                print(
                    f"cell {Path(self.run_dir).name}: trainer stopped (exit {child.returncode}) after "
                    f"{time.monotonic() - started:.1f} s; requeuing",
                    flush=True,
                )
            else:
                print(
                    f"cell {Path(self.run_dir).name}: trainer still running after {self.stop_timeout_s:.0f} s; "
                    "requeuing anyway (it resumes from its last complete checkpoint)",
                    flush=True,
                )
        return DelayedSubmission(
            CellJob(
                self.run_dir, cpus_per_task=self.cpus_per_task, stop_timeout_s=self.stop_timeout_s
            )
        )


# --------------------------------------------------------------------------- submission


def _make_executor(folder: Path):
    import submitit

    if shutil.which("sbatch") is None or shutil.which("srun") is None:
        raise SlurmError(
            "--executor slurm: sbatch/srun not found on this machine; submit from a SLURM login node "
            "(or start the local cluster: sudo slurm/local-cluster.sh up), or use --executor local"
        )
    return submitit.SlurmExecutor(folder=folder, max_num_timeout=MAX_TIMEOUT_REQUEUES)


def _record_job(run_dir: Path, job_id: str, *, profile: Profile, logs: Path, shape: Shape) -> None:
    """Write ``<run>/job.json``: the cell's latest job, and the ones before it."""
    previous = read_job(run_dir) or {}
    history = [*previous.get("history", []), previous["job_id"]] if "job_id" in previous else []
    rf.write_json_atomic(
        run_dir / JOB_FILE,
        {
            "scheduler": "slurm",
            "job_id": job_id,
            "submitted_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "profile": profile.name,
            "shape": shape.__dict__,
            "logs": str(logs / job_id),
            "history": history,
            # The cluster it went to, where SLURM_CONF chose one (the local two-node cluster):
            # status asks that cluster about the job.
            **({"slurm_conf": conf} if (conf := os.environ.get("SLURM_CONF")) else {}),
        },
    )


def submit_cells(
    planned: list[Planned],
    shape: Shape,
    profile: Profile,
    *,
    folder: Path,
    job_name: str,
    after: str | None = None,
) -> list[str]:
    """Submit ``planned`` cells of one shape as one job array, after the job ``after``
    when given; returns their job ids."""
    from submitit.core.utils import FailedJobError

    executor = _make_executor(folder / "%j")
    executor.update_parameters(
        **executor_parameters(shape, profile, job_name=job_name, after=after)
    )
    stop_timeout_s = max(5.0, profile.signal_delay_s - REQUEUE_S)  # then requeue, before the kill
    jobs = []
    try:
        with executor.batch():
            for item in planned:
                for change in prepare(item):
                    print(f"  {item.cell.id}: config.json: {change}")
                job = CellJob(
                    item.run_dir.resolve(),
                    cpus_per_task=shape.cpus_per_task,
                    stop_timeout_s=stop_timeout_s,
                )
                jobs.append(executor.submit(job))
    except FailedJobError as e:
        raise SlurmError(f"sbatch refused the job array ({shape.describe()}): {e}") from None
    ids = [job.job_id for job in jobs]
    for item, job_id in zip(planned, ids, strict=True):
        _record_job(item.run_dir, job_id, profile=profile, logs=folder, shape=shape)
    return ids


def submit(grid: Grid, *, runs_root: Path, profile: Profile, retry_failed: bool = False) -> int:
    """Submit the grid's cells that are neither done, running nor queued; returns an exit
    code: 1 when failed cells were skipped, not retried (the hint says how to
    retry them)."""
    planned = decide(grid, runs_root, is_queued=is_queued, retry_failed=retry_failed)
    print(f"grid {grid.name!r}: {summary(planned)}")
    for p in planned:
        if p.action == "skip-failed":
            print(f"  {p.cell.id}: {p.note}; see {p.run_dir / rf.RESULT}")
    hint = retry_hint(planned, grid_path=grid.path, runs=runs_root / grid.name)
    todo = [p for p in planned if p.action == "submit"]
    if not todo:
        print("nothing to submit")
        if hint:
            print(f"error: {hint}", file=sys.stderr)
        return 1 if hint else 0
    folder = (runs_root / grid.name / SLURM_FOLDER).resolve()
    jobs: dict[str, str] = {}  # cell id -> its job, for the branches that wait for it
    for trunk, shape, group in _arrays(grid, todo, runs_root, profile):
        after = None
        if trunk is not None:  # a trunk submitted now, or queued by an earlier submission
            after = jobs.get(trunk) or read_job(runs_root / grid.name / trunk)["job_id"]
        ids = submit_cells(group, shape, profile, folder=folder, job_name=grid.name, after=after)
        jobs |= {p.cell.id: job_id for p, job_id in zip(group, ids, strict=True)}
        print(
            f"submitted {len(ids)} cell(s) as job {ids[0].split('_')[0]} on profile "
            f"{profile.name!r}{f' (partition {profile.partition})' if profile.partition else ''}: "
            f"{shape.describe()}, at most {profile.array_parallelism} at once"
            + (f"; branches: they start after their trunk's job {after}" if after else "")
        )
    print(
        f"logs: {folder}/<job id>/ and <run>/{LOG}; follow with: vitscale status {runs_root / grid.name}"
    )
    if hint:
        print(f"error: {hint}", file=sys.stderr)
    return 1 if hint else 0


def _arrays(
    grid: Grid, todo: list[Planned], runs_root: Path, profile: Profile
) -> list[tuple[str | None, Shape, list[Planned]]]:
    """The job arrays a submission of ``todo`` makes, in order: ``(the trunk whose job
    they wait for or None, their request, their cells)``; one per request, and the branches
    of a trunk not done yet apart, after it (docs/schedules.md)."""
    waiting = {p.cell.id for p in todo if _trunk_to_wait_for(grid, p, todo, runs_root)}
    batches = [(None, [p for p in todo if p.cell.id not in waiting])] + [
        (trunk, [p for p in todo if p.cell.id in waiting and p.cell.config.branch.trunk == trunk])
        for trunk in dict.fromkeys(p.cell.config.branch.trunk for p in todo if p.cell.id in waiting)
    ]
    arrays = []
    for trunk, items in batches:
        groups: dict[Shape, list[Planned]] = {}
        for p in items:
            where = f"{grid.path}: block {p.cell.block!r}: resources"
            shape = shape_for(grid.resources_for(p.cell), profile, where=where)
            groups.setdefault(shape, []).append(p)
        arrays += [(trunk, shape, group) for shape, group in groups.items()]
    return arrays


def print_scripts(grid: Grid, *, runs_root: Path, profile: Profile) -> int:
    """``vitscale grid FILE --dry-run --sbatch``: the script ``sbatch`` would get for each
    job array of the cells to submit, as submitit writes it (asked of submitit, not
    copied; a branch's array adds its ``--dependency`` on its trunk's job when submitted)."""
    import submitit

    todo = [p for p in decide(grid, runs_root, is_queued=is_queued) if p.action == "submit"]
    folder = (runs_root / grid.name / SLURM_FOLDER).resolve()
    for trunk, shape, group in _arrays(grid, todo, runs_root, profile):
        after = None if trunk is None else f"<the job of trunk {trunk}>"
        executor = submitit.SlurmExecutor(folder=folder / "%j")
        executor.update_parameters(
            **executor_parameters(shape, profile, job_name=grid.name, after=after)
        )
        executor.parameters["map_count"] = len(group)
        print(f"# {len(group)} cell(s): {', '.join(p.cell.id for p in group)}; {shape.describe()}")
        print(executor._make_submission_file_text(executor._submitit_command_str, uid=""))
    if not todo:
        print("nothing to submit")
    return 0


def _trunk_to_wait_for(grid: Grid, item: Planned, todo: list[Planned], runs_root: Path) -> bool:
    """Whether ``item`` is a branch whose trunk is submitted now or still queued."""
    trunk = item.cell.config.branch.trunk
    if trunk is None:
        return False
    return any(p.cell.id == trunk for p in todo) or is_queued(runs_root / grid.name / trunk)


# --------------------------------------------------------------------------- job state


def read_job(run_dir: Path) -> dict[str, Any] | None:
    """The cell's ``job.json``, or None if it was never submitted to a scheduler."""
    try:
        job = rf.read_json(Path(run_dir) / JOB_FILE)
    except (OSError, ValueError):
        return None
    return job if isinstance(job, dict) and job.get("job_id") else None


def _run(*args: str, conf: str | None = None) -> str | None:
    """A SLURM command's output (on the cluster of ``conf``, a SLURM_CONF; default: this
    machine's), or None when SLURM is missing or does not answer."""
    env = os.environ | {"SLURM_CONF": conf} if conf else None
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=30, check=False, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


_squeue: dict[str | None, tuple[float, dict[str, str]]] = {}


def _squeue_states(conf: str | None = None) -> dict[str, str]:
    """``{job id: state}`` for this user's queued and running jobs (array tasks one by one)."""
    if (cached := _squeue.get(conf)) and time.monotonic() - cached[0] < SQUEUE_TTL_S:
        return cached[1]
    out = _run("squeue", "--me", "--array", "--noheader", "--format=%i|%T", conf=conf)
    states = {}
    for line in (out or "").splitlines():
        job_id, _, state = line.strip().partition("|")
        if state:
            states[job_id] = state
    if out is not None:
        _squeue[conf] = (time.monotonic(), states)
    return states


def _sacct_runs(job_id: str, conf: str | None = None) -> list[tuple[str, str, str]]:
    """``(state, nodes, end)`` of every run of the job in accounting, requeued ones first."""
    out = _run(
        "sacct", "--jobs", job_id, "--duplicates", "--allocations", "--noheader",
        "--parsable2", "--format=JobID,State,NodeList,End", conf=conf,
    )  # fmt: skip
    runs = []
    for line in (out or "").splitlines():
        found, state, nodes, end = (line.strip().split("|") + ["", "", ""])[:4]
        if found == job_id and state:
            runs.append((state.split()[0], nodes, end))  # "CANCELLED by 0" -> "CANCELLED"
    return runs


def job_state(run_dir: Path) -> str | None:
    """SLURM's state of the cell's latest job ("PENDING", "RUNNING", "COMPLETED", ...).

    None when the cell has no job, SLURM is not installed here, or SLURM no longer knows
    the job.
    """
    job = read_job(run_dir)
    if job is None:
        return None
    job_id, conf = str(job["job_id"]), job.get("slurm_conf")
    if state := _squeue_states(conf).get(job_id):
        return state
    runs = _sacct_runs(job_id, conf)
    return runs[-1][0] if runs else None


def job_note(run_dir: Path) -> str:
    """What befell the cell's latest job, for ``vitscale status``: a node failure (the
    node that srun saw fail, from the job's log, and when), or ``""``."""
    job = read_job(run_dir)
    if job is None:
        return ""
    job_id = str(job["job_id"])
    failed = [r for r in _sacct_runs(job_id, job.get("slurm_conf")) if r[0] == "NODE_FAIL"]
    if not failed:
        return ""
    _, nodes, end = failed[-1]
    lost = []
    for log in sorted(Path(str(job.get("logs", ""))).glob("*_log.err")):
        with contextlib.suppress(OSError):
            lost += re.findall(
                r"srun: error: Node failure on (\S+)", log.read_text(errors="replace")
            )
    where = f"node {lost[-1]}" if lost else f"a node of {nodes}"
    times = "" if len(failed) == 1 else f" ({len(failed)} times)"
    return f"{where} failed at {end.replace('T', ' ')}{times}: SLURM ended the job (NODE_FAIL)"


def is_queued(run_dir: Path) -> bool:
    """Whether the cell's latest job may still run it (pending, running, requeued...)."""
    return job_state(run_dir) in ACTIVE_STATES


def wait(grid: Grid, *, runs_root: Path, poll_s: float = 5.0) -> int:
    """Block until no cell of ``grid`` has a job that may still run it; 0 if all are done.

    ``vitscale grid ... --executor slurm --wait`` (the SLURM demo) uses it; a cell whose job
    ended without a result (killed outside the trainer) counts as not done.
    """
    from tqdm import tqdm

    run_dirs = [runs_root / grid.name / cell.id for cell in grid.cells]
    with tqdm(total=len(run_dirs), desc="cells done", unit="cell") as bar:
        while True:
            active = [d for d in run_dirs if is_queued(d)]
            done = sum(is_done(d) for d in run_dirs)
            bar.update(done - bar.n)
            if not active:
                break
            time.sleep(poll_s)
    missing = [d.name for d in run_dirs if not is_done(d)]
    if missing:
        print(
            f"{len(missing)} cell(s) not done: {', '.join(missing)}; see vitscale status {runs_root / grid.name}"
        )
    return 1 if missing else 0
