"""Dataset kinds: what a dataset's name says about it before anything is read, one table
for every layer (torch-free). Config chooses a recipe by it, rules check class balance by
it, the grid builds the glyph renderer for it, analysis finds the positive control's worlds
in it; :mod:`vitscale.data.registry` says what each source holds and where it lives.

The positive control's worlds (registered in experiments/preregistered/permuted.md) are
named here too, with the fraction of pixels each moves: the glyph world itself at 0,
``synthetic-permuted-<p>`` at ``p`` percent, ``synthetic-patchperm`` (sigma + tau,
``None``). :mod:`vitscale.data.synthetic.permuted` owns how their pixels move.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GLYPHS = "synthetic"  # the glyph world's upstream set (vitscale.data.synthetic)
SCENES = "scenes"  # the scenes world's (vitscale.data.scenes)


@dataclass(frozen=True)
class Kind:
    """Names that match ``pattern`` (the whole name) are of this kind."""

    pattern: str
    recipe: str  # the recipe it pre-trains with unless the config names one (config.recipes)
    world: str | None = None  # the embedded world that renders it; None: read from files
    folder: str | None = None  # ``<folder>:/path`` names a tree on disk of this layout
    class_balanced: bool = True  # whether a subset can be ordered class-balanced


KINDS = (
    Kind(rf"{GLYPHS}(-.+)?", recipe="synthetic", world=GLYPHS),
    Kind(SCENES, recipe="scenes", world=SCENES),  # multi-label: the sigmoid loss
    Kind(rf"{SCENES}-.+", recipe="synthetic", world=SCENES),  # single-label transfer tasks
    Kind("imagenet", recipe="imagenet"),
    Kind("imagefolder:.*", recipe="small", folder="imagefolder"),
    Kind("multilabel:.*", recipe="jft", folder="multilabel"),  # JFT's shape: multi-hot targets
    # a sharded subset is whole shards in a seeded order
    Kind("shards:.*", recipe="small", folder="shards", class_balanced=False),
    Kind(".*", recipe="imagenet21k"),  # the torchvision transfer sets
)
FOLDER_KINDS = tuple(k.folder for k in KINDS if k.folder)


def kind_of(dataset: str) -> Kind:
    """The first kind whose pattern matches ``dataset`` (the last matches any name)."""
    return next(k for k in KINDS if re.fullmatch(k.pattern, dataset, flags=re.S))


# The control's levels registered, percent of pixels moved; sigma + tau moves 8x8 patches.
PERCENTS = (50, 75, 100)
PATCH_WORLD = f"{GLYPHS}-patchperm"
TRANSFER = "glyphs"  # the transfer task each world carries: the glyph world's 20 new glyphs


def world_name(percent: int | None) -> str:
    """``synthetic-permuted-<percent>``, or ``synthetic-patchperm`` for sigma + tau."""
    return PATCH_WORLD if percent is None else f"{GLYPHS}-permuted-{percent}"


def control_worlds() -> dict[str, tuple[float | None, str]]:
    """Each control world's upstream name -> (the fraction of pixels it moves, ``None`` for
    sigma + tau; its transfer task), the glyph world itself at 0."""
    moved = {world_name(p): None if p is None else p / 100 for p in (*PERCENTS, None)}
    return {w: (f, f"{w}-{TRANSFER}") for w, f in ({GLYPHS: 0.0} | moved).items()}
