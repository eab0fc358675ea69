"""Run a frozen model over a fixed evaluation set, sharded over the processes, gathered on
every rank in index order: every rank ends with the outputs one process would compute.

Evaluation sets are evaluated again and again during training (the few-shot pool and test
images, upstream top-1) through the deterministic evaluation view, so :class:`EvalImages`
keeps the decoded batches of the first pass and replays them while they fit in a memory
budget: on the demo, decoding was a tenth of each evaluation's time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from einops import rearrange
from torch.utils.data import BatchSampler, DataLoader, Dataset

from ..data import Batch, SeededPermutation, collate
from ..data._hash import derive_key
from ..data.workers import prepare_for_workers, worker_init

# Decoded evaluation images kept per evaluator (bytes); sets beyond it are decoded each time.
EVAL_CACHE_BYTES = 512 * 2**20
_SAMPLE_STREAM = 0x5A3E


def evaluation_sample(size: int, n: int | None, *, seed: int) -> list[int]:
    """Which examples of a ``size``-example split a capped evaluation reads: ``n`` drawn
    at random with ``seed`` (sorted, for locality), or all of them. Never the first ``n``:
    folders and torchvision sets are sorted by class, and their first ``n`` examples are
    a few classes."""
    if n is None or n >= size:
        return list(range(size))
    perm = SeededPermutation(size, derive_key(_SAMPLE_STREAM, seed & (2**63 - 1)))
    return sorted(perm(np.arange(n)).tolist())


class Budget:
    """Bytes left for kept evaluation images, shared by the sets of one evaluator."""

    def __init__(self, nbytes: int) -> None:
        self.left = nbytes

    def take(self, nbytes: int) -> bool:
        if nbytes > self.left:
            return False
        self.left -= nbytes
        return True

    def give(self, nbytes: int) -> None:
        self.left += nbytes


class EvalImages:
    """This process's share of ``dataset[indices]`` as batches, in a fixed order.

    With a ``budget``, the batches of the first full pass are kept (the evaluation view is
    deterministic, so later passes would decode the same tensors) unless the set does not
    fit, in which case every pass decodes it again. Consumers must not modify the images.
    """

    def __init__(
        self,
        dataset: Dataset,
        indices: Sequence[int],
        *,
        batch_size: int,
        accelerator,
        budget: Budget | None = None,
        num_workers: int = 0,
    ) -> None:
        indices = list(indices)
        if not indices:
            raise ValueError("no examples to evaluate")
        world, rank = accelerator.num_processes, accelerator.process_index
        per_rank = -(-len(indices) // world)
        padded = indices + indices[-1:] * (per_rank * world - len(indices))
        self.dataset, self.indices, self.batch_size = dataset, indices, batch_size
        self.shard = padded[rank::world]
        self.budget = budget
        self.num_workers = num_workers
        self.pin = accelerator.device.type == "cuda"  # what a copy that does not wait needs
        self._kept: list[Batch] | None = None

    def _decode(self) -> Iterator[Batch]:
        # Workers decode in parallel (they live for one pass and ignore SLURM's signals).
        if self.num_workers:
            prepare_for_workers(self.dataset)
        yield from DataLoader(
            self.dataset,
            batch_sampler=BatchSampler(self.shard, self.batch_size, drop_last=False),
            collate_fn=collate,
            num_workers=self.num_workers,
            worker_init_fn=worker_init,
            pin_memory=self.pin,
            generator=torch.Generator(),  # leave the training RNG streams untouched
        )

    def __iter__(self) -> Iterator[Batch]:
        if self._kept is not None:
            yield from self._kept
            return
        kept, held = ([], 0) if self.budget is not None else (None, 0)
        for batch in self._decode():
            if kept is not None:
                size = batch.images.nbytes + batch.targets.nbytes
                if self.budget.take(size):
                    kept.append(batch)
                    held += size
                else:  # does not fit: give the bytes back, decode every time
                    self.budget.give(held)
                    kept, self.budget = None, None
            yield batch
        if kept is not None:
            self._kept = kept


@torch.no_grad()
def apply(
    fn: Callable[[torch.Tensor], torch.Tensor], images: EvalImages, *, accelerator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fn(images), targets)`` over an :class:`EvalImages` set, in index order, on the CPU.

    Targets come back as the dataset gives them: class indices, or multi-hot vectors for
    multi-label sets (which upstream precision@1 needs)."""
    outputs, targets = [], []
    device = accelerator.device
    for batch in images:  # copies queued, not waited for (pinned batches on a GPU)
        with accelerator.autocast():
            outputs.append(fn(batch.images.to(device, non_blocking=True)).float())
        targets.append(batch.targets.to(device, non_blocking=True))
    n = len(images.indices)
    return _in_order(torch.cat(outputs), accelerator, n), _in_order(
        torch.cat(targets), accelerator, n
    )


def run_model(
    fn: Callable[[torch.Tensor], torch.Tensor],
    dataset: Dataset,
    indices: Sequence[int],
    *,
    batch_size: int,
    accelerator,
    num_workers: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`apply` on ``dataset[indices]`` decoded once, for a set evaluated once."""
    images = EvalImages(
        dataset, indices, batch_size=batch_size, accelerator=accelerator, num_workers=num_workers
    )
    return apply(fn, images, accelerator=accelerator)


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
