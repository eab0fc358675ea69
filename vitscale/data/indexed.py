"""A dataset seen through an index map: subsets, held-out slices, few-shot samples.

Unlike ``torch.utils.data.Subset`` the map may be lazy (a
:class:`~vitscale.data.subsets.SeededPermutation` prefix), so a 300M-example subset of the
10^9-example synthetic set costs nothing to build; and batch rendering
(``__getitems__``) and label look-ups (``targets_of``) pass through to the base.
"""

from __future__ import annotations

import numpy as np
from torch.utils.data import Dataset

from .batch import examples
from .subsets import SeededPermutation


class IndexedDataset(Dataset):
    """Position ``p`` of the dataset is example ``indices[p]`` of ``base``, ``p < length``."""

    def __init__(
        self, base: Dataset, indices: np.ndarray | SeededPermutation, *, length: int | None = None
    ) -> None:
        self.base = base
        self.indices = indices
        self.length = len(indices) if length is None else int(length)
        if not 0 <= self.length <= len(indices):
            raise ValueError(f"an index map of length {self.length} over {len(indices)} indices")

    selection = None  # only a sharded set records which examples it selected
    # Metadata of the base dataset: one name, one class list, however it is sliced.
    name = property(lambda self: self.base.name)
    classes = property(lambda self: self.base.classes)
    num_classes = property(lambda self: self.base.num_classes)
    multilabel = property(lambda self: self.base.multilabel)

    def __len__(self) -> int:
        return self.length

    def base_indices(self, positions: np.ndarray) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < -self.length or pos.max() >= self.length):
            raise IndexError(f"position out of range for {self.length} examples")
        pos = np.where(pos < 0, pos + self.length, pos)
        if isinstance(self.indices, SeededPermutation):
            return self.indices(pos)
        return np.asarray(self.indices)[pos]

    def targets_of(self, positions: np.ndarray) -> np.ndarray:
        return self.base.targets_of(self.base_indices(positions))

    def __getitem__(self, position: int):
        return self.base[int(self.base_indices([position])[0])]

    def __getitems__(self, positions: list[int]):
        return examples(self.base, self.base_indices(positions).tolist())

    def __repr__(self) -> str:
        return f"IndexedDataset({self.base!r}, n={self.length})"
