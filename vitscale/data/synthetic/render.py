"""Batched torch renderer of the synthetic family, and its ``Dataset``.

An image is a pure function of (task, split, index, resolution): the per-example
parameters come from the counter-based hash in :mod:`vitscale.data._hash`, the pixels from
element-wise torch arithmetic on them. Nothing is stored, so the upstream train split can
have 10^9 examples, and a whole batch is one vectorised computation (``__getitems__``),
which keeps generation far ahead of what the demo models consume (measured in
``benchmarks/data_throughput.py``).

Scene, in drawing order (all geometry in image-relative units, so any resolution renders
the same scene; edges are anti-aliased over one pixel):

1. background: a two-colour linear gradient plus 6x6 value noise (blotchy clutter);
2. distractor strokes: up to six line segments of random length, width and colour, some
   behind the object and some over it (occluding), some in the object's colour;
3. the object that carries the label: one glyph (``kind="glyph"``), two glyphs side by side
   (``"pair"``), or a square/disc patch filled with a periodic texture (``"texture"``), at
   a random position, scale and aspect, in a colour of the opposite brightness to the
   background (dark-on-light or light-on-dark, per image).

Only the object's shape or pattern is informative (why: :mod:`.vocabulary`).

Bit-exactness: only operations whose result IEEE 754 specifies exactly are used (+, -, *,
/, floor, min/max/clamp, abs, gathers and a correctly rounded square root, :func:`_sqrt`),
so an image is the same on every x86-64 CPU, in any batch, with any number of threads.

The torch operations here are the reference, and the only path for textures; glyph and
pair scenes draw the same pixels faster through :mod:`vitscale.data.synthetic._fused`.
"""

from __future__ import annotations

import numpy as np
import torch
from einops import rearrange, repeat
from torch import Tensor

from .._hash import derive_key, uniform
from ..batch import Batch
from ..rendered import RenderedSplit
from . import _fused, permuted
from . import draws as sc
from .vocabulary import GLYPH_GRID, TASKS, TEXTURES, WORLD_SEED, SyntheticTask, glyph_bank

MIN_SIZE, MAX_SIZE = 32, 224
_SPLIT_STREAM = {"train": 0, "val": 1, "test": 2}
# Render in chunks of about this many pixels: large enough to amortise per-op overhead,
# small enough to stay in cache. Results do not depend on it.
_CHUNK_PIXELS = 256 * 32 * 32


def _range(u: np.ndarray, lo_hi: tuple[float, float]) -> np.ndarray:
    return lo_hi[0] + u * (lo_hi[1] - lo_hi[0])


def _t(a: np.ndarray) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def _pixels(size: int) -> Tensor:
    """Pixel-centre coordinates in [0, 1]."""
    return (torch.arange(size, dtype=torch.float32) + 0.5) / size


def _sqrt(t: Tensor) -> Tensor:
    """Square root in place, correctly rounded (IEEE 754), through numpy's loop, which
    uses the CPU's sqrt instruction. Not ``torch.sqrt``: on the CPU it calls MKL's vector
    math (``vsSqrt``), which is accurate to one ulp rather than correctly rounded and
    picks its kernel by CPU model, not by ``ATEN_CPU_CAPABILITY``, so an AMD EPYC and an
    Intel Xeon return different last bits for the same input."""
    a = t.numpy()
    np.sqrt(a, out=a)
    return t


def _over(canvas: Tensor, coverage: Tensor, colour: Tensor) -> None:
    """Paint ``colour`` (B, 3) over ``canvas`` (B, 3, H, W) where ``coverage`` (B, H, W)."""
    delta = rearrange(colour, "b c -> b c 1 1") - canvas
    delta.mul_(rearrange(coverage, "b h w -> b 1 h w"))
    canvas.add_(delta)


def _edge(signed_px: Tensor) -> Tensor:
    """Coverage from a signed distance in pixels (positive inside): a one-pixel ramp."""
    return (signed_px + 0.5).clamp_(0.0, 1.0)


