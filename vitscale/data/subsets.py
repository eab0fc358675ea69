"""Nested pre-training subsets, few-shot samples and held-out slices, from one permutation.

Paper Fig. 4 pre-trains on random 9M, 30M and 90M subsets of JFT-300M and asks how
transfer changes with their size; for the comparison to be about *size* the subsets must
be nested (every smaller one inside every larger one) and identical wherever they are
computed. Here every subset is a prefix of one seeded permutation of ``[0, n)``:

- :class:`SeededPermutation` is a keyed bijection on ``[0, n)`` (a four-round Feistel
  network on the next even number of bits, with cycle walking back into range), evaluated
  position by position: ``subset_indices(10**9, "9M")`` computes 9M positions and never
  materialises a permutation of 10^9. Plain uint64 arithmetic, so every process and
  machine gets the same indices.
- Class-balanced orders (``labels=`` given) take the permutation's order within each class
  and interleave the classes round by round, so any prefix has per-class counts within
  one of each other (while the classes last) and is still nested.
- Few-shot samples (paper Sec. 4.1: k images per class, several seeds) are the first k
  rounds of a class-balanced order; held-out slices for choosing fine-tuning learning
  rates (paper App. B.1.1) are the tail of a permutation with a fixed seed, so they never
  depend on the run's seed.

numpy only, no torch: grid validation can resolve subset sizes without it.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from ..config.counts import SubsetSpec, subset_size
from ..config.counts import parse_count as parse_count
from ..config.counts import parse_subset as parse_subset
from ._hash import derive_key, mix64

# Fixed seed of the held-out slice: the same images are held out in every run.
HOLDOUT_SEED = 0x5EED_4A11
_ROUNDS = 4


class SeededPermutation:
    """A pseudo-random bijection of ``[0, n)`` determined by ``(n, seed)``.

    ``perm(positions)`` maps positions to indices element-wise, so a prefix costs only its
    own length. Balanced Feistel network with ``_ROUNDS`` rounds whose round function is
    SplitMix64; outputs outside ``[0, n)`` are re-encrypted until they land inside (cycle
    walking), which keeps it a bijection on exactly ``[0, n)``.
    """

    def __init__(self, n: int, seed: int) -> None:
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {n}")
        self.n = int(n)
        self.seed = int(seed)
        self._half = max(1, math.ceil(max(1, (self.n - 1).bit_length()) / 2))
        self._mask = np.uint64((1 << self._half) - 1)
        self._keys = [np.uint64(derive_key(self.seed, self.n, r)) for r in range(_ROUNDS)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        shift = np.uint64(self._half)
        left, right = x >> shift, x & self._mask
        with np.errstate(over="ignore"):
            for key in self._keys:
                left, right = right, left ^ (mix64(right ^ key) & self._mask)
        return (left << shift) | right

    def __call__(self, positions: np.ndarray | int) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.n):
            raise IndexError(f"positions must be in [0, {self.n}), got {pos.min()}..{pos.max()}")
        out = self._encrypt(pos.astype(np.uint64))
        outside = out >= np.uint64(self.n)
        while outside.any():
            out[outside] = self._encrypt(out[outside])
            outside = out >= np.uint64(self.n)
        return out.astype(np.int64)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"SeededPermutation(n={self.n}, seed={self.seed})"


def balanced_order(labels: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """All indices of ``labels`` in class-balanced order.

    Round ``r`` holds the ``r``-th example (in the order of ``SeededPermutation(n, seed)``)
    of every class that has one, in permutation order; rounds follow each other. A prefix
    of length ``m`` therefore holds ``floor`` or ``ceil`` of ``m / classes`` per class
    while every class still has examples, and shorter prefixes lie in longer ones.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be one class index per example, got shape {labels.shape}")
    n = len(labels)
    order = SeededPermutation(n, seed)(np.arange(n))
    lab = labels[order]
    by_class = np.argsort(lab, kind="stable")
    _, first, counts = np.unique(lab[by_class], return_index=True, return_counts=True)
    rank = np.empty(n, dtype=np.int64)
    rank[by_class] = np.arange(n) - np.repeat(first, counts)
    return order[np.lexsort((np.arange(n), rank))]


def subset_indices(
    n_total: int, subset: SubsetSpec, *, seed: int = 0, labels: np.ndarray | None = None
) -> np.ndarray:
    """The indices ``subset`` selects from ``[0, n_total)``, in permutation order.

    A prefix of ``SeededPermutation(n_total, seed)``, or of :func:`balanced_order` when
    ``labels`` (one class per example) are given. Same ``(n_total, seed, labels)``:
    every smaller subset is a prefix of every larger one.
    """
    m = subset_size(n_total, subset)
    if labels is None:
        return SeededPermutation(n_total, seed)(np.arange(m))
    if len(labels) != n_total:
        raise ValueError(f"labels has {len(labels)} entries for {n_total} examples")
    return balanced_order(labels, seed=seed)[:m]


def fewshot_indices(labels: np.ndarray, shots: int, *, seed: int = 0) -> np.ndarray:
    """``shots`` examples of every class (paper's "k-shot" linear evaluation).

    The first ``shots`` rounds of :func:`balanced_order`, so the 5-shot sample of a seed
    contains its 1-shot sample. ``labels`` holds one class per example of the split the
    shots come from (the train split, never test).
    """
    labels = np.asarray(labels)
    if isinstance(shots, bool) or not isinstance(shots, Integral) or shots < 1:
        raise ValueError(f"shots must be a positive integer, got {shots!r}")
    classes, counts = np.unique(labels, return_counts=True)
    if shots > counts.min():
        smallest = classes[counts.argmin()]
        raise ValueError(
            f"{shots}-shot needs {shots} examples of every class, but class {smallest} has "
            f"only {counts.min()}; the largest possible is {counts.min()}-shot"
        )
    return balanced_order(labels, seed=seed)[: shots * len(classes)]


def holdout_split(n: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(minitrain, val) sorted indices: a fixed random ``fraction`` of ``[0, n)`` held out.

    Paper App. B.1.1 picks fine-tuning learning rates on 2% (CIFAR), 10% (Pets, Flowers)
    or 1% (ImageNet) of the train split; the slice uses :data:`HOLDOUT_SEED`, never the
    run's seed, so every run holds out the same images.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"held-out fraction must be in (0, 1), got {fraction}")
    held = max(1, round(fraction * n))
    if held >= n:
        raise ValueError(f"holding out {fraction:.0%} of {n} examples leaves none to train on")
    order = SeededPermutation(n, HOLDOUT_SEED)(np.arange(n))
    return np.sort(order[: n - held]), np.sort(order[n - held :])
