"""Sharded sets as torch datasets, and the stream they read themselves.

:class:`ShardSet` is a :class:`~vitscale.data.shards.index.Selection` as a map-style dataset
(example ``i`` = the ``i``-th selected example): evaluation sets, previews, and the base of
the pre-training stream (:mod:`vitscale.data.stream`), read in the windowed order
(:mod:`.order`) with the augmentation of stream position ``p`` drawn from torch's CPU
generator seeded with ``key(seed, p)`` (forked: dropout's streams are untouched), so a batch
is bit-identical for any number of DataLoader workers, processes and restarts.

Bad examples are handled as docs/datasets.md's "Sharded datasets" says: with
``data.skip_bad_samples`` each is replaced by the example at the next stream position and
reported with the batch (``Batch.skipped``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset
from torchvision.transforms import v2

from .._hash import derive_key
from ..batch import Batch, collate
from ..registry import DatasetFormatError, DatasetNotFoundError
from ..stream import OwnStream, PositionStream, ReadFailure, seed63
from ..subsets import SubsetSpec
from ..transforms import eval_transform, to_signed_float, train_transform
from .index import (
    Selection,
    ShardIndex,
    check_shards,
    load_index,
    parse_location,
    select,
    split_shards,
)
from .order import WindowedOrder
from .read import Labels, SampleError, ShardReader, decode, image_of, labels_of

DEFAULT_WINDOW = 16  # shards shuffled together (data.shuffle_shards unset)
_AUGMENT = 0x5A4D_A0C0
_SKIP_HINT = (
    "set data.skip_bad_samples: N to replace up to N bad examples by the next ones "
    "(counted in result.json), or repair the shard"
)


@dataclass(frozen=True, kw_only=True)
class EncodedBatch(Batch):
    """A batch as the workers read it: ``images`` holds every example's encoded bytes
    back to back (uint8, 1-D), ``lengths`` each one's length, ``seeds`` each one's
    augmentation key (64-bit, so not a tensor), ``where`` each one's (shard, key) and
    ``positions`` its stream position (to replace one that does not decode)."""

    lengths: Tensor
    seeds: tuple[int, ...]
    where: tuple[tuple[str, str], ...] = ()
    positions: tuple[int, ...] = ()

    def encoded(self) -> list[Tensor]:
        return list(self.images.split(self.lengths.tolist()))


class ShardSet(Dataset, OwnStream):
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
        self.crop = index.crop
        self.image_size = image_size
        # The stream yields encoded bytes, decoded where the model trains (data.decode).
        self.on_device = False
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

    def read(self, i: int) -> tuple[bytes, Tensor, Path, str]:
        """Example ``i`` undecoded: its image's bytes, its target, its shard and key."""
        piece, inner = self._locate(i)
        path = self._paths[piece]
        sample = self._reader.sample(path, self._nsamples[piece], inner)
        try:
            found = image_of(sample)
            if found is None:
                raise ValueError("no image (.jpg, .jpeg, .png or .webp)")
            labels = labels_of(sample, self._labels)
        except ValueError as e:
            raise SampleError(self.name, path, sample["__key__"], str(e)) from None
        return found[1], self._target(labels), path, sample["__key__"]

    def load(self, i: int, *, seed: int | None = None) -> tuple[Tensor, Tensor]:
        """Example ``i``; with ``seed``, its augmentation draws from a generator seeded so."""
        data, target, path, key = self.read(i)
        try:
            image = decode(data)
        except ValueError as e:
            raise SampleError(self.name, path, key, str(e)) from None
        if seed is None:
            return self.transform(image), target
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            return self.transform(image), target

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.load(int(i))

    def __getitems__(self, indices: list[int]) -> Batch:
        return collate([self.load(int(i)) for i in indices])

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

    def stream(self, *, seed: int) -> ShardStream:
        """The pre-training stream (what :func:`vitscale.data.build_loader` reads)."""
        return ShardStream(shards=self, seed=seed)

    def __repr__(self) -> str:
        return f"ShardSet({self.name!r}, n={len(self)}, shards={len(self._paths)})"


class ShardStream(PositionStream):
    """A sharded set's examples at stream positions, augmented and replaced as the module
    docstring says."""

    def __init__(self, *, shards: ShardSet, seed: int) -> None:
        self.base = shards
        self.seed = seed63(seed)
        self.order = WindowedOrder(takes=shards.takes, seed=seed, window=shards.window)

    def _one(self, position: int, example: int, skipped: list[str]) -> tuple:
        """The example at ``position``, or the next good one (counted in ``skipped``):
        ``(image, target)``, or on a device-decoding set ``(bytes, target, shard, key, seed,
        position)``."""
        tries = 0
        while True:
            seed = derive_key(_AUGMENT, self.seed, position)
            try:
                if self.base.on_device:
                    return (*self.base.read(example), seed, position)
                return self.base.load(example, seed=seed)
            except SampleError as e:
                self._skip(e, skipped)
                # The trainer limits the distinct ones; this only ends a search that finds
                # no good example: more bad ones in a row than an epoch boundary explains.
                tries += 1
                if tries > 2 * (limit := self.base.skip_bad_samples) + 1:
                    raise DatasetFormatError(
                        f"{self.base.name}: {tries} bad examples in a row, more than "
                        f"data.skip_bad_samples={limit} allows; last: {e}"
                    ) from None
                position += 1
                example = int(self.order([position])[0])

    def _skip(self, error: SampleError, skipped: list[str]) -> None:
        """Count a bad example in its batch's ``skipped`` (the trainer limits the distinct
        ones); an error when none may be."""
        if not self.base.skip_bad_samples:
            raise DatasetFormatError(f"{error}; {_SKIP_HINT}") from None
        skipped.append(f"{error.shard}: key {error.key!r}: {error.reason}")

    def replacement(self, position: int, error: SampleError, skipped: list[str]) -> tuple:
        """What replaces the example at ``position``, read whole but found bad by its
        decoder on the device (:class:`~.device.DeviceDecoder`): counted as the workers
        count theirs, and the next good example, as :meth:`_one` gives it."""
        self._skip(error, skipped)
        return self._one(position + 1, int(self.order([position + 1])[0]), skipped)

    def __getitems__(self, positions: list[int]) -> Batch | ReadFailure:
        skipped: list[str] = []
        try:
            examples = self.order(positions).tolist()
            pairs = [
                self._one(int(p), e, skipped) for p, e in zip(positions, examples, strict=True)
            ]
        except DatasetNotFoundError as e:
            return ReadFailure(error=DatasetNotFoundError, message=str(e))
        except DatasetFormatError as e:
            return ReadFailure(error=DatasetFormatError, message=str(e))
        if self.base.on_device:
            return _encoded(pairs, skipped)
        batch = collate(pairs)
        return Batch(images=batch.images, targets=batch.targets, skipped=tuple(skipped))


def _encoded(examples: list[tuple], skipped: list[str]) -> EncodedBatch:
    """The undecoded examples of a batch as one :class:`EncodedBatch`."""
    data = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d, *_ in examples]
    return EncodedBatch(
        images=torch.cat(data),
        targets=torch.stack([t for _, t, *_ in examples]),
        lengths=torch.tensor([len(d) for d in data]),
        seeds=tuple(seed for *_, seed, _ in examples),
        where=tuple((str(shard), key) for _, _, shard, key, *_ in examples),
        positions=tuple(position for *_, position in examples),
        skipped=tuple(skipped),
    )


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
