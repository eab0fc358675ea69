"""What a grid will cost before it runs: steps, examples, exaFLOPs and GPU-hours per cell.

Pre-training exaFLOPs come from :mod:`vitscale.flops` (paper convention, the x-axis of
Fig. 5); GPU-hours divide them by the profile's assumed sustained FLOP/s per GPU, so they
are an estimate of the training steps alone (evaluation and fine-tuning are extra).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config, to_steps
from ..data.subsets import parse_subset
from ..data.subsets import subset_size as subset_size_of
from ..flops import count
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


def subset_size(cfg: Config, dataset_size: int | None) -> int | None:
    """The resolved subset size: a count, a fraction of the dataset, or the whole of it."""
    spec = parse_subset(cfg.data.subset)
    if spec is None or isinstance(spec, float):
        return None if dataset_size is None else subset_size_of(dataset_size, spec)
    return spec


def cell_cost(cell: Cell, profile: Profile | None, *, dataset_size: int | None) -> CellCost:
    cfg = cell.config
    n = subset_size(cfg, dataset_size)
    t = cfg.train
    try:
        steps = to_steps(
            steps=t.steps,
            epochs=t.epochs,
            examples=t.examples,
            batch_size=t.batch_size,
            num_examples=n,
        )
    except ValueError:
        steps = None
    if steps is None:
        return CellCost(cell, n, None, None, None, None)
    examples = steps * t.batch_size
    c = count(cfg.model.name, cfg.data.image_size, head="pretrain", pool=cfg.model.pool)
    exaflops = c.train_flops_per_example * examples / 1e18
    hours = exaflops * 1e18 / (profile.sustained_tflops * 1e12) / 3600 if profile else None
    return CellCost(cell, n, steps, examples, exaflops, hours)
