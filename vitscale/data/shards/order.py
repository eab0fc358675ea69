"""A sharded set's epoch orders for the stream (:class:`~vitscale.data.stream.StreamOrder`).

Epoch ``e`` puts the selection's shards in the order of ``SeededPermutation(k, key(seed,
e))``, cut into windows of ``window`` consecutive shards (``data.shuffle_shards``); a
window's examples come in the order of ``SeededPermutation(window examples, key(seed, e,
w))``. The window is the shuffle (label autocorrelation measured in
``benchmarks/shuffle_quality.py``), while a batch reads the shards of one or two windows
only (locality on a cluster file system).
"""

from __future__ import annotations

import numpy as np

from .._hash import derive_key
from ..stream import StreamOrder, seed63
from ..subsets import SeededPermutation

_EPOCH, _WINDOW = 0x5A4D_0E0C, 0x5A4D_0B1D


class WindowedEpoch:
    """One epoch's order: offsets in the epoch -> examples of the selection."""

    def __init__(
        self, *, takes: np.ndarray, first: np.ndarray, seed: int, epoch: int, window: int
    ) -> None:
        k = len(takes)
        self.sigma = SeededPermutation(k, derive_key(_EPOCH, seed, epoch))(np.arange(k))
        self.sizes = takes[self.sigma]
        self.ends = np.cumsum(self.sizes)
        self.w_start = np.concatenate([[0], self.ends])[np.arange(0, k, window)]
        self.w_size = np.diff(np.concatenate([self.w_start, [int(takes.sum())]]))
        self.first, self.seed, self.epoch = first, seed, epoch

    def window(self, offsets: np.ndarray) -> np.ndarray:
        """The window each offset is in."""
        return np.searchsorted(self.w_start, offsets, side="right") - 1

    def __call__(self, offsets: np.ndarray) -> np.ndarray:
        w = self.window(offsets)
        shuffled = np.empty_like(offsets)
        for wi in np.unique(w):
            at = w == wi
            key = derive_key(_WINDOW, self.seed, self.epoch, int(wi))
            perm = SeededPermutation(int(self.w_size[wi]), key)
            shuffled[at] = self.w_start[wi] + perm(offsets[at] - self.w_start[wi])
        rank = np.searchsorted(self.ends, shuffled, side="right")
        piece = self.sigma[rank]
        return self.first[piece] + shuffled - (self.ends[rank] - self.sizes[rank])


class WindowedOrder(StreamOrder):
    """Stream position -> example of a selection taking ``takes[i]`` examples of its
    ``i``-th shard (module docstring)."""

    def __init__(self, *, takes: np.ndarray, seed: int, window: int) -> None:
        self.takes = np.asarray(takes, dtype=np.int64)
        super().__init__(num_examples=int(self.takes.sum()))
        self.first = np.concatenate([[0], np.cumsum(self.takes)[:-1]])
        self.seed, self.window = seed63(seed), int(window)

    def permutation(self, epoch: int) -> WindowedEpoch:
        return WindowedEpoch(
            takes=self.takes, first=self.first, seed=self.seed, epoch=epoch, window=self.window
        )
