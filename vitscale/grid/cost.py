"""What a grid will cost before it runs: steps, examples, exaFLOPs and GPU-hours per cell.

Pre-training exaFLOPs come from :mod:`vitscale.flops` (paper convention, the x-axis of
Fig. 5). GPU-hours come from the training speed measured on the profile's GPU where there
is one (:mod:`vitscale.grid.calibration`: the model itself, else its family's measured
FLOP/s), else from the profile's assumed sustained FLOP/s per GPU; each cell says which.
They estimate the training steps alone (evaluation and fine-tuning are extra).
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


def cell_cost(cell: Cell, profile: Profile | None) -> CellCost:
    """The cell's cost from its plan: its length (None while unknown) in examples and FLOPs."""
    cfg, n, steps = cell.config, cell.plan.num_examples, cell.plan.total_steps
    if steps is None:
        return CellCost(cell, n, None, None, None, None)
    examples = steps * cfg.train.batch_size
    c = count(cfg.model.name, cfg.data.image_size, head="pretrain", pool=cfg.model.pool)
    exaflops = c.train_flops_per_example * examples / 1e18
    if profile is None:
        return CellCost(cell, n, steps, examples, exaflops, None)
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
    return CellCost(cell, n, steps, examples, exaflops, hours, basis)
