"""The pre-training example stream: which examples every process sees at every step.

Training is a function of the global step, so resuming at step ``s`` must feed exactly the
batches an uninterrupted run would have fed from ``s`` on, on any number of processes.
The stream is therefore computed, not replayed, the same way for every source:

- an endless sequence of epochs over the ``n`` examples: position ``p`` is offset ``p mod
  n`` of epoch ``p // n``, whose order is a permutation drawn from ``(seed, epoch)``
  (:class:`StreamOrder`): :class:`ShuffledOrder` for map-style sets, a windowed shuffle of
  whole shards for sharded sets (:mod:`vitscale.data.shards.order`);
- the global batch of step ``s`` is positions ``[s B, (s + 1) B)`` of that sequence
  (``B`` = ``batch_size x num_replicas``), so a batch may straddle two epochs;
- process ``r`` takes the ``r``-th contiguous slice of it (:class:`StepPositions`): the
  slices of one step are disjoint and together are exactly the global batch (no duplicates,
  no gaps), and one process with gradient accumulation sees the same examples as several.

Every loader yields :class:`~vitscale.data.batch.Batch` es; a sharded set reads its
positions itself (:class:`OwnStream`), any other dataset through :class:`ExampleStream`.
"""

from __future__ import annotations

import itertools
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ._hash import derive_key
from .batch import Batch, collate, examples
from .subsets import SeededPermutation
from .workers import prepare_for_workers, worker_init

_EPOCH_STREAM = 0xE90C
# A worker's batch taking longer than this is an error, not a hang (a stuck file system).
BATCH_TIMEOUT_S = 600

Permutation = Callable[[np.ndarray], np.ndarray]  # one epoch's offsets -> examples


def seed63(seed: int) -> int:
    """The seed as the non-negative 63-bit word the stream's keys derive from."""
    return int(seed) & (2**63 - 1)


