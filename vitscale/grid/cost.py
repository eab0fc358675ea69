"""What a grid will cost before it runs: steps, examples, exaFLOPs, GPU-hours, node-hours
and time-limit slices per cell.

Pre-training exaFLOPs come from :mod:`vitscale.flops` (paper convention, the x-axis of
Fig. 5); fine-tuning exaFLOPs count every fine-tune the cell runs (each set's
learning-rate sweep and retrain, :func:`vitscale.data.registry.finetune_sweep`): steps x
batch x training FLOPs per image at the fine-tuning resolution. GPU-hours are both at the
FLOP/s the cell's pre-training reaches on the profile's GPU (:mod:`vitscale.grid.calibration`:
measured on it, from its family's measurements, estimated from another GPU's by their
peaks, or the profile's assumed FLOP/s; each cell says which). Few-shot and upstream
evaluation are not counted. On a cluster, a cell's wall-clock hours are its GPU-hours over
its GPUs (perfect scaling), its node-hours those times its nodes, and its slices the jobs
it runs as, one per time limit (it checkpoints and requeues). A cell the grid gives no
``gpus`` or no ``time`` asks for the least its estimate allows (:func:`size_requests`).

A branch (docs/schedules.md) embodies its whole run's compute (Fig. 5's x) but spends only
its cooldown's: the steps before it are its trunk's, trained once for every branch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..config.rules import launch_problems
from ..data.registry import finetune_sweep
from ..flops import count
from .calibration import ASSUMED, images_per_s
from .placement import num_classes
from .profile import Profile, parse_time
from .spec import Cell, Grid


@dataclass(frozen=True)
class CellCost:
    cell: Cell
    num_examples: int | None  # pre-training subset size, when known without the data
    steps: int | None
    examples_seen: int | None
    exaflops: float | None  # pre-training
    finetune_exaflops: float | None
    gpu_hours: float | None  # pre-training and fine-tuning
    basis: str = ASSUMED  # of gpu_hours: vitscale.grid.calibration.BASES
    measured_on: str | None = None  # the GPU whose measurements gpu_hours come from
    node_hours: float | None = None  # on a cluster profile
    slices: int | None = None  # jobs of one time limit each, one after another
    shared: float = 0.0  # the part of its steps its trunk trains (a branch's stable phase)

    @property
    def spent_exaflops(self) -> float | None:
        """Pre-training this cell trains itself (a branch: its cooldown)."""
        return None if self.exaflops is None else self.exaflops * (1 - self.shared)

    @property
    def spent_gpu_hours(self) -> float | None:
        """GPU-hours less its trunk's share of the pre-training (fine-tunes are its own)."""
        if self.gpu_hours is None or not self.exaflops:
            return self.gpu_hours
        pretraining = self.exaflops / (self.exaflops + (self.finetune_exaflops or 0))
        return self.gpu_hours * (1 - self.shared * pretraining)


def finetune_exaflops(cell: Cell) -> float:
    """Every fine-tune of the cell: steps x batch x training FLOPs per image, per set."""
    cfg = cell.config
    ft = cfg.eval.finetune
    size = ft.image_size or cfg.data.image_size
    total = 0.0
    for dataset in ft.datasets:
        steps, _, fine_tunes = finetune_sweep(dataset, steps=ft.steps, lrs=ft.lrs)
        c = count(
            cfg.model.name,
            size,
            num_classes=num_classes(cell, dataset),
            head="finetune",
            pool=cfg.model.pool,
        )
        total += fine_tunes * steps * ft.batch_size * c.train_flops_per_example
    return total / 1e18


def cell_cost(
    cell: Cell, profile: Profile | None, *, resources: dict[str, Any] | None = None
) -> CellCost:
    """The cell's cost from its plan (None while its length is unknown); with
    ``resources`` (the grid's for this cell) also its node-hours and slices on ``profile``."""
    cfg, n, steps = cell.config, cell.plan.num_examples, cell.plan.total_steps
    if steps is None:
        return CellCost(cell, n, None, None, None, None, None)
    examples = steps * cfg.train.batch_size
    c = count(
        cfg.model.name,
        cfg.data.image_size,
        num_classes=num_classes(cell, cfg.data.dataset),
        head="pretrain",
        pool=cfg.model.pool,
    )
    exaflops = c.train_flops_per_example * examples / 1e18
    ft = finetune_exaflops(cell)
    shared = (cfg.branch.step or 0) / steps if steps else 0.0
    if profile is None:
        return CellCost(cell, n, steps, examples, exaflops, ft, None, shared=shared)
    rate, basis, gpu = images_per_s(
        profile.calibration,
        profile.gpu_type,
        model=cfg.model.name,
        image_size=cfg.data.image_size,
        precision=cfg.train.precision,
        compile=bool(cfg.train.compile),
    )
    flops_per_s = rate * c.train_flops_per_example if rate else profile.sustained_tflops * 1e12
    hours = (exaflops + ft) * 1e18 / flops_per_s / 3600
    node_hours = slices = None
    if resources is not None:
        nodes = int(resources.get("nodes", 1))
        gpus = int(resources.get("gpus", profile.gpus_per_node * nodes))
        wall = hours / max(1, gpus)
        node_hours = wall * nodes
        try:
            limit = min(
                parse_time(resources.get("time", profile.time_limit)), profile.time_limit_min
            )
        except ValueError:  # reported by the grid's resource checks
            limit = profile.time_limit_min
        slices = max(1, math.ceil(wall * 60 / limit))
    return CellCost(
        cell, n, steps, examples, exaflops, ft, hours, basis, gpu, node_hours, slices, shared
    )


# A sized request's time: the estimate times this, plus the start (imports, data, the
# checkpoint it resumes from) and the profile's signal delay (the checkpoint before the
# kill). An estimate that is short costs a requeue, not the run: the cell resumes.
SAFETY = 1.5
START_MIN = 15


def size_requests(grid: Grid, profile: Profile) -> dict[str, dict[str, Any]]:
    """``{cell id: {"gpus": g, "time": minutes}}`` for the cells whose grid ``resources``
    give no ``gpus`` or no ``time``: the fewest GPUs of its nodes (a launch the cell's
    batches split over) that finish it within one time limit at :data:`SAFETY` x its
    GPU-hour estimate, and that time; none where the estimate is only assumed (no speed
    measured on any GPU: the whole node for the limit, as the dry-run says) or where no
    count of GPUs finishes it in one limit (every GPU of its nodes, slices)."""
    sized: dict[str, dict[str, Any]] = {}
    for cell in grid.cells:
        given = grid.resources_for(cell)
        if {"gpus", "time"} <= set(given) or not profile.gpus_per_node:
            continue
        cost = cell_cost(cell, profile, resources=given)
        if cost.gpu_hours is None or cost.basis == ASSUMED:
            continue
        nodes = int(given.get("nodes", 1))
        most = int(given.get("gpus", profile.gpus_per_node * nodes))
        counts = [most] if "gpus" in given else [g for g in range(nodes, most + 1) if most % g == 0]
        limit = min(parse_time(given.get("time", profile.time_limit)), profile.time_limit_min)
        for gpus in counts:
            minutes = math.ceil(
                cost.gpu_hours * SAFETY * 60 / gpus + START_MIN + profile.signal_delay_s / 60
            )
            if gpus % nodes == 0 and minutes <= limit and not launch_problems(cell.config, gpus):
                sized[cell.id] = {"gpus": gpus} | ({} if "time" in given else {"time": minutes})
                break
    return sized
