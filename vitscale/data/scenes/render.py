"""Pixels of the scenes world (:mod:`.world`, decided by :mod:`.layout`), with torch
operations that run where the tensors are: the CPU in loader workers, or a GPU.

Drawing order: a smooth clutter field in two colours of one brightness range (a bank of
value-noise fields made once per resolution and device), clutter fragments anywhere, then
the parts in their cells, each in a colour of the opposite brightness. Parts and fragments
are pre-drawn sprites (box-filtered bitmaps, anti-aliased, one per size in pixels), pasted
at whole-pixel positions by a gather and a scatter of a ``T x T`` window per object, so the
work per image is the background plus a few small windows: far ahead of what the study's
models consume (``benchmarks/scenes_render.py``).

An image depends only on (task, split, index, resolution): never on the batch it is drawn
in (every operation is per image), nor on the number of threads.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import Tensor
from torch.utils.data import Dataset

from .._hash import derive_key, uniform
from ..batch import Batch
from . import layout as lay
from . import world as w

MIN_SIZE, MAX_SIZE = 32, 224
FIELDS = 256  # clutter fields in the bank
_NOISE_GRID = 5


def _sizes(scale: tuple[float, float], size: int) -> tuple[int, int]:
    """Smallest and largest sprite side in pixels at resolution ``size``."""
    return max(round(scale[0] * size), 2), max(round(scale[1] * size), 2)


def _sprites(bits: np.ndarray, lo: int, hi: int, window: int, device: torch.device) -> Tensor:
    """``(N, hi - lo + 1, T, T)`` coverage of each bitmap drawn ``s`` pixels wide, for
    ``s`` in ``lo..hi`` (top-left aligned in a ``T = window`` window): the bitmap
    upsampled 8x per pixel by nearest neighbour, then averaged over each pixel (box-filter
    anti-aliasing)."""
    n, g = bits.shape[0], bits.shape[-1]
    src = torch.from_numpy(bits.astype(np.float32)).reshape(n, 1, g, g)
    out = torch.zeros(n, hi - lo + 1, window, window)
    for k, s in enumerate(range(lo, hi + 1)):
        fine = F.interpolate(src, size=(8 * s, 8 * s), mode="nearest")
        out[:, k, :s, :s] = F.avg_pool2d(fine, 8)[:, 0]
    return out.to(device)


def _fields(size: int, margin: int, device: torch.device) -> Tensor:
    """``(FIELDS, 1, size + margin, size + margin)`` smooth value noise in [0, 1] over the
    image (the margin is off the picture): a 5x5 grid of hashed values, bicubic-upsampled,
    rescaled to span [0, 1] (the clutter under the parts)."""
    g = uniform(derive_key(w.WORLD_SEED, 0xF1E1D), np.arange(FIELDS), _NOISE_GRID**2)
    grid = torch.from_numpy(g.astype(np.float32)).reshape(FIELDS, 1, _NOISE_GRID, _NOISE_GRID)
    field = F.interpolate(grid, size=(size, size), mode="bicubic", align_corners=False)
    lo = field.amin(dim=(2, 3), keepdim=True)
    hi = field.amax(dim=(2, 3), keepdim=True)
    return F.pad((field - lo) / (hi - lo), (0, margin, 0, margin)).to(device)


@lru_cache(maxsize=8)
def _bank(size: int, device: str) -> dict[str, Tensor | int]:
    """Everything drawn once per (resolution, device)."""
    dev = torch.device(device)
    plo, phi = _sizes(w.PART_SCALE, size)
    clo, chi = _sizes(w.CLUTTER_SCALE, size)
    return {
        "parts": _sprites(w.bitmaps(), plo, phi, phi, dev),
        "part_lo": plo,
        "clutter": _sprites(w.clutter_bitmaps(), clo, chi, phi, dev),
        "clutter_lo": clo,
        "fields": _fields(size, phi, dev),
    }


def _range(u: Tensor, lo_hi: tuple[float, float]) -> Tensor:
    """``u`` scaled to a brightness range of [0, 1], expressed in the images' [-1, 1]."""
    lo, hi = 2.0 * lo_hi[0] - 1.0, 2.0 * lo_hi[1] - 1.0
    return lo + u * (hi - lo)


def _colour(u: Tensor, light: Tensor) -> Tensor:
    """(B, 3) colours in [-1, 1] from (B, 3) draws, in the light or the dark range per
    example. Every pixel is a convex combination of such colours, so the canvas is drawn
    in the images' range directly."""
    return torch.where(light[:, None], _range(u, w.LIGHT), _range(u, w.DARK))


def _paste(canvas: Tensor, alpha: Tensor, y0: Tensor, x0: Tensor, colour: Tensor) -> None:
    """Paint ``colour`` (B, 3) through ``alpha`` (B, T, T) at rows ``y0`` and columns
    ``x0`` (B,) of ``canvas`` (B, 3, H, W), which has at least ``T`` pixels of margin
    right and below: a gather and a scatter of the window, nothing else."""
    b, _, h, wd = canvas.shape
    t = alpha.shape[-1]
    ar = torch.arange(t, device=canvas.device)
    rows = rearrange(y0, "b -> b 1 1") + rearrange(ar, "t -> 1 t 1")
    cols = rearrange(x0, "b -> b 1 1") + rearrange(ar, "t -> 1 1 t")
    index = repeat(rows * wd + cols, "b y x -> b c (y x)", c=3)
    flat = rearrange(canvas, "b c h w -> b c (h w)")
    window = flat.gather(2, index)
    a = rearrange(alpha, "b y x -> b 1 (y x)")
    window += a * (rearrange(colour, "b c -> b c 1") - window)
    flat.scatter_(2, index, window)


