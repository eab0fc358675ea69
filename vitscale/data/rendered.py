"""One split of an embedded world's task as a map-style ``Dataset``: drawn, never stored.

``__getitems__`` draws a whole batch in one vectorised pass (torch's DataLoader calls it
with the batch's indices) and returns a :class:`~vitscale.data.batch.Batch`, which
:func:`~vitscale.data.batch.collate` passes through; ``ds[i]`` is bit-identical to row
``i`` of any batch containing it. A world subclasses it with its task table, its
resolution range and how it draws (:class:`vitscale.data.synthetic.render.SyntheticImages`,
:class:`vitscale.data.scenes.render.SceneImages`).
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
from torch import Tensor
from torch.utils.data import Dataset

from .batch import Batch


class RenderedSplit(Dataset):
    tasks: dict  # the world's tasks by name
    world: str  # its name, in messages
    size_range: tuple[int, int]  # the resolutions it draws
    selection = None  # only a sharded set records which examples it selected

    def __init__(self, task, *, split: str, image_size: int) -> None:
        self.task = self.tasks[task] if isinstance(task, str) else task
        self.length = self.task.split_size(split)
        lo, hi = self.size_range
        if not lo <= image_size <= hi:
            raise ValueError(f"{self.world} image_size must be in [{lo}, {hi}], got {image_size}")
        self.split = split
        self.image_size = image_size

    name = property(lambda self: self.task.name)
    classes = property(lambda self: list(self.task.classes))
    num_classes = property(lambda self: self.task.num_classes)

    @abstractmethod
    def draw(self, indices: np.ndarray) -> Batch:
        """The examples at (valid, non-negative) ``indices`` of this split."""

    @abstractmethod
    def targets_of(self, indices: np.ndarray) -> np.ndarray:
        """(Primary) classes without drawing."""

    def __len__(self) -> int:
        return self.length

    def _check(self, indices) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        bad = (indices < -self.length) | (indices >= self.length)
        if bad.any():
            raise IndexError(f"index {indices[bad][0]} out of range for {self.length} examples")
        return np.where(indices < 0, indices + self.length, indices)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        images, targets = self.draw(self._check([index]))
        return images[0], targets[0]

    def __getitems__(self, indices: list[int]) -> Batch:
        return self.draw(self._check(indices))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, split={self.split!r}, "
            f"image_size={self.image_size}, n={self.length})"
        )
