"""The local SLURM cluster (`slurm/local-cluster.sh up`) runs batch jobs and accounts them.

Accounting matters as much as scheduling: submitit follows its jobs through `sacct`, and a
job that dies without writing a result is only seen as over once `sacct` reports it.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from .helpers.cluster import SCRIPT, ensure_cluster, run

pytestmark = pytest.mark.slurm

PARTITION = "debug"
CLUSTER = "vitscale"


@pytest.fixture(scope="module")
def cluster() -> None:
    ensure_cluster()


def test_up_is_idempotent_and_status_reports_every_daemon(cluster: None) -> None:
    # Asked from a process limited to one OpenMP thread (as make test's are), the node
    # still offers every CPU of the machine, and nothing restarts.
    cpus = len(os.sched_getaffinity(0))
    started = time.monotonic()
    again = run(str(SCRIPT), "up", env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout and f"({cpus} CPUs)" in again.stdout, again.stdout
    assert time.monotonic() - started < 10
    assert run("sinfo", "--noheader", "--format=%c").stdout.split() == [str(cpus)]
    status = run(str(SCRIPT), "status")
    assert status.returncode == 0, status.stdout + status.stderr
    for daemon in ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd"):
        assert re.search(rf"^{daemon}\s+running \(pid \d+\)$", status.stdout, re.MULTILINE), (
            status.stdout
        )


def _sacct_state(job_id: str, *, timeout_s: float = 20) -> str:
    """The job's final `State|ExitCode` in sacct (slurmdbd may lag squeue by a second)."""
    deadline = time.monotonic() + timeout_s
    row = ""
    while time.monotonic() < deadline:
        query = run(
            "sacct",
            "--jobs",
            job_id,
            "--allocations",
            "--noheader",
            "--parsable2",
            "--format=State,ExitCode",
        )
        assert query.returncode == 0, f"sacct failed: {query.stderr}"
        row = query.stdout.strip()
        if row.split("|")[0] in {"COMPLETED", "FAILED"}:
            return row
        time.sleep(0.5)
    raise AssertionError(f"sacct has no final state for job {job_id} after {timeout_s} s: {row!r}")


@pytest.mark.parametrize(("exit_code", "state"), [(0, "COMPLETED"), (3, "FAILED")])
def test_batch_job_runs_and_sacct_records_its_end(
    cluster: None, tmp_path: Path, exit_code: int, state: str
) -> None:
    output = tmp_path / "job.out"
    job = run(
        "sbatch",
        "--parsable",
        "--wait",
        f"--output={output}",
        "--wrap",
        f"echo $SLURM_JOB_PARTITION $SLURM_CLUSTER_NAME; exit {exit_code}",
    )
    # --wait makes sbatch return when the job ends, with the job's exit code.
    assert job.returncode == exit_code, job.stderr
    assert output.read_text().split() == [PARTITION, CLUSTER]  # the default partition
    assert _sacct_state(job.stdout.strip()) == f"{state}|{exit_code}:0"
