"""Cluster profiles: small YAML files describing what a SLURM cluster can give (their keys:
docs/config.md, "Cluster profiles"). A grid's ``resources`` (per family or model) ask for
GPUs, nodes, time and memory; they are checked against the profile before anything is
submitted.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..config import yaml_load


def parse_time(text: str | int) -> int:
    """SLURM time ``[D-]HH:MM:SS``, ``MM:SS`` or minutes -> minutes (rounded up)."""
    if isinstance(text, int):
        return text
    days, _, clock = str(text).rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"not a SLURM time: {text!r}; use HH:MM:SS or D-HH:MM:SS")
    if len(parts) == 1:
        seconds = parts[0] * 60
    else:
        h, m, s = [0] * (3 - len(parts)) + parts
        seconds = h * 3600 + m * 60 + s
    seconds += int(days or 0) * 86400
    return -(-seconds // 60)


@dataclass(frozen=True)
class Profile:
    name: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gpus_per_node: int = 0
    cpus_per_node: int = 1
    mem_gb_per_node: float = 4.0
    max_nodes: int = 1
    time_limit: str = "01:00:00"
    sustained_tflops: float = 100.0
    gpu_mem_gb: float | None = None
    array_parallelism: int = 16
    signal_delay_s: int = 60
    setup: list[str] = field(default_factory=list)
    # The GPU's name as torch reports it, or a part of it ("H100 80GB HBM3"): budgets read
    # the measured speeds of calibration.csv beside the profile (vitscale.grid.calibration).
    gpu_type: str | None = None
    # Read from calibration.csv beside the profile file, not a key of the YAML.
    calibration: tuple = field(default=(), compare=False, repr=False)

    @property
    def time_limit_min(self) -> int:
        return parse_time(self.time_limit)

    def check(
        self, resources: dict, *, where: str, origin: dict[str, str] | None = None
    ) -> list[str]:
        """Problems with asking this profile for ``resources``, one message each, naming
        ``origin[key]`` (where the offending key was set, e.g. ``resources.default``) or
        ``where``: a default's problem is then the same message for every model using it."""
        problems = []
        nodes = resources.get("nodes", 1)
        gpus = resources.get("gpus", self.gpus_per_node * nodes)
        origin = origin or {}
        at = {k: origin.get(k, where) for k in ("nodes", "time", "mem_gb", "cpus_per_gpu")}
        at["gpus"] = origin.get("gpus", at["nodes"])
        limit = f"profile {self.name!r}"
        if nodes > self.max_nodes:
            problems.append(
                f"{at['nodes']}: nodes={nodes} but {limit} allows at most {self.max_nodes}; "
                f"ask for at most {self.max_nodes}"
            )
        if gpus > self.gpus_per_node * nodes:
            need = -(-gpus // max(1, self.gpus_per_node))
            if not self.gpus_per_node:
                fix = "its nodes have none: set gpus: 0"
            elif need <= self.max_nodes:
                fix = f"set nodes: {need} for gpus: {gpus}, or ask for fewer GPUs"
            else:
                fix = f"ask for at most {self.gpus_per_node * self.max_nodes} GPUs in all"
            problems.append(
                f"{at['gpus']}: gpus={gpus} on {nodes} node(s) but {limit} has "
                f"{self.gpus_per_node} GPUs per node; {fix}"
            )
        if "time" in resources:
            try:
                if parse_time(resources["time"]) > self.time_limit_min:
                    problems.append(
                        f"{at['time']}: time={resources['time']} exceeds {limit} limit "
                        f"{self.time_limit}; ask for at most {self.time_limit} (long cells "
                        "checkpoint and requeue)"
                    )
            except ValueError as e:
                problems.append(f"{at['time']}: {e}")
        if resources.get("mem_gb", 0) > self.mem_gb_per_node:
            problems.append(
                f"{at['mem_gb']}: mem_gb={resources['mem_gb']} but {limit} nodes have "
                f"{self.mem_gb_per_node}; ask for at most {self.mem_gb_per_node:g}"
            )
        per_node = max(1, gpus // max(1, nodes))
        cpus = resources.get("cpus_per_gpu", 0) * per_node
        if cpus > self.cpus_per_node:
            problems.append(
                f"{at['cpus_per_gpu']}: {cpus} CPUs per node (cpus_per_gpu="
                f"{resources['cpus_per_gpu']} x {per_node} GPUs) but {limit} nodes have "
                f"{self.cpus_per_node}; ask for cpus_per_gpu <= {self.cpus_per_node // per_node}"
            )
        return problems


# Where a profile named without a path is looked for: the working directory's
# slurm/profiles/, then the one beside this package (a source checkout).
PROFILE_DIRS = (Path("slurm/profiles"), Path(__file__).resolve().parents[2] / "slurm" / "profiles")


def known_profiles() -> list[str]:
    """The names ``--profile NAME`` finds."""
    return sorted({p.stem for d in PROFILE_DIRS if d.is_dir() for p in d.glob("*.yaml")})


def find_profile(name_or_path: str | Path) -> Path:
    """A profile's file: the path as given, or for a bare name (``h100x8``) the file of
    that name in :data:`PROFILE_DIRS`; an error listing the known names otherwise."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.parent == Path(".") and path.suffix in ("", ".yaml"):
        for folder in PROFILE_DIRS:
            candidate = folder / f"{path.stem}.yaml"
            if candidate.is_file():
                return candidate
    available = (
        sorted(p.stem for p in path.parent.glob("*.yaml"))
        if path.parent != Path(".") and path.parent.is_dir()
        else known_profiles()
    )
    hint = f"; known profiles: {', '.join(available)}" if available else ""
    raise ValueError(f"cluster profile not found: {name_or_path}{hint}")


def load_profile(name_or_path: str | Path) -> Profile:
    """The profile of a file, or of a name found in :data:`PROFILE_DIRS`, with the
    measured speeds of the ``calibration.csv`` beside it."""
    from .calibration import CALIBRATION_FILE, load_calibration

    path = find_profile(name_or_path)
    raw = yaml_load(path.read_text(), source=str(path)) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the top level must be a mapping of profile keys")
    valid = [f.name for f in fields(Profile) if f.name not in ("name", "calibration")]
    problems = []
    for key in raw:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(valid)}"
            problems.append(f"{path}: unknown key {key!r}{hint}")
    for line in raw.get("setup") or []:
        problems += [f"{path}: setup: {p}" for p in deprecated_env_names(str(line))]
    if problems:
        raise ValueError("\n".join(problems))
    return Profile(
        name=path.stem, **raw, calibration=load_calibration(path.parent / CALIBRATION_FILE)
    )


# NCCL settings PyTorch reads under a TORCH_ name since 2.2; the old names are deprecated
# (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp) and will stop being read.
DEPRECATED_ENV = {
    old: f"TORCH_{old}"
    for old in (
        "NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_BLOCKING_WAIT",
        "NCCL_DESYNC_DEBUG",
        "NCCL_ENABLE_TIMING",
        "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
    )
}


def deprecated_env_names(line: str) -> list[str]:
    """One message per deprecated PyTorch/NCCL variable a shell line sets or reads."""
    found = set(re.findall(r"(?<![A-Za-z0-9_])(NCCL_[A-Z_]+)", line)) & DEPRECATED_ENV.keys()
    return [
        f"{old} is deprecated since PyTorch 2.2; use {DEPRECATED_ENV[old]}" for old in sorted(found)
    ]


SIGNAL_RESOLUTION_S = 60  # `--signal=SIG@N` may come this much earlier than N (sbatch(1))


class SlurmError(ValueError):
    """SLURM refused or cannot take a submission (a ValueError: the CLI prints the message)."""


@dataclass(frozen=True)
class Shape:
    """What one cell asks SLURM for; cells of one shape share a job array."""

    nodes: int
    tasks_per_node: int  # processes per node: one per GPU, or one for CPU-only cells
    gpus_per_node: int
    cpus_per_task: int
    mem_mb: int | None  # per node; None: the cluster's default (DefMemPerCPU/GPU)
    time_min: int

    def describe(self) -> str:
        gpus = f"{self.gpus_per_node} GPU(s)" if self.gpus_per_node else "no GPU"
        mem = f", {self.mem_mb / 1024:g} GB" if self.mem_mb else ""
        return (
            f"{self.nodes} node(s) x {self.tasks_per_node} task(s), {gpus} and "
            f"{self.cpus_per_task} CPU(s) per task{mem}, {self.time_min} min"
        )


def shape_for(
    resources: dict[str, Any],
    profile: Profile,
    *,
    where: str = "resources",
    origin: dict[str, str] | None = None,
) -> Shape:
    """The SLURM request for a cell's resources (``Grid.resources_for``) on ``profile``;
    an error names ``origin[key]`` (where the key was set) or ``where``.

    ``gpus`` is the cell's total over its nodes (default: every GPU of its nodes);
    ``cpus_per_gpu`` is per process, which for CPU-only cells means per cell and node
    (default: the node's CPUs shared among its GPUs; 1 for CPU-only cells, so that a
    laptop-sized cluster runs several cells at once); ``mem_gb`` is per node.
    """
    origin = origin or {}
    nodes = int(resources.get("nodes", 1))
    gpus = int(resources.get("gpus", profile.gpus_per_node * nodes))
    at_gpus = origin.get("gpus", origin.get("nodes", where))
    if nodes < 1 or gpus < 0:
        raise SlurmError(
            f"{at_gpus}: nodes must be at least 1 and gpus at least 0, got {nodes} and {gpus}"
        )
    if gpus % nodes:
        raise SlurmError(f"{at_gpus}: gpus={gpus} does not split evenly over nodes={nodes}")
    gpus_per_node = gpus // nodes
    if "cpus_per_gpu" in resources:
        cpus = int(resources["cpus_per_gpu"])
    elif gpus_per_node:
        cpus = max(1, profile.cpus_per_node // max(1, profile.gpus_per_node))
    else:
        cpus = 1
    time_min = parse_time(resources.get("time", profile.time_limit))
    # SLURM sends --signal up to 60 s earlier than asked: a job shorter than that margin
    # would be signalled as it starts, and requeue itself forever without training.
    if time_min * 60 <= profile.signal_delay_s + SIGNAL_RESOLUTION_S:
        raise SlurmError(
            f"{origin.get('time', where)}: time={time_min} min is too short for profile {profile.name!r}: it signals "
            f"{profile.signal_delay_s} s before the limit and SLURM may signal up to "
            f"{SIGNAL_RESOLUTION_S} s earlier; ask for more than "
            f"{-(-(profile.signal_delay_s + SIGNAL_RESOLUTION_S) // 60)} min"
        )
    mem_gb = resources.get("mem_gb")
    return Shape(
        nodes=nodes,
        tasks_per_node=max(1, gpus_per_node),
        gpus_per_node=gpus_per_node,
        cpus_per_task=cpus,
        mem_mb=None if mem_gb is None else int(float(mem_gb) * 1024),
        time_min=time_min,
    )
