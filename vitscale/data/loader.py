"""The pre-training example stream: which examples every process sees at every step.

Training is a function of the global step, so resuming at step ``s`` must feed exactly the
batches an uninterrupted run would have fed from ``s`` on, on any number of processes.
The stream is therefore computed, not replayed:

- an endless sequence of epochs over the ``n`` examples, epoch ``e`` in the order of
  ``SeededPermutation(n, key(seed, e))`` (a fresh shuffle every epoch, the same everywhere);
- the global batch of step ``s`` is positions ``[s B, (s + 1) B)`` of that sequence
  (``B`` = ``batch_size x num_replicas``), so a batch may straddle two epochs;
- process ``r`` takes the ``r``-th contiguous slice of it: the shards of one step are
  disjoint and together are exactly the global batch (no duplicates, no gaps), and one
  process with gradient accumulation sees the same examples as several processes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ._hash import derive_key
from .batch import collate
from .subsets import SeededPermutation
from .workers import prepare_for_workers, worker_init

__all__ = ["StepBatchSampler", "build_loader"]

_EPOCH_STREAM = 0xE90C


class StepBatchSampler:
    """Index lists for steps ``start_step, start_step + 1, ...`` of one process (endless)."""

    def __init__(
        self,
        num_examples: int,
        *,
        batch_size: int,
        seed: int,
        num_replicas: int = 1,
        rank: int = 0,
        start_step: int = 0,
    ) -> None:
        if num_examples < 1:
            raise ValueError(f"cannot sample batches from an empty dataset (n={num_examples})")
        if batch_size < 1 or num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(
                f"need batch_size >= 1, num_replicas >= 1 and 0 <= rank < num_replicas; got "
                f"batch_size={batch_size}, num_replicas={num_replicas}, rank={rank}"
            )
        self.n = int(num_examples)
        self.batch_size = batch_size
        self.global_batch = batch_size * num_replicas
        self.seed = seed
        self.rank = rank
        self.start_step = start_step
        self._epochs: dict[int, SeededPermutation] = {}

    def _epoch(self, epoch: int) -> SeededPermutation:
        if epoch not in self._epochs:
            if len(self._epochs) > 4:  # a batch touches at most two epochs
                self._epochs.clear()
            self._epochs[epoch] = SeededPermutation(
                self.n, derive_key(_EPOCH_STREAM, self.seed & (2**63 - 1), epoch)
            )
        return self._epochs[epoch]

    def indices(self, step: int) -> list[int]:
        """This process's dataset indices at ``step``."""
        start = step * self.global_batch + self.rank * self.batch_size
        positions = np.arange(start, start + self.batch_size, dtype=np.int64)
        epochs, offsets = np.divmod(positions, self.n)
        out = np.empty_like(positions)
        for epoch in np.unique(epochs):
            sel = epochs == epoch
            out[sel] = self._epoch(int(epoch))(offsets[sel])
        return out.tolist()

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start_step
        while True:
            yield self.indices(step)
            step += 1


def build_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    seed: int,
    num_replicas: int = 1,
    rank: int = 0,
    start_step: int = 0,
    num_workers: int = 0,
) -> DataLoader:
    """An endless loader of this process's ``(images, targets)`` batches from ``start_step``.

    ``batch_size`` is per process. With ``num_workers > 0`` batches are rendered or decoded
    in worker processes; real datasets' random augmentation then draws from the workers'
    seeds, so only ``num_workers=0`` resumes bit-exactly with augmentation on (the
    synthetic set has no augmentation and resumes exactly either way). A sharded set
    (``shards:``) computes its own stream (:mod:`vitscale.data.shards.dataset`), exact with
    workers and augmentation too. Workers ignore SLURM's signals, which the trainer
    handles (:mod:`vitscale.data.workers`).
    """
    if hasattr(dataset, "stream_loader"):
        return dataset.stream_loader(
            batch_size=batch_size,
            seed=seed,
            num_replicas=num_replicas,
            rank=rank,
            start_step=start_step,
            num_workers=num_workers,
        )
    sampler = StepBatchSampler(
        len(dataset),
        batch_size=batch_size,
        seed=seed,
        num_replicas=num_replicas,
        rank=rank,
        start_step=start_step,
    )
    if num_workers > 0:
        prepare_for_workers(dataset)
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=num_workers,
        worker_init_fn=worker_init,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=num_workers > 0,
        # Its own generator: starting an iterator would otherwise draw from the global
        # torch RNG (the workers' base seed) and shift dropout after a resume.
        generator=torch.Generator().manual_seed(seed),
    )
