"""Sharded sets as torch datasets, and their exact, resumable pre-training stream.

:class:`ShardSet` is a :class:`~vitscale.data.shards.index.Selection` as a map-style dataset
(example ``i`` = the ``i``-th selected example): evaluation sets, previews, and the base of
the stream. Like the map-style stream (:mod:`vitscale.data.loader`), the pre-training
stream is computed from the step, never replayed, so a run preempted mid-epoch resumes
with exactly the examples an uninterrupted run would have seen:

- an endless sequence of epochs over the ``N`` selected examples; stream position ``p`` is
  an example of epoch ``p // N``;
- epoch ``e`` puts the selection's shards in the order of ``SeededPermutation(k,
  key(seed, e))`` and cuts that order into windows of ``window`` consecutive shards
  (``data.shuffle_shards``); the examples of one window come in the order of
  ``SeededPermutation(window examples, key(seed, e, w))``. The window is the shuffle:
  examples of ``window`` shards interleaved at random (label autocorrelation measured in
  ``benchmarks/shuffle_quality.py``), while a batch only reads from the shards of one or
  two windows (locality on a cluster file system);
- the global batch of step ``s`` is positions ``[s B, (s + 1) B)``; process ``r`` reads the
  ``r``-th slice: every process reads different examples, together exactly the global
  batch, the same batches for any number of processes;
- the augmentation of the example at position ``p`` (Inception crop + flip) draws from
  torch's CPU generator seeded with ``key(seed, p)``, forked so the training process's
  own streams (dropout) are untouched: a batch is bit-identical for any number of
  DataLoader workers, processes and restarts.

A bad example (no image, an image that does not decode, no label, a label outside the class
list) is an error naming the shard and the key; with ``data.skip_bad_samples: N`` it is
replaced by the example at the next stream position (the same replacement on a resumed
run) and reported with the batch (:class:`ShardBatch`), and the training loop stops once
more than ``N`` were skipped and records the count in ``result.json``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from .._hash import derive_key
from ..batch import Batch
from ..registry import DatasetFormatError, DatasetNotFoundError
from ..subsets import SeededPermutation, SubsetSpec
from ..transforms import eval_transform, to_signed_float, train_transform
from ..workers import worker_init
from .index import (
    Selection,
    ShardIndex,
    check_shards,
    load_index,
    parse_location,
    select,
    split_shards,
)
from .read import Labels, SampleError, ShardReader, decode, image_of, labels_of

__all__ = [
    "DEFAULT_WINDOW",
    "ShardSet",
    "EpochOrder",
    "ShardStream",
    "ShardBatch",
    "ShardLoader",
    "load_shards",
]

DEFAULT_WINDOW = 16  # shards shuffled together (data.shuffle_shards unset)
# A worker's batch taking longer than this is an error, not a hang (a stuck file system).
BATCH_TIMEOUT_S = 600
_EPOCH, _WINDOW, _AUGMENT = 0x5A4D_0E0C, 0x5A4D_0B1D, 0x5A4D_A0C0
_SKIP_HINT = (
    "set data.skip_bad_samples: N to replace up to N bad examples by the next ones "
    "(counted in result.json), or repair the shard"
)


def _seed63(seed: int) -> int:
    return int(seed) & (2**63 - 1)


class ShardSet(Dataset):
    """The selected examples of a sharded set: ``(image, target)`` pairs.

    Images are float32 ``(3, S, S)`` in [-1, 1] through the paper's transforms (Inception
    crop + flip when ``augment``, else resize + centre crop); a set whose index says
    ``"crop": false`` (the synthetic set, already framed) is only resized. Targets are
    int64 classes, or multi-hot float vectors for multi-label sets.
    """

    def __init__(
        self,
        *,
        name: str,
        index: ShardIndex,
        selection: Selection,
        image_size: int,
        augment: bool,
        window: int = DEFAULT_WINDOW,
        skip_bad_samples: int = 0,
    ) -> None:
        if window < 1:
            raise ValueError(f"data.shuffle_shards must be >= 1, got {window}")
        if skip_bad_samples < 0:
            raise ValueError(f"data.skip_bad_samples must be >= 0, got {skip_bad_samples}")
        self.name = name
        self.classes = list(index.classes)
        self.multilabel = index.multilabel
        self.selection = selection.record
        self.window = window
        self.skip_bad_samples = skip_bad_samples
        self.augment = augment
        self.takes = selection.takes
        self._paths = [index.path(s) for s in selection.shards]
        self._nsamples = [s.nsamples for s in selection.shards]
        self._starts = np.concatenate([[0], np.cumsum(self.takes)])
        self._labels = Labels.of(index.classes)
        # Open shards kept per process: the one or two windows a batch reads from, and
        # within the file descriptors a process has (two per open shard).
        self._reader = ShardReader(name, capacity=min(max(64, 2 * window), 400))
        if not index.crop:
            self.transform = v2.Compose(
                [v2.Resize((image_size, image_size), antialias=True), to_signed_float()]
            )
        else:
            self.transform = train_transform(image_size) if augment else eval_transform(image_size)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _locate(self, i: int) -> tuple[int, int]:
        if not 0 <= i < len(self):
            raise IndexError(f"example {i} out of range for {len(self)} examples")
        piece = int(np.searchsorted(self._starts, i, side="right")) - 1
        return piece, i - int(self._starts[piece])

    def where(self, i: int) -> tuple[Path, int]:
        """``(shard path, index in the shard)`` of example ``i``."""
        piece, inner = self._locate(i)
        return self._paths[piece], inner

    def _target(self, labels: list[int]) -> Tensor:
        if not self.multilabel:
            return torch.tensor(labels[0], dtype=torch.int64)
        target = torch.zeros(self.num_classes)
        target[labels] = 1.0
        return target

    def load(self, i: int, *, seed: int | None = None) -> tuple[Tensor, Tensor]:
        """Example ``i``; with ``seed``, its augmentation draws from a generator seeded so."""
        piece, inner = self._locate(i)
        path = self._paths[piece]
        sample = self._reader.sample(path, self._nsamples[piece], inner)
        try:
            found = image_of(sample)
            if found is None:
                raise ValueError("no image (.jpg, .jpeg, .png or .webp)")
            labels = labels_of(sample, self._labels)
            image = decode(found[1])
        except ValueError as e:
            raise SampleError(self.name, path, sample["__key__"], str(e)) from None
        if seed is None:
            return self.transform(image), self._target(labels)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            return self.transform(image), self._target(labels)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.load(int(i))

    def __getitems__(self, indices: list[int]) -> Batch:
        pairs = [self.load(int(i)) for i in indices]
        return Batch(torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs]))

    def targets_of(self, indices: np.ndarray) -> np.ndarray:
        """Classes (first label) of examples, reading only their label members."""
        out = np.empty(len(np.atleast_1d(indices)), dtype=np.int64)
        for row, i in enumerate(np.atleast_1d(indices).tolist()):
            piece, inner = self._locate(int(i))
            path = self._paths[piece]
            sample = self._reader.sample(path, self._nsamples[piece], inner, only=(".cls", ".json"))
            try:
                out[row] = labels_of(sample, self._labels)[0]
            except ValueError as e:
                raise SampleError(self.name, path, sample["__key__"], str(e)) from None
        return out

    def stream_loader(
        self,
        *,
        batch_size: int,
        seed: int,
        num_replicas: int = 1,
        rank: int = 0,
        start_step: int = 0,
        num_workers: int = 0,
    ) -> ShardLoader:
        """This process's endless batches of the pre-training stream from ``start_step``
        (what :func:`vitscale.data.build_loader` returns for a sharded set)."""
        sampler = _Positions(
            batch_size=batch_size, num_replicas=num_replicas, rank=rank, start_step=start_step
        )
        return ShardLoader(
            ShardStream(self, seed=seed),
            batch_sampler=sampler,
            collate_fn=_as_is,
            num_workers=num_workers,
            worker_init_fn=worker_init,  # SLURM's signals are the trainer's to handle
            timeout=BATCH_TIMEOUT_S if num_workers else 0,
            pin_memory=torch.cuda.is_available(),
            # One iterator serves the whole run (the stream is endless), so workers need not
            # persist; not persisting lets a reading error stop them at once.
            # Its own generator: starting an iterator would otherwise draw from the global
            # torch RNG (the workers' base seed) and shift dropout after a resume.
            generator=torch.Generator().manual_seed(seed),
        )

    def __repr__(self) -> str:
        return f"ShardSet({self.name!r}, n={len(self)}, shards={len(self._paths)})"


class EpochOrder:
    """Stream position -> example of the selection (module docstring), vectorised."""

    def __init__(self, takes: np.ndarray, *, seed: int, window: int) -> None:
        self.takes = np.asarray(takes, dtype=np.int64)
        self.k, self.n = len(self.takes), int(self.takes.sum())
        if self.n < 1:
            raise ValueError("cannot stream an empty selection")
        self.first = np.concatenate([[0], np.cumsum(self.takes)[:-1]])
        self.seed, self.window = _seed63(seed), int(window)
        self._epochs: dict[int, tuple[np.ndarray, ...]] = {}

    def _epoch(self, epoch: int) -> tuple[np.ndarray, ...]:
        if epoch not in self._epochs:
            if len(self._epochs) > 4:  # a batch touches at most two epochs
                self._epochs.clear()
            sigma = SeededPermutation(self.k, derive_key(_EPOCH, self.seed, epoch))(
                np.arange(self.k)
            )
            sizes = self.takes[sigma]
            ends = np.cumsum(sizes)
            starts = np.concatenate([[0], ends])
            cuts = np.arange(0, self.k, self.window)
            w_start = starts[cuts]
            w_size = np.diff(np.concatenate([w_start, [self.n]]))
            self._epochs[epoch] = (sigma, sizes, ends, w_start, w_size)
        return self._epochs[epoch]

    def window_of(self, positions: np.ndarray) -> np.ndarray:
        """``(epoch, window)`` of each position, as one int per position (for tests)."""
        pos = np.asarray(positions, dtype=np.int64)
        epochs, q = np.divmod(pos, self.n)
        out = np.empty_like(pos)
        for e in np.unique(epochs):
            sel = epochs == e
            w_start = self._epoch(int(e))[3]
            out[sel] = e * self.k + np.searchsorted(w_start, q[sel], side="right") - 1
        return out

    def __call__(self, positions: np.ndarray | list[int]) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        epochs, q = np.divmod(pos, self.n)
        out = np.empty_like(pos)
        for e in np.unique(epochs):
            sel = epochs == e
            sigma, sizes, ends, w_start, w_size = self._epoch(int(e))
            qe = q[sel]
            w = np.searchsorted(w_start, qe, side="right") - 1
            shuffled = np.empty_like(qe)
            for wi in np.unique(w):
                at = w == wi
                perm = SeededPermutation(
                    int(w_size[wi]), derive_key(_WINDOW, self.seed, int(e), int(wi))
                )
                shuffled[at] = w_start[wi] + perm(qe[at] - w_start[wi])
            rank = np.searchsorted(ends, shuffled, side="right")
            piece = sigma[rank]
            out[sel] = self.first[piece] + shuffled - (ends[rank] - sizes[rank])
        return out


class ShardBatch:
    """A batch of the stream: ``images, targets = batch``, plus the examples it skipped.

    Not a tuple, so torch's ``pin_memory`` calls :meth:`pin_memory` and keeps ``skipped``.
    A batch whose reading failed carries the error instead; :class:`ShardLoader` raises
    it in the training process with its own type and message (a DataLoader worker's
    exception would come back wrapped in the worker's traceback).
    """

    __slots__ = ("images", "targets", "skipped", "error")

    def __init__(self, images, targets, skipped=(), error=None) -> None:
        self.images, self.targets, self.skipped, self.error = images, targets, tuple(skipped), error

    def __iter__(self) -> Iterator[Tensor]:
        yield self.images
        yield self.targets

    def pin_memory(self) -> ShardBatch:
        if self.error is not None:
            return self
        return ShardBatch(self.images.pin_memory(), self.targets.pin_memory(), self.skipped)

    def raise_error(self) -> None:
        kind, message = self.error
        raise (DatasetNotFoundError if kind == "missing" else DatasetFormatError)(message)


class ShardStream(Dataset):
    """Stream positions -> examples: what the DataLoader (and its workers) read."""

    def __init__(self, base: ShardSet, *, seed: int) -> None:
        self.base = base
        self.seed = _seed63(seed)
        self.order = EpochOrder(base.takes, seed=seed, window=base.window)

    def __len__(self) -> int:
        return 2**62  # endless

    def _one(self, position: int, example: int, skipped: list[str]) -> tuple[Tensor, Tensor]:
        """The example at ``position``, or the next good one (counted in ``skipped``)."""
        limit = self.base.skip_bad_samples
        while True:
            try:
                return self.base.load(example, seed=derive_key(_AUGMENT, self.seed, position))
            except SampleError as e:
                if not limit:
                    raise DatasetFormatError(f"{e}; {_SKIP_HINT}") from None
                skipped.append(f"{e.shard}: key {e.key!r}: {e.reason}")
                if len(skipped) > limit:
                    raise DatasetFormatError(
                        f"{self.base.name}: more than data.skip_bad_samples={limit} bad "
                        f"examples in one batch; last: {e}"
                    ) from None
                position += 1
                example = int(self.order([position])[0])

    def __getitems__(self, positions: list[int]) -> ShardBatch:
        skipped: list[str] = []
        try:
            examples = self.order(positions).tolist()
            pairs = [
                self._one(int(p), e, skipped) for p, e in zip(positions, examples, strict=True)
            ]
        except DatasetNotFoundError as e:
            return ShardBatch(None, None, skipped, ("missing", str(e)))
        except DatasetFormatError as e:
            return ShardBatch(None, None, skipped, ("format", str(e)))
        images = torch.stack([p[0] for p in pairs])
        return ShardBatch(images, torch.stack([p[1] for p in pairs]), skipped)

    def __getitem__(self, position: int):
        return self.__getitems__([position])


class _Positions:
    """Stream positions of this process's slice of every global batch, from ``start_step``."""

    def __init__(self, *, batch_size: int, num_replicas: int, rank: int, start_step: int) -> None:
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
        step = self.start_step
        while True:
            yield self.positions(step)
            step += 1


def _as_is(batch: Any) -> Any:
    return batch


class ShardLoader(DataLoader):
    """A DataLoader of :class:`ShardBatch` es that raises a batch's reading error and
    reports its skipped examples (on stderr, as the batch is taken)."""

    def __iter__(self) -> Iterator[ShardBatch]:
        batches = super().__iter__()
        while True:
            batch = next(batches)  # endless
            if batch.error is not None:
                del batches  # stop the workers now, not when the traceback is freed
                batch.raise_error()
            for text in batch.skipped:
                print(f"warning: replaced a bad example: {text}", file=sys.stderr)
            yield batch


def load_shards(
    name: str,
    split: str,
    *,
    image_size: int,
    subset: SubsetSpec = None,
    seed: int = 0,
    augment: bool | None = None,
    class_balanced: bool = False,
    shuffle_shards: int | None = None,
    skip_bad_samples: int = 0,
) -> ShardSet:
    """``build_dataset`` for ``shards:`` names: index, split, subset, checks, dataset."""
    folder, pattern = parse_location(name)
    if class_balanced:
        raise ValueError(
            f"{name}: class-balanced subsets need every example's label up front; a sharded "
            "subset is whole shards in a seeded order (write shards in random order, as "
            "`vitscale data shard` does, and they are balanced to within sampling noise)"
        )
    index = load_index(name, folder)
    shards = split_shards(name, index, split, pattern)
    selection = select(
        index,
        shards,
        split=split,
        subset=subset,
        seed=seed,
        pattern=pattern if split == "train" else None,
    )
    check_shards(name, index, selection.shards)
    if augment and not index.crop:
        raise ValueError(
            f'{name}: its images are framed (index: "crop": false, e.g. the synthetic set) '
            "and take no augmentation; leave augment unset"
        )
    if augment is None:
        augment = index.crop and split == "train"
    return ShardSet(
        name=name,
        index=index,
        selection=selection,
        image_size=image_size,
        augment=augment,
        window=DEFAULT_WINDOW if shuffle_shards is None else shuffle_shards,
        skip_bad_samples=skip_bad_samples,
    )
