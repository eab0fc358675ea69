"""What the embedded synthetic dataset contains: its visual vocabulary and its tasks.

The paper's question (Sec. 4.3, Fig. 3 and 4) is when a ViT's weak inductive bias stops
hurting: with little pre-training data the ResNet's locality and translation equivariance
win, with enough data the ViT learns the same structure and overtakes. The synthetic
family is built so that this prior is the *right* one: every class is defined by a small
local structure (a glyph or a texture) drawn at a random position, scale and colour on a
cluttered background, and nothing else about the image is informative.

- **Glyphs.** A glyph is a 5x5 binary bitmap whose set cells touch all four sides, are
  4-connected, and differ from every other glyph in at least :data:`MIN_GLYPH_DISTANCE`
  cells. :func:`glyph_bank` draws them from a counter-based hash, so the bank is the same
  everywhere and glyph ``g`` never changes when more glyphs are asked for.
- **Textures.** Ten periodic patterns (:data:`TEXTURES`) filling a square or disc.

Upstream (pre-training) and transfer tasks use disjoint glyphs, so transfer is real: a
transfer class was never a pre-training class, but it is made of the same strokes,
corners and periodicities, so good upstream features make it linearly separable.

This module is torch-free (the registry and grid validation read the task table); the
renderer is :mod:`vitscale.data.synthetic.render`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from itertools import combinations

import numpy as np

from ...kinds import GLYPHS
from .._hash import derive_key, uniform

GLYPH_GRID = 5
MIN_GLYPH_DISTANCE = 6
# Cells set per glyph: dense enough to be more than a stroke, sparse enough to have holes.
_GLYPH_CELLS = (9, 16)
# Version of the world: bump it (never silently) if a change alters any rendered pixel,
# so that a changed world is a new sample, not the old one with a few pixels moved.
WORLD_SEED = 20_261_202
# Version of the glyph bank (which bitmaps exist), apart from how they are drawn.
GLYPH_BANK_SEED = 20_210_503

TEXTURES: tuple[str, ...] = (
    "horizontal stripes",
    "vertical stripes",
    "rising diagonal stripes",
    "falling diagonal stripes",
    "checkerboard",
    "polka dots",
    "grid lines",
    "concentric rings",
    "chevrons",
    "concentric diamonds",
)


class TaskSplits:
    """What every embedded task says about its splits: ``splits`` ((name, size), ...)."""

    name: str
    splits: tuple[tuple[str, int], ...]

    def split_size(self, split: str) -> int:
        sizes = dict(self.splits)
        if split not in sizes:
            raise ValueError(
                f"{self.name}: unknown split {split!r}; valid: {', '.join(map(repr, sizes))}"
            )
        return sizes[split]


@dataclass(frozen=True)
class SyntheticTask(TaskSplits):
    """One classification task of the synthetic family.

    ``kind`` says what defines a class: ``"glyph"`` (one glyph of ``glyphs`` per image),
    ``"pair"`` (which two glyphs of ``glyphs`` appear together) or ``"texture"`` (the
    pattern inside a patch). ``splits`` gives each split's size; labels cycle through the
    classes (example ``i`` has class ``i mod num_classes``), so every split is balanced.
    """

    name: str
    kind: str
    glyphs: tuple[int, ...]
    splits: tuple[tuple[str, int], ...]
    description: str
    stream: int

    @property
    def classes(self) -> tuple[str, ...]:
        if self.kind == "glyph":
            return tuple(f"glyph-{g:03d}" for g in self.glyphs)
        if self.kind == "pair":
            return tuple(f"glyph-{a:03d}+glyph-{b:03d}" for a, b in self.pairs)
        return TEXTURES

    @property
    def num_classes(self) -> int:
        """``len(self.classes)``, without building the names (the renderer asks per batch)."""
        if self.kind == "glyph":
            return len(self.glyphs)
        return len(self.pairs) if self.kind == "pair" else len(TEXTURES)

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The unordered glyph pairs of a ``"pair"`` task, in class order."""
        return tuple(combinations(self.glyphs, 2))


_UPSTREAM_CLASSES = 256
UPSTREAM = GLYPHS

