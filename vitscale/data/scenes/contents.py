"""What each scene contains and where, and its labels: numpy, per example from the
counter-based hash, so a scene is a pure function of (task, split, index) and the pixels
(:mod:`.render`) only draw what is decided here, on any device.

Positions are in cells of the 3x3 layout (cell ``r * 3 + c``) plus a jitter in [0, 1)
that the renderer scales to the room the part leaves in its cell; nothing here depends on
the resolution.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from .._hash import Fields, derive_key, uniform
from . import world as w

MAX_OBJECTS = w.MAX_OBJECTS
_SPLIT_STREAM = {"train": 0, "val": 1, "test": 2}
# Cells whose right-hand neighbour is in the same row: where an arrangement can start.
_ANCHORS = np.array([r * w.GRID + c for r in range(w.GRID) for c in range(w.GRID - 1)])


_F = Fields()
POLARITY = _F.take(1)
BACKGROUND = _F.take(6)  # two colours
FIELD = _F.take(1)  # which clutter field of the renderer's bank
CELL_ORDER = _F.take(w.GRID * w.GRID)
ANCHOR = _F.take(1)
SINGLES = _F.take(1)
PICKS = _F.take(MAX_OBJECTS)  # which part each object is (tasks that draw it)
SIZES = _F.take(MAX_OBJECTS)
JITTER = _F.take(2 * MAX_OBJECTS)
COLOURS = _F.take(3 * MAX_OBJECTS)
CLUTTER = _F.take(8 * w.MAX_CLUTTER)  # active, bitmap, size, x, y, brightness, rgb
NUM_FIELDS = _F.size


@dataclass(frozen=True)
class Scene:
    """A batch of scenes, decided. ``part``: bitmap row (:func:`world.bitmaps`) of each
    object ``(B, M)``; ``valid`` which objects exist; ``cell`` their cells; ``u`` the raw
    draws (sizes, jitters, colours, clutter, background: read by the renderer);
    ``targets``: class indices ``(B,)`` or, upstream, multi-hot ``(B, L)`` float32."""

    part: np.ndarray
    valid: np.ndarray
    cell: np.ndarray
    u: np.ndarray
    targets: np.ndarray


def _cell_order(u: np.ndarray, taken: np.ndarray | None = None) -> np.ndarray:
    """A random order of the 9 cells per example, the ``taken`` ones (B, k) last."""
    keys = u[:, CELL_ORDER].copy()
    if taken is not None:
        np.put_along_axis(keys, taken, 2.0, axis=1)
    return np.argsort(keys, axis=1, kind="stable")


def _pick(u: np.ndarray, j: int, n: int) -> np.ndarray:
    return np.minimum((u[:, PICKS][:, j] * n).astype(np.int64), n - 1)


def _arrangement(u: np.ndarray, pairs: np.ndarray, classes: np.ndarray, singles: np.ndarray):
    """Objects: an arrangement ``pairs[classes]`` in a random pair of adjacent cells, then
    ``singles`` (B,) random upstream parts in random free cells."""
    b = len(u)
    anchor = _ANCHORS[np.minimum((u[:, ANCHOR][:, 0] * len(_ANCHORS)).astype(int), 5)]
    free = _cell_order(u, np.stack([anchor, anchor + 1], axis=1))
    part = np.zeros((b, MAX_OBJECTS), dtype=np.int64)
    cell = np.zeros((b, MAX_OBJECTS), dtype=np.int64)
    part[:, :2] = pairs[classes]
    cell[:, 0], cell[:, 1] = anchor, anchor + 1
    for j in range(2, MAX_OBJECTS):
        part[:, j] = _pick(u, j, w.UPSTREAM_PARTS)
        cell[:, j] = free[:, j - 2]
    valid = np.arange(MAX_OBJECTS)[None, :] < (2 + singles)[:, None]
    return part, valid, cell


@cache
def _registered() -> np.ndarray:
    """``(P, P)``: the registered arrangement ``(a, b)``'s index, or -1."""
    table = np.full((w.UPSTREAM_PARTS, w.UPSTREAM_PARTS), -1, dtype=np.int64)
    pairs = w.arrangements()[0]
    table[pairs[:, 0], pairs[:, 1]] = np.arange(len(pairs))
    return table


