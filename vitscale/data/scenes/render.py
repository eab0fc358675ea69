"""Pixels of the scenes world (:mod:`.world`, decided by :mod:`.contents`), with torch
operations that run where the tensors are: in training, on the CPU of the loader's
workers (:class:`SceneImages`); on a GPU where asked (``render(..., device=...)``: ``benchmarks/scenes_render.py --device cuda``),
its layout copied there in one non-blocking copy per batch.

Drawing order: a smooth clutter field in two colours of one brightness range (a bank of
value-noise fields made once per resolution and device), clutter fragments anywhere, then
the parts in their cells, each in a colour of the opposite brightness. Parts and fragments
are pre-drawn sprites (box-filtered bitmaps, anti-aliased, one per size in pixels), pasted
at whole-pixel positions by a gather and a scatter of a ``T x T`` window per object, so the
work per image is the background plus a few small windows: far ahead of what the study's
models consume (``benchmarks/scenes_render.py``).

An image depends only on (task, split, index, resolution): never on the batch it is drawn
in (every operation is per image), nor on the number of threads, nor on the x86-64 CPU
(only operations whose result IEEE 754 specifies exactly, each rounded once).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from .._hash import derive_key, uniform
from ..batch import Batch
from ..rendered import RenderedSplit
from . import contents as lay
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


def _bicubic(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Taps ``(n_out, 4)`` and weights ``(n_out, 4)`` of bicubic upsampling from ``n_in``
    to ``n_out`` samples (Keys' kernel with a = -0.75, pixel centres, clamped at the
    borders: what ``F.interpolate(mode="bicubic", align_corners=False)`` computes)."""
    a = -0.75
    src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    left = np.floor(src)
    t = src - left
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731
    weights = np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)
    taps = np.clip(left.astype(np.int64)[:, None] + np.arange(-1, 3), 0, n_in - 1)
    return taps, weights


def _fields(size: int, margin: int, device: torch.device) -> Tensor:
    """``(FIELDS, 1, size + margin, size + margin)`` smooth value noise in [0, 1] over the
    image (the margin is off the picture): a 5x5 grid of hashed values, bicubic-upsampled,
    rescaled to span [0, 1] (the clutter under the parts).

    In float64 numpy, one IEEE operation at a time in a fixed order, not torch's bicubic
    kernel, whose float32 sums are contracted into fused multiply-adds on some CPU
    capabilities and not on others (other last bits without AVX2)."""
    g = uniform(derive_key(w.WORLD_SEED, 0xF1E1D), np.arange(FIELDS), _NOISE_GRID**2)
    field = g.reshape(FIELDS, _NOISE_GRID, _NOISE_GRID)
    taps, weights = _bicubic(_NOISE_GRID, size)
    for axis in (2, 1):  # along x, then along y
        moved = np.moveaxis(field, axis, -1)
        total = moved[..., taps[:, 0]] * weights[:, 0]
        for k in (1, 2, 3):
            total = total + moved[..., taps[:, k]] * weights[:, k]
        field = np.moveaxis(total, -1, axis)
    lo = field.min(axis=(1, 2), keepdims=True)
    hi = field.max(axis=(1, 2), keepdims=True)
    unit = torch.from_numpy(((field - lo) / (hi - lo)).astype(np.float32))[:, None]
    return F.pad(unit, (0, margin, 0, margin)).to(device)


@lru_cache(maxsize=8)
def _bank(size: int, device: str) -> dict[str, Tensor | int]:
    """Everything drawn once per (resolution, device): each layer's sprites flattened to
    ``(bitmaps * sizes + 1, T * T)``, the last one empty (an absent object draws it)."""
    dev = torch.device(device)
    plo, phi = _sizes(w.PART_SCALE, size)
    clo, chi = _sizes(w.CLUTTER_SCALE, size)
    flat = lambda t: F.pad(rearrange(t, "n k y x -> (n k) (y x)"), (0, 0, 0, 1))  # noqa: E731
    wd = size + phi
    return {
        "parts": flat(_sprites(w.bitmaps(), plo, phi, phi, dev)),
        "part_sizes": (plo, phi),
        "clutter": flat(_sprites(w.clutter_bitmaps(), clo, chi, chi, dev)),
        "clutter_sizes": (clo, chi),
        "fields": _fields(size, phi, dev),
        # a window's pixels, as offsets in the flattened canvas from its top-left corner
        "part_window": _window(phi, wd, dev),
        "clutter_window": _window(chi, wd, dev),
    }