# Upstream glyphs are 0..255; each transfer task takes the next unused ones. The upstream
# train split is "unbounded" (10^9 indices, nothing stored): Fig. 4's subsets are prefixes
# of a seeded permutation of it. Its val and test splits, and the transfer tasks' splits,
# are separate index streams, so no image is shared between splits.
TASKS: dict[str, SyntheticTask] = {
    t.name: t
    for t in (
        SyntheticTask(
            name=UPSTREAM,
            kind="glyph",
            glyphs=tuple(range(_UPSTREAM_CLASSES)),
            splits=(("train", 10**9), ("val", 10_000), ("test", 10_000)),
            description="pre-training: 256 glyph classes on cluttered backgrounds (JFT stand-in)",
            stream=0,
        ),
        SyntheticTask(
            name="synthetic-glyphs",
            kind="glyph",
            glyphs=tuple(range(256, 276)),
            splits=(("train", 2_000), ("val", 400), ("test", 2_000)),
            description="transfer: 20 glyphs never seen upstream (fine-grained, Pets/Flowers-like)",
            stream=1,
        ),
        SyntheticTask(
            name="synthetic-pairs",
            kind="pair",
            glyphs=tuple(range(276, 281)),
            splits=(("train", 1_000), ("val", 200), ("test", 1_000)),
            description="transfer: which 2 of 5 new glyphs appear together (10 classes)",
            stream=2,
        ),
        SyntheticTask(
            name="synthetic-textures",
            kind="texture",
            glyphs=(),
            splits=(("train", 1_000), ("val", 200), ("test", 1_000)),
            description="transfer: 10 periodic textures in a patch (DTD-like)",
            stream=3,
        ),
    )
}


def _connected(bits: np.ndarray) -> np.ndarray:
    """Which of the ``(B, G, G)`` bitmaps are 4-connected: grow each from its first set
    cell, one step in the four directions at a time, inside the bitmap."""
    flat = bits.reshape(len(bits), -1)
    reached = np.zeros_like(flat)
    reached[np.arange(len(flat)), flat.argmax(axis=1)] = True
    reached = reached.reshape(bits.shape) & bits
    for _ in range(GLYPH_GRID * GLYPH_GRID):
        grown = reached.copy()
        grown[:, 1:] |= reached[:, :-1]
        grown[:, :-1] |= reached[:, 1:]
        grown[:, :, 1:] |= reached[:, :, :-1]
        grown[:, :, :-1] |= reached[:, :, 1:]
        grown &= bits
        if (grown == reached).all():
            break
        reached = grown
    return (reached == bits).all(axis=(1, 2))


@cache
def glyph_bank(n: int) -> np.ndarray:
    """The first ``n`` glyphs, ``(n, GLYPH_GRID, GLYPH_GRID)`` bool.

    Candidates are hashed bitmaps; a candidate is kept when its cells touch all four
    sides (so its drawn size is its box), are 4-connected (one stroke figure, like a
    character) and differ from every kept glyph in at least ``MIN_GLYPH_DISTANCE`` cells.
    Greedy and sequential, so a longer bank starts with the shorter one.
    """
    key = derive_key(GLYPH_BANK_SEED, 0xC1A55)
    cells = GLYPH_GRID * GLYPH_GRID
    kept = np.zeros((n, cells), dtype=bool)
    count, start = 0, 0
    while count < n:
        candidates = uniform(key, np.arange(start, start + 4096), cells) < 0.5
        start += 4096
        # The tests that do not depend on the glyphs kept so far, for the whole batch.
        bits = candidates.reshape(-1, GLYPH_GRID, GLYPH_GRID)
        size = candidates.sum(axis=1)
        sides = (
            bits[:, 0].any(1) & bits[:, -1].any(1) & bits[:, :, 0].any(1) & bits[:, :, -1].any(1)
        )
        ok = (size >= _GLYPH_CELLS[0]) & (size <= _GLYPH_CELLS[1]) & sides
        ok[ok] = _connected(bits[ok])
        # Then the greedy distance test, in candidate order.
        for cand in candidates[ok]:
            if count and (kept[:count] != cand).sum(axis=1).min() < MIN_GLYPH_DISTANCE:
                continue
            kept[count] = cand
            count += 1
            if count == n:
                break
    return kept.reshape(n, GLYPH_GRID, GLYPH_GRID)