def render(
    task: w.SceneTask, split: str, indices: np.ndarray, image_size: int, *, device="cpu"
) -> Batch:
    """Images ``(B, 3, S, S)`` in [-1, 1] on ``device`` and their targets (class indices,
    or multi-hot float vectors upstream)."""
    if not MIN_SIZE <= image_size <= MAX_SIZE:
        raise ValueError(f"scenes image_size must be in [{MIN_SIZE}, {MAX_SIZE}], got {image_size}")
    scene = lay.decide(task, split, indices)
    dev = torch.device(device)
    bank = _bank(image_size, str(dev))
    s = image_size
    u = torch.from_numpy(scene.u.astype(np.float32)).to(dev)
    light_bg = u[:, lay.POLARITY][:, 0] < 0.5
    # 1. the clutter field, between two colours of the background's brightness (the
    # canvas has a margin right and below, where windows may reach; cropped at the end)
    c0 = _colour(u[:, lay.BACKGROUND][:, :3], light_bg)
    c1 = _colour(u[:, lay.BACKGROUND][:, 3:], light_bg)
    which = (u[:, lay.FIELD][:, 0] * FIELDS).long().clamp_(max=FIELDS - 1)
    per_image = lambda c: rearrange(c, "b c -> b c 1 1")  # noqa: E731
    canvas = torch.addcmul(per_image(c0), bank["fields"][which], per_image(c1 - c0))

    # 2. clutter fragments, anywhere, each light or dark at random
    frag = rearrange(u[:, lay.CLUTTER], "b (k f) -> k f b", k=w.MAX_CLUTTER)
    sprites, lo = bank["clutter"], bank["clutter_lo"]
    for f in frag:
        size = lo + (f[2] * sprites.shape[1]).long().clamp_(max=sprites.shape[1] - 1)
        bitmap = (f[1] * len(sprites)).long().clamp_(max=len(sprites) - 1)
        alpha = sprites[bitmap, size - lo] * (f[0] < 0.75).float()[:, None, None]
        y0 = (f[4] * (s - size + 1)).long()
        x0 = (f[3] * (s - size + 1)).long()
        _paste(canvas, alpha, y0, x0, _colour(rearrange(f[5:8], "c b -> b c"), f[5] < 0.5))

    # 3. the parts, in their cells, in the opposite brightness to the background
    sprites, lo = bank["parts"], bank["part_lo"]
    part = torch.from_numpy(scene.part).to(dev)
    valid = torch.from_numpy(scene.valid).to(dev)
    cell = torch.from_numpy(scene.cell).to(dev)
    sizes = lo + (u[:, lay.SIZES] * sprites.shape[1]).long().clamp_(max=sprites.shape[1] - 1)
    jitter = rearrange(u[:, lay.JITTER], "b (m xy) -> b m xy", xy=2)
    colours = rearrange(u[:, lay.COLOURS], "b (m c) -> b m c", c=3)
    room = s / w.GRID
    for j in range(lay.MAX_OBJECTS):
        size = sizes[:, j]
        alpha = sprites[part[:, j], size - lo] * valid[:, j].float()[:, None, None]
        row, col = cell[:, j] // w.GRID, cell[:, j] % w.GRID
        y0 = (row * room + jitter[:, j, 1] * (room - size)).long()
        x0 = (col * room + jitter[:, j, 0] * (room - size)).long()
        _paste(canvas, alpha, y0, x0, _colour(colours[:, j], ~light_bg))

    images = canvas[:, :, :s, :s].contiguous()
    return Batch(images=images, targets=torch.from_numpy(scene.targets).to(dev))


class SceneImages(Dataset):
    """One split of a scenes task as a map-style ``Dataset``: ``__getitems__`` draws a
    whole batch at once; ``ds[i]`` is bit-identical to row ``i`` of any batch holding it."""

    selection = None  # only a sharded set records which examples it selected

    def __init__(self, task: str | w.SceneTask, *, split: str, image_size: int) -> None:
        self.task = w.TASKS[task] if isinstance(task, str) else task
        self.length = self.task.split_size(split)
        if not MIN_SIZE <= image_size <= MAX_SIZE:
            raise ValueError(
                f"scenes image_size must be in [{MIN_SIZE}, {MAX_SIZE}], got {image_size}"
            )
        self.split = split
        self.image_size = image_size

    name = property(lambda self: self.task.name)
    classes = property(lambda self: list(self.task.classes))
    num_classes = property(lambda self: self.task.num_classes)
    multilabel = property(lambda self: self.task.multilabel)

    def __len__(self) -> int:
        return self.length

    def targets_of(self, indices: np.ndarray) -> np.ndarray:
        """(Primary) classes without drawing: what the example was made around."""
        return lay.primary_class(self.task, indices)

    def _check(self, indices) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        bad = (indices < -self.length) | (indices >= self.length)
        if bad.any():
            raise IndexError(f"index {indices[bad][0]} out of range for {self.length} examples")
        return np.where(indices < 0, indices + self.length, indices)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        images, targets = render(self.task, self.split, self._check([index]), self.image_size)
        return images[0], targets[0]

    def __getitems__(self, indices: list[int]) -> Batch:
        return render(self.task, self.split, self._check(indices), self.image_size)

    def __repr__(self) -> str:
        return (
            f"SceneImages({self.name!r}, split={self.split!r}, "
            f"image_size={self.image_size}, n={self.length})"
        )
