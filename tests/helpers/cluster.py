"""The local SLURM cluster the `slurm` tests submit to (slurm/local-cluster.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def ensure_cluster() -> str:
    """Bring the cluster up (fast when it already is) and return what `up` said.

    Skips without root outside CI; in CI (``CI`` set) the SLURM tests must run, so a
    failure to start fails loudly instead.
    """
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip(f"{SCRIPT} up needs root (installs packages, starts daemons); CI is not set")
    # From scratch `up` installs Debian packages: allow for a slow mirror.
    done = run(str(SCRIPT), "up", timeout=900)
    if done.returncode != 0:
        pytest.fail(
            f"{SCRIPT} up failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return done.stdout


SCRIPT = Path(__file__).resolve().parents[2] / "slurm" / "local-cluster.sh"


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