def _upstream_targets(part: np.ndarray, valid: np.ndarray, cell: np.ndarray) -> np.ndarray:
    """Multi-hot labels of what a scene contains (:mod:`.world`): its parts, every
    registered arrangement formed by two parts in horizontally adjacent cells, its count
    and whether a part repeats."""
    b = len(part)
    targets = np.zeros((b, w.NUM_UPSTREAM_LABELS), dtype=np.float32)
    example, obj = np.nonzero(valid)
    targets[example, w.LABEL_PARTS.start + part[example, obj]] = 1.0
    # (B, i, j): object j in the cell right of object i, in the same row
    beside = (
        valid[:, :, None]
        & valid[:, None, :]
        & (cell[:, None, :] == cell[:, :, None] + 1)
        & (cell[:, :, None] % w.GRID < w.GRID - 1)
    )
    found = _registered()[part[:, :, None], part[:, None, :]]
    hit = beside & (found >= 0)
    targets[np.nonzero(hit)[0], w.LABEL_ARRANGEMENTS.start + found[hit]] = 1.0
    count = valid.sum(axis=1)
    targets[np.arange(b), w.LABEL_COUNTS.start + count - w.MIN_OBJECTS] = 1.0
    same = (part[:, :, None] == part[:, None, :]) & valid[:, :, None] & valid[:, None, :]
    repeat = same.sum(axis=(1, 2)) > count
    targets[:, w.LABEL_REPEAT] = repeat
    return targets


def primary_class(task: w.SceneTask, indices: np.ndarray) -> np.ndarray:
    """The class an example is made around, without drawing it: ``i mod num_classes``,
    upstream the label of its registered arrangement."""
    indices = np.asarray(indices, dtype=np.int64)
    if task.kind == "upstream":
        return w.LABEL_ARRANGEMENTS.start + indices % w.COMPOSITES
    return indices % task.num_classes


def decide(task: w.SceneTask, split: str, indices: np.ndarray) -> Scene:
    """The scenes of ``indices`` of one split of ``task``."""
    if split not in _SPLIT_STREAM:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(_SPLIT_STREAM)}")
    indices = np.asarray(indices, dtype=np.int64)
    u = uniform(derive_key(w.WORLD_SEED, task.stream, _SPLIT_STREAM[split]), indices, NUM_FIELDS)
    b = len(indices)
    registered, new = w.arrangements()
    if task.kind == "upstream":
        singles = np.minimum((u[:, SINGLES][:, 0] * 4).astype(np.int64), 3)
        part, valid, cell = _arrangement(u, registered, indices % w.COMPOSITES, singles)
        return Scene(part, valid, cell, u, _upstream_targets(part, valid, cell))
    labels = indices % task.num_classes
    if task.kind == "arrangements":
        part, valid, cell = _arrangement(u, new, labels, np.zeros(b, dtype=np.int64))
        return Scene(part, valid, cell, u, labels)
    order = _cell_order(u)
    cell = order[:, :MAX_OBJECTS]
    part = np.stack([_pick(u, j, w.UPSTREAM_PARTS) for j in range(MAX_OBJECTS)], axis=1)
    if task.kind == "parts":
        part[:, 0] = w.UPSTREAM_PARTS + labels  # the new parts follow the upstream ones
        count = np.ones(b, dtype=np.int64)
    elif task.kind == "same":
        other = (part[:, 0] + 1 + _pick(u, 1, w.UPSTREAM_PARTS - 1)) % w.UPSTREAM_PARTS
        part[:, 1] = np.where(labels == 1, part[:, 0], other)
        count = np.full(b, 2, dtype=np.int64)
    elif task.kind == "count":
        count = w.COUNT_RANGE[0] + labels
    else:
        raise AssertionError(task.kind)
    valid = np.arange(MAX_OBJECTS)[None, :] < count[:, None]
    return Scene(part, valid, cell, u, labels)
