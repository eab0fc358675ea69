"""Place every cell of a grid on a cluster profile's GPUs before anything is submitted.

For each cell: its processes (one per GPU of its ``resources``), the peak memory per GPU
of a pre-training step and of a fine-tuning step (:mod:`vitscale.memory`), the
micro-batches (the grid's, or the largest that fit the profile's ``gpu_mem_gb`` when it
leaves them unset) and, for a cell that fits at no micro-batch, one message naming it.
``vitscale grid --dry-run --profile P`` prints this; submission writes the chosen
micro-batches into each cell's config (operational keys: the cell ids do not change) and
refuses cells that cannot fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import memory
from ..data.shards import decode_on_device
from ..flops import count
from .profile import Profile
from .spec import Cell, Grid

# Classes of a folder set its plan did not read (a grid planned away from its data); the
# head and loss it sizes are a small part of the step.
ASSUMED_CLASSES = 1000


@dataclass(frozen=True)
class Placement:
    cell: Cell
    processes: int
    device: str  # "cuda" on a GPU profile, "cpu" otherwise
    precision: str
    pretrain: memory.MemoryEstimate  # at ``micro_batch`` (at 1 when nothing fits)
    micro_batch: int | None  # None: fits at no micro-batch (or no pre-training steps)
    per_process_batch: int
    finetune: memory.MemoryEstimate | None  # the hungriest fine-tuning set, if any
    finetune_micro_batch: int | None
    finetune_per_process_batch: int | None
    gpu_bytes: float | None  # the profile's GPU memory; None: not given (nothing chosen)
    problems: tuple[str, ...]

    @property
    def memory_gib(self) -> float:
        trains = self.cell.config.train.steps != 0
        peak = max(
            self.pretrain.total if trains else 0, self.finetune.total if self.finetune else 0
        )
        return peak / memory.GiB


def num_classes(cell: Cell, dataset: str) -> int:
    """Classes of ``dataset`` as ``cell``'s run will find them (:data:`ASSUMED_CLASSES`
    for a folder set its plan did not read)."""
    return cell.plan.num_classes(dataset) or ASSUMED_CLASSES


def place_cell(cell: Cell, resources: dict, profile: Profile, *, where: str) -> Placement:
    cfg = cell.config
    nodes = int(resources.get("nodes", 1))
    gpus = int(resources.get("gpus", profile.gpus_per_node * nodes))
    device = "cuda" if gpus else "cpu"
    processes = max(1, gpus) if gpus else nodes
    precision = cfg.train.precision
    if precision == "auto":  # bf16 on every GPU a profile would name; a CPU's is unknown
        precision = "bf16" if device == "cuda" else "fp32"
    budget = profile.gpu_mem_gb * memory.GiB if device == "cuda" and profile.gpu_mem_gb else None
    gpu = (profile.gpu_type or "") if device == "cuda" else None  # a GPU, maybe unnamed
    name, size = cfg.model.name, cfg.data.image_size
    label = f"{where}: cell {cell.id} ({name})"
    problems: list[str] = []

    common = dict(
        name=name, precision=precision, device=device, processes=processes, pool=cfg.model.pool
    )
    per_process = max(1, cfg.train.batch_size // processes)
    pre = dict(
        image_size=size,
        num_classes=num_classes(cell, cfg.data.dataset),
        head="pretrain",
        pre_logits=cfg.model.pre_logits,
        dropout=cfg.model.dropout or 0.0,
        loss=cfg.train.loss or "softmax",
        optimizer="adamw",
        decode_batch=per_process if decode_on_device(cfg.data, gpu=gpu) else 0,
        **common,
    )
    if cfg.train.steps == 0:  # a published checkpoint, evaluated as it is: no pre-training
        micro, estimate = None, memory.estimate(micro_batch=per_process, **pre)
    else:
        micro, estimate = _choose(
            cfg.train.micro_batch_size,
            per_process,
            budget,
            "train.micro_batch_size",
            label,
            problems,
            pre,
        )

    ft = cfg.eval.finetune
    ft_micro = ft_estimate = ft_per_process = None
    if ft.datasets:
        ft_per_process = max(1, ft.batch_size // processes)
        pretrain_params = count(
            name,
            size,
            num_classes=pre["num_classes"],
            head="pretrain",
            pool=cfg.model.pool,
            pre_logits=cfg.model.pre_logits,
        ).params
        choices = []
        for dataset in ft.datasets:
            kw = dict(
                image_size=ft.image_size or size,
                num_classes=num_classes(cell, dataset),
                head="finetune",
                optimizer="sgd",
                kept_params=pretrain_params,
                **common,
            )
            choices.append(
                _choose(
                    ft.micro_batch_size,
                    ft_per_process,
                    budget,
                    "eval.finetune.micro_batch_size",
                    f"{label}: fine-tuning on {dataset} at {kw['image_size']} px",
                    problems,
                    kw,
                )
            )
        fitting = [c for c in choices if c[0] is not None]
        if len(fitting) == len(choices):  # one micro-batch for every set: the smallest chosen
            ft_micro = min(c[0] for c in choices)
        ft_estimate = max((c[1] for c in choices), key=lambda e: e.total)
    return Placement(
        cell=cell,
        processes=processes,
        device=device,
        precision=precision,
        pretrain=estimate,
        micro_batch=micro,
        per_process_batch=per_process,
        finetune=ft_estimate,
        finetune_micro_batch=ft_micro,
        finetune_per_process_batch=ft_per_process,
        gpu_bytes=budget,
        problems=tuple(dict.fromkeys(problems)),
    )


def _choose(given, per_process, budget, key, label, problems, kw):
    """``(micro-batch, its estimate)``: the given one, or the largest that fits ``budget``."""
    if given is not None or budget is None:
        micro = given or per_process
        e = memory.estimate(micro_batch=micro, **kw)
        if budget is not None and not memory.fits(e, budget):
            problems.append(
                f"{label}: needs {e.total / memory.GiB:.1f} GiB per GPU at {key}={micro}, "
                f"more than the {memory.usable_bytes(budget) / memory.GiB:.1f} GiB usable of a "
                f"{budget / memory.GiB:g} GiB GPU; lower {key} (or leave it unset to have it chosen)"
            )
            return None, e
        return micro, e
    micro, e = memory.fit_micro_batch(per_process, budget, **kw)
    if micro is None:
        problems.append(
            f"{label}: needs {e.total / memory.GiB:.1f} GiB per GPU even at micro-batch 1, "
            f"more than the {memory.usable_bytes(budget) / memory.GiB:.1f} GiB usable of a "
            f"{budget / memory.GiB:g} GiB GPU; give it more GPUs or a smaller model or resolution"
        )
    return micro, e


def place_grid(grid: Grid, profile: Profile) -> list[Placement]:
    return [
        place_cell(
            cell, grid.resources_for(cell), profile, where=f"{grid.path}: block {cell.block!r}"
        )
        for cell in grid.cells
    ]


def apply_placements(fits: list[Placement]) -> None:
    """Write the chosen micro-batches into the cells' configs where the grid left them unset."""
    for f in fits:
        if f.gpu_bytes is None:
            continue
        t, ft = f.cell.config.train, f.cell.config.eval.finetune
        if t.micro_batch_size is None and f.micro_batch is not None:
            t.micro_batch_size = f.micro_batch
        if ft.micro_batch_size is None and f.finetune_micro_batch is not None:
            ft.micro_batch_size = f.finetune_micro_batch