def _colours(u: np.ndarray, light: np.ndarray) -> Tensor:
    """(B, 3) colours from (B, 3) draws, each in the light or dark range per example."""
    return _t(np.where(light[:, None], _range(u, sc.LIGHT), _range(u, sc.DARK)))


def _lerp_weights(size: int, cells: int) -> tuple[Tensor, Tensor]:
    """Left neighbour and weight of each pixel centre on a grid of ``cells`` cell centres."""
    g = (_pixels(size) * cells - 0.5).clamp_(0.0, cells - 1.0)
    i0 = g.floor().long().clamp_(max=cells - 2)
    return i0, g - i0


def _background_grid(u: np.ndarray, light_bg: np.ndarray) -> Tensor:
    """(B, 3, G, G) background at the noise grid's cell centres: a two-colour linear
    gradient plus value noise (per-channel offsets), to be bilinearly upsampled: smooth
    blotches of clutter at a few scales of the objects. Small arrays: float32 numpy (the
    same IEEE operations as torch's, without its per-call overhead)."""
    f32 = np.float32
    c0, c1 = (
        rearrange(_colours(c, light_bg).numpy(), "b c -> b c 1 1")
        for c in (u[:, sc.BG_COLOURS][:, :3], u[:, sc.BG_COLOURS][:, 3:])
    )
    d = (u[:, sc.GRADIENT] * 2.0 - 1.0).astype(f32)
    noise = ((u[:, sc.NOISE] - 0.5) * sc.NOISE_AMPLITUDE).astype(f32)
    grid = rearrange(noise, "b (c gy gx) -> b c gy gx", c=3, gy=sc.NOISE_GRID)
    # Bake the gradient into the grid: bilinear interpolation reproduces a linear ramp.
    g = (np.arange(sc.NOISE_GRID, dtype=f32) + f32(0.5)) / f32(sc.NOISE_GRID) - f32(0.5)
    ramp = rearrange(g, "x -> 1 1 1 x") * rearrange(d[:, 0], "b -> b 1 1 1")
    ramp = (ramp + rearrange(g, "y -> 1 1 y 1") * rearrange(d[:, 1], "b -> b 1 1 1")) + f32(0.5)
    ramp = np.clip(ramp, f32(0.0), f32(1.0))
    return torch.from_numpy(np.ascontiguousarray(grid + c0 + ramp * (c1 - c0)))


def _upsample(grid: Tensor, size: int) -> Tensor:
    """Separable bilinear upsampling (pixel centres, clamped at the borders): along x on
    the small grid, then along y with two row gathers."""
    i0, w = _lerp_weights(size, sc.NOISE_GRID)
    grid = rearrange(grid, "b c gy gx -> (b c gy) gx")
    left, right = grid.index_select(1, i0), grid.index_select(1, i0 + 1)
    rows = rearrange(
        right.sub_(left).mul_(w).add_(left), "(b c gy) w -> (b c) gy w", c=3, gy=sc.NOISE_GRID
    )
    top, bottom = rows.index_select(1, i0), rows.index_select(1, i0 + 1)
    bottom.sub_(top).mul_(rearrange(w, "h -> h 1"))
    return rearrange(top.add_(bottom), "(b c) h w -> b c h w", c=3)