class StreamOrder(ABC):
    """Stream position -> example (module docstring), vectorised. An epoch's permutation is
    built once and kept while a batch may still need it."""

    def __init__(self, *, num_examples: int) -> None:
        if num_examples < 1:
            raise ValueError(f"cannot sample batches from an empty dataset (n={num_examples})")
        self.n = int(num_examples)
        self._epochs: dict[int, Permutation] = {}

    @abstractmethod
    def permutation(self, epoch: int) -> Permutation:
        """The order of epoch ``epoch``: offsets in the epoch -> examples."""

    def epoch(self, epoch: int) -> Permutation:
        if epoch not in self._epochs:
            if len(self._epochs) > 4:  # a batch touches at most two epochs
                self._epochs.clear()
            self._epochs[epoch] = self.permutation(epoch)
        return self._epochs[epoch]

    def by_epoch(
        self, positions: np.ndarray | list[int], fn: Callable[[int, np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """``fn(epoch, offsets)`` over the positions of each epoch, in position order."""
        positions = np.asarray(positions, dtype=np.int64)
        epochs, offsets = np.divmod(positions, self.n)
        out = np.empty_like(positions)
        for epoch in np.unique(epochs):
            at = epochs == epoch
            out[at] = fn(int(epoch), offsets[at])
        return out

    def __call__(self, positions: np.ndarray | list[int]) -> np.ndarray:
        return self.by_epoch(positions, lambda epoch, offsets: self.epoch(epoch)(offsets))


class ShuffledOrder(StreamOrder):
    """A map-style set's order: epoch ``e`` is ``SeededPermutation(n, key(seed, e))``."""

    def __init__(self, *, num_examples: int, seed: int) -> None:
        super().__init__(num_examples=num_examples)
        self.seed = seed63(seed)

    def permutation(self, epoch: int) -> SeededPermutation:
        return SeededPermutation(self.n, derive_key(_EPOCH_STREAM, self.seed, epoch))


class StepPositions:
    """The DataLoader's batch sampler: this process's positions, step after step, endless."""

    def __init__(
        self, *, batch_size: int, num_replicas: int = 1, rank: int = 0, start_step: int = 0
    ) -> None:
        if batch_size < 1 or num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(
                f"need batch_size >= 1, num_replicas >= 1 and 0 <= rank < num_replicas; got "
                f"batch_size={batch_size}, num_replicas={num_replicas}, rank={rank}"
            )
        self.batch_size, self.global_batch = batch_size, batch_size * num_replicas
        self.rank, self.start_step = rank, start_step

    def positions(self, step: int) -> list[int]:
        start = step * self.global_batch + self.rank * self.batch_size
        return list(range(start, start + self.batch_size))

    def __iter__(self) -> Iterator[list[int]]:
        return map(self.positions, itertools.count(self.start_step))


@dataclass(frozen=True, kw_only=True)
class ReadFailure:
    """A batch that could not be read, returned by a DataLoader worker in its place and
    raised by :class:`StreamLoader` as it was (not wrapped in the worker's traceback)."""

    error: type[ValueError]
    message: str


class PositionStream(Dataset, ABC):
    """Stream positions -> a whole :class:`Batch` (or a :class:`ReadFailure`): what the
    DataLoader and its workers read."""

    order: StreamOrder

    @abstractmethod
    def __getitems__(self, positions: list[int]) -> Batch | ReadFailure: ...


class ExampleStream(PositionStream):
    """A map-style dataset's examples in the :class:`ShuffledOrder`."""

    def __init__(self, *, dataset: Dataset, seed: int) -> None:
        self.base = dataset  # what prepare_for_workers looks through
        self.order = ShuffledOrder(num_examples=len(dataset), seed=seed)

    def __getitems__(self, positions: list[int]) -> Batch:
        return collate(examples(self.base, self.order(positions).tolist()))


class OwnStream(ABC):
    """A dataset that reads its stream positions itself (a sharded set: its own order, seeded
    augmentation, bad examples replaced), not through :class:`ExampleStream`."""

    @abstractmethod
    def stream(self, *, seed: int) -> PositionStream: ...


class StreamLoader(DataLoader):
    """A DataLoader of a :class:`PositionStream`'s batches that raises a batch's reading
    error and reports its replaced examples (on stderr, as the batch is taken: each
    once, not again every epoch)."""

    def __iter__(self) -> Iterator[Batch]:
        batches = super().__iter__()
        said: set[str] = set()
        while True:
            batch = next(batches)  # endless
            if isinstance(batch, ReadFailure):
                del batches  # stop the workers now, not when the traceback is freed
                raise batch.error(batch.message)
            for text in dict.fromkeys(t for t in batch.skipped if t not in said):
                print(f"warning: replaced a bad example: {text}", file=sys.stderr)
                said.add(text)
            yield batch


def _as_is(batch: Any) -> Any:
    return batch


def build_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    seed: int,
    num_replicas: int = 1,
    rank: int = 0,
    start_step: int = 0,
    num_workers: int = 0,
) -> StreamLoader:
    """An endless loader of this process's :class:`Batch` es from ``start_step`` on.

    ``batch_size`` is per process. With ``num_workers > 0`` batches are rendered or decoded
    in worker processes; real map-style datasets' random augmentation then draws from the
    workers' seeds (drawn from ``seed`` and ``rank``), so only ``num_workers=0`` resumes
    bit-exactly with augmentation on (the synthetic set has no augmentation and resumes
    exactly either way; a sharded set seeds each example's augmentation itself and is
    exact with workers too). Workers ignore
    SLURM's signals, which the trainer handles (:mod:`vitscale.data.workers`).
    """
    if isinstance(dataset, OwnStream):
        stream = dataset.stream(seed=seed)
    else:
        stream = ExampleStream(dataset=dataset, seed=seed)
    positions = StepPositions(
        batch_size=batch_size, num_replicas=num_replicas, rank=rank, start_step=start_step
    )
    if num_workers > 0:
        prepare_for_workers(dataset)
    return StreamLoader(
        stream,
        batch_sampler=positions,
        collate_fn=_as_is,  # the stream returns whole batches
        num_workers=num_workers,
        worker_init_fn=worker_init,
        timeout=BATCH_TIMEOUT_S if num_workers else 0,
        pin_memory=torch.cuda.is_available(),
        # One iterator serves the whole run (the stream is endless), so workers need not
        # persist; not persisting lets a reading error stop them at once.
        # Its own generator: starting an iterator would otherwise draw from the global
        # torch RNG (the workers' base seed) and shift dropout after a resume. Seeded per
        # rank, as the trainer's own RNGs are: the workers of two processes augment alike
        # otherwise.
        generator=torch.Generator().manual_seed(seed + rank),
    )