def _window(t: int, width: int, device: torch.device) -> Tensor:
    ar = torch.arange(t, device=device)
    return rearrange(ar[:, None] * width + ar[None, :], "y x -> (y x)")


def _range(u: np.ndarray, lo_hi: tuple[float, float]) -> np.ndarray:
    """``u`` scaled to a brightness range of [0, 1], expressed in the images' [-1, 1]."""
    lo, hi = np.float32(2.0 * lo_hi[0] - 1.0), np.float32(2.0 * lo_hi[1] - 1.0)
    return lo + u * (hi - lo)


def _colour(u: np.ndarray, light: np.ndarray) -> np.ndarray:
    """(..., 3) colours in [-1, 1] from (..., 3) draws, in the light or the dark range as
    ``light`` (...) says. Every pixel is a convex combination of such colours, so the
    canvas is drawn in the images' range directly."""
    return np.where(light[..., None], _range(u, w.LIGHT), _range(u, w.DARK))


def _layers(scene: lay.Scene, size: int, bank: dict) -> dict[str, np.ndarray]:
    """Per drawn object (clutter fragments first, then parts; L layers): its sprite row
    ``(L, B)``, the flattened canvas offset of its window's corner ``(L, B)`` and its
    colour ``(L, B, 3)``; and the background's colours ``(2, B, 3)`` and field ``(B,)``.
    Small arrays: numpy, where an operation costs a microsecond, not torch's several."""
    u = scene.u.astype(np.float32)
    width = size + bank["part_sizes"][1]
    light_bg = u[:, lay.POLARITY][:, 0] < 0.5
    background = _colour(rearrange(u[:, lay.BACKGROUND], "b (k c) -> k b c", c=3), light_bg)
    field = np.minimum((u[:, lay.FIELD][:, 0] * FIELDS).astype(np.int64), FIELDS - 1)

    def sprite_rows(bitmap, size_draw, present, sizes, count):
        lo, hi = sizes
        k = size_draw * (hi - lo + 1)
        size_px = lo + np.minimum(k.astype(np.int64), hi - lo)
        row = bitmap * (hi - lo + 1) + size_px - lo
        return np.where(present, row, count * (hi - lo + 1)), size_px

    # clutter fragments, anywhere, each light or dark at random
    f = rearrange(u[:, lay.CLUTTER], "b (k f) -> f k b", k=w.MAX_CLUTTER)
    n_clutter = len(w.clutter_bitmaps())
    bitmap = np.minimum((f[1] * n_clutter).astype(np.int64), n_clutter - 1)
    c_rows, c_size = sprite_rows(bitmap, f[2], f[0] < 0.75, bank["clutter_sizes"], n_clutter)
    c_y = (f[4] * (size - c_size + 1)).astype(np.int64)
    c_x = (f[3] * (size - c_size + 1)).astype(np.int64)
    c_colour = _colour(rearrange(f[5:8], "c k b -> k b c"), f[5] < 0.5)

    # parts, in their cells, in the opposite brightness to the background
    n_parts = len(w.bitmaps())
    p_rows, p_size = sprite_rows(
        scene.part.T, u[:, lay.SIZES].T, scene.valid.T, bank["part_sizes"], n_parts
    )
    jitter = rearrange(u[:, lay.JITTER], "b (m xy) -> xy m b", xy=2)
    room = np.float32(size / w.GRID)
    cell = scene.cell.T
    p_y = (cell // w.GRID * room + jitter[1] * (room - p_size)).astype(np.int64)
    p_x = (cell % w.GRID * room + jitter[0] * (room - p_size)).astype(np.int64)
    p_colour = _colour(rearrange(u[:, lay.COLOURS], "b (m c) -> m b c", c=3), ~light_bg)
    return {
        "clutter_rows": c_rows,
        "clutter_corner": c_y * width + c_x,
        "clutter_colour": c_colour,
        "part_rows": p_rows,
        "part_corner": p_y * width + p_x,
        "part_colour": p_colour,
        "background": background,
        "field": field,
    }


def _paste(flat: Tensor, alpha: Tensor, corner: Tensor, window: Tensor, colour: Tensor) -> None:
    """Paint ``colour`` (B, 3) through ``alpha`` (B, T*T) into the window of offsets
    ``window`` (T*T) at ``corner`` (B,) of the flattened canvas ``flat`` (B, 3, H*W),
    which has a margin right and below wide enough for every window: a gather and a
    scatter of the window, nothing else."""
    index = (corner[:, None] + window[None, :])[:, None, :].expand(-1, 3, -1)
    pixels = flat.gather(2, index)
    pixels += alpha[:, None, :] * (colour[:, :, None] - pixels)
    flat.scatter_(2, index, pixels)


def _to_device(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, Tensor]:
    """``arrays`` on ``device`` in one copy: packed into one buffer (each at an 8-byte
    boundary, so each is a view of its dtype there), pinned and copied without the host
    waiting on a GPU. A copy each would be as many waits for the device, per batch."""
    sizes = [-(-a.nbytes // 8) * 8 for a in arrays.values()]
    starts = [int(x) for x in np.cumsum([0, *sizes[:-1]])]
    packed = np.zeros(sum(sizes), np.uint8)
    for a, start in zip(arrays.values(), starts, strict=True):
        packed[start : start + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    host = torch.from_numpy(packed)
    on = (host.pin_memory() if device.type == "cuda" else host).to(device, non_blocking=True)
    return {
        key: on[start : start + a.nbytes].view(torch.from_numpy(a[:0]).dtype).view(a.shape)
        for (key, a), start in zip(arrays.items(), starts, strict=True)
    }


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
    p = _to_device(_layers(scene, image_size, bank) | {"targets": scene.targets}, dev)
    s = image_size

    # 1. the clutter field, between two colours of the background's brightness (the
    # canvas has a margin right and below, where windows may reach; cropped at the end)
    c0, c1 = (rearrange(c, "b c -> b c 1 1") for c in p["background"])
    canvas = bank["fields"][p["field"]] * (c1 - c0) + c0  # two roundings, as on every device
    flat = rearrange(canvas, "b c h w -> b c (h w)")
    # 2. clutter fragments, then 3. the parts, one layer at a time
    for kind in ("clutter", "part"):
        sprites = bank["parts" if kind == "part" else "clutter"]
        for rows, corner, colour in zip(
            p[f"{kind}_rows"], p[f"{kind}_corner"], p[f"{kind}_colour"], strict=True
        ):
            _paste(flat, sprites[rows], corner, bank[f"{kind}_window"], colour)
    images = canvas[:, :, :s, :s].contiguous()
    return Batch(images=images, targets=p["targets"])


class SceneImages(RenderedSplit):
    """One split of a scenes task as a ``Dataset`` of (image, target)
    (:class:`~vitscale.data.rendered.RenderedSplit`)."""

    tasks = w.TASKS
    world = "scenes"
    size_range = (MIN_SIZE, MAX_SIZE)
    multilabel = property(lambda self: self.task.multilabel)

    def draw(self, indices: np.ndarray) -> Batch:
        return render(self.task, self.split, indices, self.image_size)

    def targets_of(self, indices: np.ndarray) -> np.ndarray:
        """(Primary) classes without drawing: what the example was made around."""
        return lay.primary_class(self.task, indices)
