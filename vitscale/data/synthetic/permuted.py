"""The glyph world with its pixels moved: the positive control for the ResNet's spatial
prior (registered in experiments/preregistered/permuted.md). Torch-free.

The paper credits the ResNets' lead with little data to the convolution's prior: locality,
the two-dimensional neighbourhood and translation equivariance in every layer, which the
ViT has only where it cuts patches (Dosovitskiy et al., ICLR 2021, Sec. 3.1 "Inductive
bias", Sec. 4.3). One fixed permutation of the pixel positions, the same for every image,
keeps all of an image's information (it is a bijection) and takes that prior away: at
ImageNet scale it took a ResNet-50 from 73.5% to 39.4% top-1 (Jaegle et al., "Perceiver",
ICML 2021). These worlds switch the prior off by degrees:

- ``synthetic-permuted-<p>``: ``p`` percent of the pixel positions, a seeded choice (nested:
  a higher level moves every pixel a lower one moves), are permuted among themselves by one
  seeded permutation; the others stay where they are. At 100 no neighbourhood survives. The
  level 0 is the glyph world itself (``synthetic``).
- ``synthetic-patchperm``, sigma + tau: the 8x8 patches moved by one permutation (sigma)
  and the pixels inside every patch put in one order (tau, the same in every patch). A
  ViT with patch 8, a linear patch embedding and learned position embeddings initialised
  i.i.d. is invariant to it by construction (tests/test_permuted_worlds.py): the control
  that a change of the ViT's accuracy across these worlds is the world's, not the harness's.

Each world has the glyph world's upstream task (``<world>``) and its 20 transfer glyphs
(``<world>-glyphs``), moved by the same permutation: a model is evaluated in the world it
learned. Example ``i`` of a moved task is example ``i`` of the glyph world's task, moved
after rendering (:func:`vitscale.data.synthetic.render.render`, one gather per batch):
the same labels, splits and subsets at every level, so the levels differ only by where
the pixels are. :func:`source_pixels` is the only owner of the permutations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ...kinds import PATCH_WORLD, PERCENTS, TRANSFER, world_name
from .._hash import derive_key, uniform
from .vocabulary import TASKS as GLYPH_TASKS
from .vocabulary import UPSTREAM, SyntheticTask, TaskSplits

# Version of the permutations: bump it (never silently) if a change moves any pixel.
PERMUTATION_SEED = 20_261_201
# The study's ViTs' patch (ViT-Femto/8, ViT-Pico/8): sigma + tau moves patches of this side.
PATCH = 8
_LEVELS = (*PERCENTS, None)


@dataclass(frozen=True)
class MovedTask(TaskSplits):
    """A glyph-world task (``base``) whose rendered pixels are moved: ``percent`` of them by
    one permutation, or (``percent=None``) sigma + tau. Labels and splits are ``base``'s."""

    name: str
    base: SyntheticTask
    world: str  # the world's upstream name: the owner of its permutation
    percent: int | None
    description: str

    splits = property(lambda self: self.base.splits)
    classes = property(lambda self: self.base.classes)
    num_classes = property(lambda self: self.base.num_classes)


def _tasks() -> dict[str, MovedTask]:
    out = {}
    for percent in _LEVELS:
        world = world_name(percent)
        what = (
            "the 8x8 patches moved by one permutation and the pixels inside every patch by "
            "another (sigma + tau; a patch-8 ViT is invariant to it)"
            if percent is None
            else f"{percent}% of the pixel positions permuted, the same for every image"
        )
        for suffix, base, role in (
            ("", UPSTREAM, "pre-training"),
            (f"-{TRANSFER}", f"{UPSTREAM}-{TRANSFER}", "transfer: the 20 new glyphs"),
        ):
            out[world + suffix] = MovedTask(
                name=world + suffix,
                base=GLYPH_TASKS[base],
                world=world,
                percent=percent,
                description=f"{role} of the glyph world, {what} (the positive control)",
            )
    return out


TASKS: dict[str, MovedTask] = _tasks()


def _order(key: int, n: int) -> np.ndarray:
    """A seeded permutation of ``range(n)``: the order of ``n`` hashed draws."""
    return np.argsort(uniform(key, np.arange(n), 1)[:, 0], kind="stable")


@cache
def patch_permutations(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma, tau)`` of sigma + tau at ``image_size``: output patch ``p`` (row-major over
    the patch grid) shows input patch ``sigma[p]``, and output pixel ``q`` of a patch
    (row-major inside it) its input pixel ``tau[q]``."""
    if image_size % PATCH:
        raise ValueError(
            f"{PATCH_WORLD}: image_size {image_size} is not a multiple of its {PATCH}-pixel patches"
        )
    grid = image_size // PATCH
    sigma = _order(derive_key(PERMUTATION_SEED, 2, image_size), grid * grid)
    tau = _order(derive_key(PERMUTATION_SEED, 3), PATCH * PATCH)
    return sigma, tau


@cache
def source_pixels(world: str, image_size: int) -> np.ndarray:
    """``(S * S,)`` int64: output pixel ``j`` (row-major) of ``world`` at ``S = image_size``
    is the glyph world's pixel ``source[j]``; every channel moves with its pixel."""
    n = image_size * image_size
    percent = TASKS[world].percent
    if percent is None:
        sigma, tau = patch_permutations(image_size)
        grid = image_size // PATCH
        row, col = np.divmod(np.arange(n), image_size)  # of each output pixel
        patch = sigma[(row // PATCH) * grid + col // PATCH]
        inside = tau[(row % PATCH) * PATCH + col % PATCH]
        rows = (patch // grid) * PATCH + inside // PATCH
        cols = (patch % grid) * PATCH + inside % PATCH
        return rows * image_size + cols
    # The pixels a level moves: the first of one seeded order of all, so levels nest.
    moved = _order(derive_key(PERMUTATION_SEED, 0, image_size), n)[: round(percent * n / 100)]
    source = np.arange(n)
    source[moved] = moved[_order(derive_key(PERMUTATION_SEED, 1, image_size, percent), len(moved))]
    return source
