"""What a grid will cost before it runs: steps, examples, exaFLOPs and GPU-hours per cell.

Pre-training exaFLOPs come from :mod:`vitscale.flops` (paper convention, the x-axis of
Fig. 5). GPU-hours come from the training speed measured on the profile's GPU where there
is one (:mod:`vitscale.grid.calibration`: the model itself, else its family's measured
FLOP/s), else from the profile's assumed sustained FLOP/s per GPU; each cell says which.
They estimate the training steps alone (evaluation and fine-tuning are extra).

A branch (docs/schedules.md) embodies its whole run's compute (Fig. 5's x) but spends only
its cooldown's: the steps before it are its trunk's, trained once for every branch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..flops import count
from .calibration import ASSUMED, images_per_s
from .profile import Profile
from .spec import Cell


@dataclass(frozen=True)
class CellCost:
    cell: Cell
    num_examples: int | None  # pre-training subset size, when known without the data
    steps: int | None
    examples_seen: int | None
    exaflops: float | None
    gpu_hours: float | None
    basis: str = ASSUMED  # of gpu_hours: "measured", "family" or "assumed"
    shared: float = 0.0  # the part of its steps its trunk trains (a branch's stable phase)

    @property
    def spent_exaflops(self) -> float | None:
        return None if self.exaflops is None else self.exaflops * (1 - self.shared)

    @property
    def spent_gpu_hours(self) -> float | None:
        return None if self.gpu_hours is None else self.gpu_hours * (1 - self.shared)


def cell_cost(cell: Cell, profile: Profile | None) -> CellCost:
    """The cell's cost from its plan: its length (None while unknown) in examples and FLOPs."""
    cfg, n, steps = cell.config, cell.plan.num_examples, cell.plan.total_steps
    if steps is None:
        return CellCost(cell, n, None, None, None, None)
    examples = steps * cfg.train.batch_size
    c = count(cfg.model.name, cfg.data.image_size, head="pretrain", pool=cfg.model.pool)
    exaflops = c.train_flops_per_example * examples / 1e18
    shared = (cfg.branch.step or 0) / steps if steps else 0.0
    if profile is None:
        return CellCost(cell, n, steps, examples, exaflops, None, shared=shared)
    rate, basis = images_per_s(
        profile.calibration,
        profile.gpu_type,
        model=cfg.model.name,
        image_size=cfg.data.image_size,
        precision=cfg.train.precision,
        compile=bool(cfg.train.compile),
    )
    if rate is not None:
        hours = examples / rate / 3600
    else:
        hours = exaflops * 1e18 / (profile.sustained_tflops * 1e12) / 3600
    return CellCost(cell, n, steps, examples, exaflops, hours, basis, shared)
