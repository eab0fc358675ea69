"""The local SLURM clusters the `slurm` tests submit to (slurm/local-cluster.sh): the
single-node one, and the two-node one beside it (nodes n1 and n2 in network namespaces)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vitscale import record as rf
from vitscale.cli import main

SCRIPT = Path(__file__).resolve().parents[2] / "slurm" / "local-cluster.sh"
# Clients reach the two-node cluster with this configuration (SLURM_CONF).
TWO_CONF = "/etc/slurm/two/slurm.conf"
TWO_PARTITION = "two"
TWO_NODES = ("n1", "n2")
TWO_SUBNET = "10.231.0"


def ensure_cluster() -> str:
    """Bring the cluster up (fast when it already is) and return what `up` said.

    Skips without root outside CI; in CI (``CI`` set) the SLURM tests must run, so a
    failure to start fails loudly instead.
    """
    return _up()


def ensure_two_node_cluster() -> str:
    """Bring the two-node cluster up beside the single-node one (a few seconds; under a
    second when it already is) and return what `up --nodes 2` said. Skips as
    :func:`ensure_cluster` does, and also where neither `ip` nor apt (to install it) is."""
    if shutil.which("ip") is None and shutil.which("apt-get") is None and not os.environ.get("CI"):
        pytest.skip("the two-node cluster needs `ip` (iproute2) for its network namespaces")
    return _up("--nodes", "2")


def _up(*options: str) -> str:
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip(f"{SCRIPT} up needs root (installs packages, starts daemons); CI is not set")
    # From scratch `up` installs Debian packages: allow for a slow mirror.
    done = run(str(SCRIPT), "up", *options, timeout=900)
    if done.returncode != 0:
        pytest.fail(
            f"{SCRIPT} up {' '.join(options)} failed (exit {done.returncode}):\n"
            f"{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return done.stdout


def two_env() -> dict[str, str]:
    """The environment in which SLURM's commands (and submitit) reach the two-node cluster."""
    return os.environ | {"SLURM_CONF": TWO_CONF}


def run(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def two(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A SLURM command on the two-node cluster."""
    return run(*args, timeout=timeout, env=two_env())


def vitscale_ok(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``vitscale ARGS`` in this process (a submission returns at once): its output, having
    asserted that it exited 0."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    assert code == 0, f"vitscale {' '.join(args)} exited {code}:\n{out.out}\n{out.err}"
    return out.out


def logged_steps(run_dir: Path) -> list[int]:
    """The steps in a run's metrics.jsonl so far (none before it exists)."""
    path = run_dir / rf.METRICS
    return [row[rf.STEP] for row in rf.iter_metrics(path)] if path.is_file() else []


def is_done(run_dir: Path) -> bool:
    """Whether the run's result.json says done."""
    path = run_dir / rf.RESULT
    return path.is_file() and rf.read_json(path).get("status") == rf.STATUS_DONE
