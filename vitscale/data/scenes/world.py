"""The scenes world: what its images contain and what their labels mean (torch-free).

The synthetic glyph world (:mod:`vitscale.data.synthetic`) is a *local-shape* world: one
large glyph per image decides the label, exactly a convolution's prior, so a ResNet sits
at its transfer ceiling from the smallest subset on and no amount of data can put a ViT
above it. This world is built so that the paper's second half *can* happen (a ViT
overtaking with data) without arranging that it does: its labels depend on local identity
*and* on global structure, where a convolution's prior stops being the whole answer.

A scene is several **parts** (5x5 glyphs from the shared bank, :func:`glyph_bank`) drawn
small (:data:`PART_SCALE` of the side) over clutter, each in a cell of a 3x3 layout with
free jitter inside it, at random scale and colour. Two parts in horizontally adjacent
cells (the right one in the next column of the same row) form an **arrangement** ``(a, b)``:
"a left of b", which is a different thing from "b left of a". Upstream, every image is
made around one of :data:`COMPOSITES` registered arrangements, plus 0-3 single parts, and
is labelled with everything in it (multi-label, as JFT; trained with a sigmoid loss):

- which upstream parts appear (local identity: :data:`UPSTREAM_PARTS` labels);
- which registered arrangements appear (global structure: which part is next to which,
  and on which side);
- how many parts there are (2-5, one label each: counting);
- whether some part appears twice (same/different).

No label depends on absolute position: an arrangement is the same class in every pair of
adjacent cells, counts and repeats do not depend on where. Clutter fragments (3x3 bitmaps
that are never parts) lie under the parts, anywhere.

The transfer suite (:data:`SUITE`) stays inside the upstream scale and position ranges and
asks for what upstream taught in new combinations: 100 parts never seen upstream (1- and
5-shot), new arrangements of known parts (each pair in both orders, so only the
arrangement tells two classes apart), same/different, counting, and the glyph world's
20 transfer glyphs as the continuity control. :data:`CHANCE` gives each task's chance level.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ...kinds import SCENES
from .._hash import derive_key, uniform
from ..synthetic.vocabulary import TaskSplits, glyph_bank

# Version of this world: bump it (never silently) if a change alters any rendered pixel.
WORLD_SEED = 20_261_202
UPSTREAM = SCENES

# Geometry, fractions of the image side. A 3x3 layout of cells; a part fills 0.6-0.8 of
# its cell's side and moves freely inside it.
GRID = 3
PART_SCALE = (0.2, 0.27)
CLUTTER_SCALE = (0.08, 0.16)
MAX_CLUTTER = 4
CLUTTER_BITMAPS = 64
# Brightness ranges: the background from one, the parts from the other (per image).
DARK = (0.0, 0.4)
LIGHT = (0.6, 1.0)

# The glyph bank's ids. The glyph world uses 0-280 (upstream 0-255, transfer 256-280);
# this world takes ids from 300 on, so no part is a glyph-world glyph.
_FIRST_PART = 300
UPSTREAM_PARTS = 32
NEW_PARTS = 100
COMPOSITES = 64  # registered upstream arrangements
NEW_ARRANGEMENT_PAIRS = 10  # new pairs of upstream parts, each in both orders: 20 classes
MIN_OBJECTS, MAX_OBJECTS = 2, 5  # upstream: one arrangement + 0-3 single parts
COUNT_RANGE = (2, 5)  # the counting task: as many parts as upstream has


def part_ids(kind: str) -> np.ndarray:
    """Glyph-bank ids of the ``"upstream"`` or the ``"new"`` parts."""
    if kind == "upstream":
        return np.arange(_FIRST_PART, _FIRST_PART + UPSTREAM_PARTS)
    if kind == "new":
        start = _FIRST_PART + UPSTREAM_PARTS
        return np.arange(start, start + NEW_PARTS)
    raise ValueError(f"unknown part kind {kind!r}; valid: 'upstream', 'new'")


@cache
def bitmaps() -> np.ndarray:
    """Every part's bitmap, indexed by bank id - ``_FIRST_PART``: ``(132, 5, 5)`` bool."""
    return glyph_bank(_FIRST_PART + UPSTREAM_PARTS + NEW_PARTS)[_FIRST_PART:]


@cache
def clutter_bitmaps() -> np.ndarray:
    """``(CLUTTER_BITMAPS, 3, 3)`` bool: 3-5 set cells, stroke fragments that are no part."""
    u = uniform(derive_key(WORLD_SEED, 0xC1077E8), np.arange(4096), 9)
    bits = u < 0.45
    ok = (bits.sum(axis=1) >= 3) & (bits.sum(axis=1) <= 5)
    return bits[ok][:CLUTTER_BITMAPS].reshape(-1, 3, 3)