def _stroke_layer(
    u: np.ndarray, light_bg: np.ndarray, size: int, front: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """Distractor line segments behind (``front=False``) or over the object.

    Each example has up to ``sc.MAX_STROKES`` segments; those of one layer share a colour, whose
    brightness is the background's or the object's at random, so colour alone cannot find
    the object. Returns the layer's segments ``(B, sc.MAX_STROKES, 5)`` (end points and reach,
    in pixels; the first ``counts[b]`` rows of example ``b`` are drawn), ``counts (B,)``
    int32 and the colours ``(B, 3)``.
    """
    s = rearrange(u[:, sc.STROKES], "b (k f) -> b k f", k=sc.MAX_STROKES)
    on = (s[..., 0] < sc.STROKE_P) & ((s[..., 1] < sc.STROKE_FRONT_P) == front)
    order = np.argsort(~on, axis=1, kind="stable")  # each example's drawn segments first
    f = np.take_along_axis(s, order[..., None], axis=1)
    ends = f[..., 2:6] * size
    reach = _range(f[..., 6], sc.STROKE_HALF_WIDTH) * size + 0.5
    segs = _t(np.concatenate([ends, reach[..., None]], axis=-1))
    counts = torch.from_numpy(on.sum(axis=1).astype(np.int32))
    c = u[:, sc.STROKE_COLOURS][:, 4:] if front else u[:, sc.STROKE_COLOURS][:, :4]
    colour = _colours(c[:, 1:], np.where(c[:, 0] < 0.5, light_bg, ~light_bg))
    return segs, counts, colour


def _strokes(canvas: Tensor, segs: Tensor, counts: Tensor, colour: Tensor) -> None:
    """Draw one stroke layer (:func:`_stroke_layer`). Round ``r`` draws every example's
    ``r``-th segment, so the work is proportional to the segments drawn, not the slots."""
    if not bool((counts > 0).any()):
        return
    size = canvas.shape[-1]
    pix = _pixels(size) * size  # pixel centres, in pixels
    x = rearrange(pix, "w -> 1 1 w")
    y = rearrange(pix, "h -> 1 h 1")
    ink = torch.zeros(len(canvas), size, size)
    for r in range(int(counts.max())):
        sel = torch.nonzero(counts > r).flatten()
        ax, ay, bx, by, reach = rearrange(segs[sel, r], "n f -> f n 1 1")
        dx, dy = bx - ax, by - ay
        inv = 1.0 / (dx * dx + dy * dy + 1e-6)
        px, py = x - ax, y - ay
        t = (px * (dx * inv) + py * (dy * inv)).clamp_(0.0, 1.0)
        qx, qy = px - t * dx, py - t * dy
        dist = _sqrt(qx.mul_(qx).add_(qy.mul_(qy)))
        cov = dist.neg_().add_(reach).clamp_(0.0, 1.0)  # one-pixel anti-aliased edge
        if len(sel) == len(canvas):
            torch.maximum(ink, cov, out=ink)
        else:
            ink.index_copy_(0, sel, torch.maximum(ink.index_select(0, sel), cov))
    _over(canvas, ink, colour)


def _glyph(canvas: Tensor, bitmaps: Tensor, box: Tensor, colour: Tensor) -> None:
    """Draw one glyph per example (:func:`_glyph_layers`): bilinear lookup of its
    zero-padded bitmap ``(B, P, P)`` in its box, sharpened to one-pixel edges."""
    size, pad = canvas.shape[-1], bitmaps.shape[-1]
    pix = rearrange(_pixels(size), "n -> 1 n")
    lo_x, side_x, lo_y, side_y, cell_px = rearrange(box, "b f -> f b 1")
    # Position of each pixel in the box, in glyph cells of the padded bitmap.
    gx = ((pix - lo_x) / side_x * GLYPH_GRID + 0.5).clamp_(0.0, pad - 1.0)
    gy = ((pix - lo_y) / side_y * GLYPH_GRID + 0.5).clamp_(0.0, pad - 1.0)
    ix, iy = gx.floor().long().clamp_(max=pad - 2), gy.floor().long().clamp_(max=pad - 2)
    wx, wy = gx - ix, gy - iy
    r0 = bitmaps.gather(1, repeat(iy, "b h -> b h k", k=pad))
    r1 = bitmaps.gather(1, repeat(iy + 1, "b h -> b h k", k=pad))
    rows = r0 + rearrange(wy, "b h -> b h 1") * (r1 - r0)
    c0 = rows.gather(2, repeat(ix, "b w -> b h w", h=size))
    c1 = rows.gather(2, repeat(ix + 1, "b w -> b h w", h=size))
    value = c0 + rearrange(wx, "b w -> b 1 w") * (c1 - c0)
    # The interpolated bitmap crosses 1/2 on cell edges with slope 1/cell; scaling by the
    # cell size in pixels turns that into a one-pixel anti-aliased edge.
    _over(canvas, _edge((value - 0.5) * rearrange(cell_px, "b 1 -> b 1 1")), colour)


def _tri(t: Tensor) -> Tensor:
    """Distance to the nearest integer (0 on the integers, 1/2 halfway), period 1."""
    return (t - t.floor() - 0.5).abs_().neg_().add_(0.5)


def _texture_sd(kind: int, px: Tensor, py: Tensor, cx: Tensor, cy: Tensor) -> Tensor:
    """Signed distance (in periods, > 0 inside the ink) of pattern ``kind``.

    ``px, py`` are phase-shifted coordinates in periods; ``cx, cy`` the same coordinates
    relative to the patch centre (for the radial patterns).
    """
    name = TEXTURES[kind]
    if name == "horizontal stripes":
        return _tri(py) - 0.25
    if name == "vertical stripes":
        return _tri(px) - 0.25
    if name == "rising diagonal stripes":
        return _tri((px + py) * 0.7071) - 0.25
    if name == "falling diagonal stripes":
        return _tri((px - py) * 0.7071) - 0.25
    if name == "checkerboard":
        a, b = _tri(px) - 0.25, _tri(py) - 0.25
        return torch.minimum(a.abs(), b.abs()) * (a * b).sign()
    if name == "polka dots":
        dx, dy = 0.5 - _tri(px), 0.5 - _tri(py)
        return 0.3 - _sqrt(dx * dx + dy * dy)
    if name == "grid lines":
        return 0.12 - torch.minimum(_tri(px), _tri(py))
    if name == "concentric rings":
        return _tri(_sqrt(cx * cx + cy * cy)) - 0.25
    if name == "chevrons":
        return _tri(cy + cx.abs()) - 0.25
    if name == "concentric diamonds":
        return _tri(cx.abs() + cy.abs()) - 0.25
    raise AssertionError(name)


def _texture(canvas: Tensor, u: np.ndarray, labels: np.ndarray, light_bg: np.ndarray) -> None:
    size = canvas.shape[-1]
    pix = _pixels(size)
    o = u[:, sc.OBJECT]
    radius = _range(o[:, 0], sc.PATCH_RADIUS)
    cx = radius + o[:, 1] * (1.0 - 2.0 * radius)
    cy = radius + o[:, 2] * (1.0 - 2.0 * radius)
    disc = o[:, 3] < 0.5
    period = _range(o[:, 4], sc.PERIOD)
    x = rearrange(pix, "w -> 1 1 w")
    y = rearrange(pix, "h -> 1 h 1")
    col = lambda a: rearrange(_t(a), "b -> b 1 1")  # noqa: E731
    rx, ry = (x - col(cx)) * size, (y - col(cy)) * size  # pixels from the patch centre
    r_px = col(radius * size)
    inside = torch.where(
        col(disc.astype(np.float32)) > 0.5,
        r_px - _sqrt(rx * rx + ry * ry),
        r_px - torch.maximum(rx.abs(), ry.abs()),
    )
    patch = _edge(inside)
    _over(canvas, patch, _colours(o[:, 5:8], light_bg))  # ground of the patch

    period_px = col(period * size)
    cxp, cyp = rx / period_px, ry / period_px
    pxp, pyp = cxp + col(o[:, 8]), cyp + col(o[:, 9])
    ink = torch.zeros_like(patch)
    for kind in np.unique(labels):
        sel = torch.from_numpy(np.nonzero(labels == kind)[0])
        pick = lambda t, sel=sel: t.index_select(0, sel)  # noqa: E731
        sd = _texture_sd(int(kind), pick(pxp), pick(pyp), pick(cxp), pick(cyp))
        ink.index_copy_(0, sel, _edge(sd * pick(period_px)).expand(len(sel), size, size))
    _over(canvas, ink * patch, _colours(o[:, 10:13], ~light_bg))


def _glyph_layers(
    task: SyntheticTask, u: np.ndarray, labels: np.ndarray, light_bg: np.ndarray, size: int
) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The object of a glyph or pair task, one layer per glyph: zero-padded bitmaps
    ``(B, P, P)``, boxes ``(B, 5)`` (left, width, top, height in image units, and the
    bitmap cell in pixels) and colours ``(B, 3)``."""
    bank = glyph_bank(max(task.glyphs) + 1)
    o = u[:, sc.OBJECT]
    if task.kind == "glyph":
        glyphs = [np.asarray(task.glyphs)[labels]]
        scale_range, halves = sc.GLYPH_SCALE, [(0.0, 1.0)]
    else:
        pairs = np.asarray(task.pairs)[labels]
        swap = o[:, 17] < 0.5
        glyphs = [
            np.where(swap, pairs[:, 1], pairs[:, 0]),
            np.where(swap, pairs[:, 0], pairs[:, 1]),
        ]
        scale_range, halves = sc.PAIR_SCALE, [(0.0, 0.5), (0.5, 1.0)]
    # A pair splits the image in halves, side by side or one above the other; each glyph
    # stays inside its half, so the two never overlap.
    side_by_side = o[:, 16] < 0.5
    layers = []
    for j, (lo, hi) in enumerate(halves):
        f = o[:, 8 * j : 8 * j + 8]  # scale, aspect x, aspect y, position x, y, rgb
        scale = _range(f[:, 0], scale_range)
        hx = scale / 2 * (1.0 + sc.ASPECT * (2 * f[:, 1] - 1))
        hy = scale / 2 * (1.0 + sc.ASPECT * (2 * f[:, 2] - 1))
        lo_x, hi_x = np.where(side_by_side, lo, 0.0), np.where(side_by_side, hi, 1.0)
        lo_y, hi_y = np.where(side_by_side, 0.0, lo), np.where(side_by_side, 1.0, hi)
        cx = lo_x + hx + f[:, 3] * np.maximum(hi_x - lo_x - 2 * hx, 0.0)
        cy = lo_y + hy + f[:, 4] * np.maximum(hi_y - lo_y - 2 * hy, 0.0)
        padded = np.zeros((len(u), GLYPH_GRID + 2, GLYPH_GRID + 2), dtype=np.float32)
        padded[:, 1:-1, 1:-1] = bank[glyphs[j]]
        cell_px = 2.0 * np.minimum(hx, hy) * size / GLYPH_GRID
        box = np.stack([cx - hx, 2.0 * hx, cy - hy, 2.0 * hy, cell_px], axis=1)
        layers.append((torch.from_numpy(padded), _t(box), _colours(f[:, 5:8], ~light_bg)))
    return layers


def render(
    task: SyntheticTask | permuted.MovedTask,
    split: str,
    indices: np.ndarray,
    image_size: int,
    *,
    fused: bool = True,
) -> Batch:
    """Images ``(B, 3, S, S)`` in [-1, 1] and int64 labels for ``indices`` of one split.

    Glyph and pair scenes are drawn by the fused C++ kernel (:mod:`._fused`) where it can be
    built, else (and with ``fused=False``, the reference) by torch operations: the same
    pixels either way. A moved task (:mod:`.permuted`) is its glyph-world task's batch
    with every image's pixels gathered from :func:`.permuted.source_pixels`."""
    if isinstance(task, permuted.MovedTask):
        batch = render(task.base, split, indices, image_size, fused=fused)
        source = torch.from_numpy(permuted.source_pixels(task.world, image_size))
        flat = rearrange(batch.images, "b c h w -> b c (h w)").index_select(2, source)
        images = rearrange(flat, "b c (h w) -> b c h w", h=image_size)
        return Batch(images=images, targets=batch.targets)
    if not MIN_SIZE <= image_size <= MAX_SIZE:
        raise ValueError(
            f"synthetic image_size must be in [{MIN_SIZE}, {MAX_SIZE}], got {image_size}"
        )
    indices = np.asarray(indices, dtype=np.int64)
    key = derive_key(WORLD_SEED, task.stream, _SPLIT_STREAM[split])
    images = torch.empty(len(indices), 3, image_size, image_size)
    step = max(_CHUNK_PIXELS // image_size**2, 1)
    chunks = [slice(i, i + step) for i in range(0, len(indices), step)]
    module = _fused.kernel() if fused and task.kind != "texture" else None
    if module is not None:
        _draw_fused(images, task, key, indices, chunks, module)
    else:
        _draw_torch(images, task, key, indices, chunks)
    return Batch(images=images, targets=torch.from_numpy(indices % task.num_classes))


def _draw_fused(
    images: Tensor, task: SyntheticTask, key: int, indices: np.ndarray, chunks: list[slice], module
) -> None:
    """Glyph or pair scenes into ``images``, chunk by chunk, parameters and pixels in C++
    (:mod:`._fused`)."""
    size = images.shape[-1]
    pair = task.kind == "pair"
    classes = torch.from_numpy(np.asarray(task.pairs if pair else task.glyphs, dtype=np.int64))
    bank = torch.from_numpy(glyph_bank(max(task.glyphs) + 1).astype(np.float32))
    scale = sc.PAIR_SCALE if pair else sc.GLYPH_SCALE
    signed_key = key - (1 << 64) if key >= 1 << 63 else key  # the uint64 key's bits, signed
    i0, w = _lerp_weights(size, sc.NOISE_GRID)
    pix = _pixels(size)
    pix_px = pix * size
    for chunk in chunks:
        idx = torch.from_numpy(indices[chunk])
        params = module.glyph_scene_params(signed_key, idx, size, pair, classes, bank, *scale)
        module.render_glyph_scenes(images[chunk], params[0], i0, w, pix, pix_px, *params[1:])


def _draw_torch(
    images: Tensor, task: SyntheticTask, key: int, indices: np.ndarray, chunks: list[slice]
) -> None:
    """Scenes into ``images``, chunk by chunk, by torch operations (the reference; the
    textures' only path)."""
    size = images.shape[-1]
    for chunk in chunks:
        idx = indices[chunk]
        u = uniform(key, idx, sc.NUM_FIELDS)
        labels = idx % task.num_classes
        light_bg = u[:, sc.POLARITY][:, 0] < 0.5
        grid = _background_grid(u, light_bg)
        behind, front = (_stroke_layer(u, light_bg, size, f) for f in (False, True))
        canvas = _upsample(grid, size)
        _strokes(canvas, *behind)
        if task.kind == "texture":
            _texture(canvas, u, labels, light_bg)
        else:
            for layer in _glyph_layers(task, u, labels, light_bg, size):
                _glyph(canvas, *layer)
        _strokes(canvas, *front)
        images[chunk] = canvas.clamp_(0.0, 1.0).mul_(2.0).sub_(1.0)


class SyntheticImages(RenderedSplit):
    """One split of a glyph-world task as a ``Dataset`` of (image, label)
    (:class:`~vitscale.data.rendered.RenderedSplit`)."""

    tasks = TASKS | permuted.TASKS
    world = "synthetic"
    size_range = (MIN_SIZE, MAX_SIZE)
    multilabel = False

    def draw(self, indices: np.ndarray) -> Batch:
        return render(self.task, self.split, indices, self.image_size)

    def targets_of(self, indices: np.ndarray) -> np.ndarray:
        """Labels without rendering: example ``i`` has class ``i mod num_classes``."""
        return np.asarray(indices, dtype=np.int64) % self.num_classes
