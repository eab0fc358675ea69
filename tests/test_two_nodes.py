"""Past one machine: a real two-node SLURM cluster (`slurm/local-cluster.sh up --nodes 2`).

Nodes n1 and n2 are slurmd in network namespaces of this machine, on a bridge, under their
own slurmctld (SLURM_CONF=/etc/slurm/two/slurm.conf); the single-node cluster beside them
is left alone. The last test brings the two-node cluster down again and checks that
nothing of it is left: no namespace, link or process.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .helpers.cluster import (
    SCRIPT,
    TWO_PARTITION,
    TWO_SUBNET,
    ensure_cluster,
    ensure_two_node_cluster,
    run,
    two,
)

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