@cache
def arrangements() -> tuple[np.ndarray, np.ndarray]:
    """``(registered, new)``: the upstream arrangements ``(COMPOSITES, 2)`` and the new
    ones of the transfer suite ``(2 * NEW_ARRANGEMENT_PAIRS, 2)``, as (left, right)
    indices into the upstream parts. Distinct ordered pairs of distinct parts; the new
    pairs, neither of whose orders is registered, are listed in both orders."""
    n = UPSTREAM_PARTS
    ordered = np.array([(a, b) for a in range(n) for b in range(n) if a != b])
    order = np.argsort(uniform(derive_key(WORLD_SEED, 0xA22), np.arange(len(ordered)), 1)[:, 0])
    shuffled = ordered[order]
    registered = shuffled[:COMPOSITES]
    taken = {tuple(p) for p in registered} | {tuple(p[::-1]) for p in registered}
    new: list[tuple[int, int]] = []
    for a, b in shuffled[COMPOSITES:]:
        if (a, b) in taken or len(new) == 2 * NEW_ARRANGEMENT_PAIRS:
            continue
        new += [(a, b), (b, a)]
        taken |= {(a, b), (b, a)}
    return registered, np.array(new)


@dataclass(frozen=True)
class SceneTask(TaskSplits):
    """One task of the scenes world.

    ``kind``: ``"upstream"`` (multi-label), ``"parts"`` (which new part), ``"arrangements"``
    (which new arrangement), ``"same"`` (two parts: the same or not), ``"count"`` (how
    many parts). ``splits``: each split's size; the (primary) class of example ``i`` is
    ``i mod num_classes``, so every split is balanced.
    """

    name: str
    kind: str
    num_classes: int
    splits: tuple[tuple[str, int], ...]
    description: str
    stream: int
    chance: float

    multilabel = property(lambda self: self.kind == "upstream")

    @property
    def classes(self) -> tuple[str, ...]:
        if self.kind == "upstream":
            return upstream_label_names()
        if self.kind == "parts":
            return tuple(f"part-{g:03d}" for g in part_ids("new"))
        if self.kind == "arrangements":
            return tuple(f"part-{a:02d}|part-{b:02d}" for a, b in arrangements()[1])
        if self.kind == "same":
            return ("different", "same")
        return tuple(f"{n} parts" for n in range(COUNT_RANGE[0], COUNT_RANGE[1] + 1))


# Upstream labels, in this order: parts, registered arrangements, counts, "a repeat".
LABEL_PARTS = slice(0, UPSTREAM_PARTS)
LABEL_ARRANGEMENTS = slice(UPSTREAM_PARTS, UPSTREAM_PARTS + COMPOSITES)
_COUNTS = MAX_OBJECTS - MIN_OBJECTS + 1
LABEL_COUNTS = slice(LABEL_ARRANGEMENTS.stop, LABEL_ARRANGEMENTS.stop + _COUNTS)
LABEL_REPEAT = LABEL_COUNTS.stop
NUM_UPSTREAM_LABELS = LABEL_REPEAT + 1


def upstream_label_names() -> tuple[str, ...]:
    registered = arrangements()[0]
    return (
        tuple(f"part-{p:02d}" for p in range(UPSTREAM_PARTS))
        + tuple(f"part-{a:02d}|part-{b:02d}" for a, b in registered)
        + tuple(f"{n} parts" for n in range(MIN_OBJECTS, MAX_OBJECTS + 1))
        + ("a repeated part",)
    )


_SMALL = (("train", 2_000), ("val", 400), ("test", 2_000))
TASKS: dict[str, SceneTask] = {
    t.name: t
    for t in (
        SceneTask(
            name=UPSTREAM,
            kind="upstream",
            num_classes=NUM_UPSTREAM_LABELS,
            splits=(("train", 10**9), ("val", 10_000), ("test", 10_000)),
            description="pre-training: scenes of 2-5 parts, multi-label (parts, "
            "arrangements, count, a repeat; JFT-like, sigmoid loss)",
            stream=0,
            chance=0.0,
        ),
        SceneTask(
            name="scenes-parts",
            kind="parts",
            num_classes=NEW_PARTS,
            splits=(("train", 5_000), ("val", 1_000), ("test", 2_000)),
            description="transfer: which of 100 parts never seen upstream (one per scene)",
            stream=1,
            chance=1 / NEW_PARTS,
        ),
        SceneTask(
            name="scenes-arrangements",
            kind="arrangements",
            num_classes=2 * NEW_ARRANGEMENT_PAIRS,
            splits=_SMALL,
            description="transfer: which of 20 new arrangements of upstream parts (10 pairs, "
            "each in both orders)",
            stream=2,
            chance=1 / (2 * NEW_ARRANGEMENT_PAIRS),
        ),
        SceneTask(
            name="scenes-same",
            kind="same",
            num_classes=2,
            splits=_SMALL,
            description="transfer: two upstream parts anywhere, the same part or not",
            stream=3,
            chance=0.5,
        ),
        SceneTask(
            name="scenes-count",
            kind="count",
            num_classes=COUNT_RANGE[1] - COUNT_RANGE[0] + 1,
            splits=_SMALL,
            description="transfer: how many parts (2-5) of the upstream ones",
            stream=4,
            chance=1 / (COUNT_RANGE[1] - COUNT_RANGE[0] + 1),
        ),
    )
}

# The transfer suite: the four tasks above and the glyph world's transfer glyphs, the
# continuity control (the local-shape task, where the ResNets' prior is right).
SUITE: tuple[str, ...] = (
    "scenes-parts",
    "scenes-arrangements",
    "scenes-same",
    "scenes-count",
    "synthetic-glyphs",
)
CHANCE: dict[str, float] = {name: TASKS[name].chance for name in SUITE[:-1]} | {
    "synthetic-glyphs": 1 / 20
}
