"""Run a frozen model over a dataset, sharded over the processes, gathered on every rank.

Each process takes every ``world``-th index, pads its shard to the common length, and
the shards are gathered and put back in index order, so every rank ends with the same
``(N, ...)`` outputs as a single process would compute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from einops import rearrange
from torch.utils.data import BatchSampler, DataLoader, Dataset

from ..data import collate


@torch.no_grad()
def run_model(
    fn: Callable[[torch.Tensor], torch.Tensor],
    dataset: Dataset,
    indices: Sequence[int],
    *,
    batch_size: int,
    accelerator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fn(images), targets)`` for ``dataset[i]`` over ``indices``, in order, on the CPU.

    Targets come back as the dataset gives them: class indices, or multi-hot vectors for
    multi-label sets (which upstream precision@1 needs)."""
    indices = list(indices)
    if not indices:
        raise ValueError("no examples to evaluate")
    world, rank = accelerator.num_processes, accelerator.process_index
    per_rank = -(-len(indices) // world)
    padded = indices + indices[-1:] * (per_rank * world - len(indices))
    shard = padded[rank::world]
    loader = DataLoader(
        dataset,
        batch_sampler=BatchSampler(shard, batch_size, drop_last=False),
        collate_fn=collate,
        generator=torch.Generator(),  # leave the training RNG streams untouched
    )
    outputs, targets = [], []
    for images, target in loader:
        with accelerator.autocast():
            outputs.append(fn(images.to(accelerator.device)).float())
        targets.append(target.to(accelerator.device))
    return _in_order(torch.cat(outputs), accelerator, len(indices)), _in_order(
        torch.cat(targets), accelerator, len(indices)
    )


def _in_order(local: torch.Tensor, accelerator, n: int) -> torch.Tensor:
    """Gather every rank's shard (rank r holds examples r, r + world, ...) in index order."""
    world = accelerator.num_processes
    if world > 1:
        gathered = accelerator.gather(local)  # (world * per_rank, ...) in rank order
        local = rearrange(gathered, "(rank i) ... -> (i rank) ...", rank=world)
    return local[:n].cpu()


def labels_of(dataset: Dataset, indices: Sequence[int]) -> torch.Tensor:
    """(Primary) classes of ``indices`` without decoding images (``dataset.targets_of``)."""
    return torch.as_tensor(dataset.targets_of(np.asarray(list(indices), dtype=np.int64)))
