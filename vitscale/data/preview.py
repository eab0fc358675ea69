"""A grid of samples with their class names, as a PNG: ``vitscale data preview NAME``.

A row shows how much the images of one class vary (position, scale, colour, clutter for
the synthetic family), the rows how classes differ. Real sources are shown with the
evaluation transform (resize and centre crop), the synthetic family as rendered.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from torch import Tensor
from torch.utils.data import Dataset

from .batch import collate, examples
from .build import build_dataset

_MIN_TILE = 96  # pixels on screen: small images are enlarged (nearest neighbour)
_GAP = 4
_SCAN_BLOCK = 1 << 16


def pick_examples(dataset: Dataset, *, rows: int, cols: int) -> tuple[list[int], list[list[int]]]:
    """``(classes, indices)``: ``rows`` classes spread evenly over the dataset's classes
    and, for each, the first ``cols`` indices of that class (fewer if the split has fewer).

    Labels come from ``dataset.targets_of``, so no image is decoded (a multi-label set's
    rows are among the labels its examples are filed under); the split is scanned
    in blocks until every chosen class has ``cols`` examples (the synthetic upstream split
    cycles through its classes, so a 10^9-example split stops after one block).
    """
    if rows < 1 or cols < 1:
        raise ValueError(f"need rows >= 1 and cols >= 1, got rows={rows}, cols={cols}")
    primary = np.arange(dataset.num_classes)
    if getattr(dataset, "multilabel", False):  # rows of the labels examples are filed under
        first = np.arange(min(_SCAN_BLOCK, len(dataset)))
        primary = np.unique(np.asarray(dataset.targets_of(first)))
    rows = min(rows, len(primary))
    classes = sorted({int(primary[round(x)]) for x in np.linspace(0, len(primary) - 1, rows)})
    found: dict[int, list[int]] = {c: [] for c in classes}
    wanted = np.asarray(classes)
    for start in range(0, len(dataset), _SCAN_BLOCK):
        idx = np.arange(start, min(start + _SCAN_BLOCK, len(dataset)))
        targets = np.asarray(dataset.targets_of(idx))
        for i in idx[np.isin(targets, wanted)]:
            bucket = found[int(targets[i - start])]
            if len(bucket) < cols:
                bucket.append(int(i))
        if all(len(v) == cols for v in found.values()):
            break
    return classes, [found[c] for c in classes]


def sample_grid(dataset: Dataset, *, rows: int, cols: int) -> tuple[list[str], list[Tensor]]:
    """Row captions (``"<class index>: <class name>"``) and per row the images
    ``(n, 3, H, W)`` in [-1, 1]."""
    classes, indices = pick_examples(dataset, rows=rows, cols=cols)
    flat = [i for row in indices for i in row]
    images = collate(examples(dataset, flat)).images if flat else torch.empty(0)
    names = dataset.classes
    captions, per_row, at = [], [], 0
    for c, row in zip(classes, indices, strict=True):
        captions.append(f"{c}: {names[c]}")
        per_row.append(images[at : at + len(row)])
        at += len(row)
    return captions, per_row


def _to_pil(image: Tensor, tile: int) -> Image.Image:
    pixels = ((image.clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8)
    pil = Image.fromarray(pixels.permute(1, 2, 0).numpy())
    return pil if pil.width == tile else pil.resize((tile, tile), Image.NEAREST)


def preview_image(
    name: str,
    *,
    split: str = "train",
    image_size: int = 64,
    rows: int = 8,
    cols: int = 8,
    root: str | Path | None = None,
    download: bool = False,
) -> Image.Image:
    """The sample grid of one split of ``name`` as a PIL image (white background, a title
    line, then a caption strip and a row of tiles per class)."""
    dataset = build_dataset(
        name, split, root=root, image_size=image_size, augment=False, download=download
    )
    captions, per_row = sample_grid(dataset, rows=rows, cols=cols)
    tile = image_size * max(1, math.ceil(_MIN_TILE / image_size))
    font = ImageFont.load_default(size=13)
    line = 18
    width = max(_GAP + cols * (tile + _GAP), 420)
    height = line + _GAP + len(per_row) * (line + tile + _GAP)
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    title = (
        f"{name} | {split} | {image_size} px | {len(per_row)} of {dataset.num_classes} "
        f"classes, one per row | {len(dataset):,} examples"
    )
    draw.text((_GAP, 2), title, fill="black", font=font)
    y = line + _GAP
    for caption, images in zip(captions, per_row, strict=True):
        draw.text((_GAP, y + 2), caption, fill=(40, 40, 40), font=font)
        y += line
        for j, image in enumerate(images):
            canvas.paste(_to_pil(image, tile), (_GAP + j * (tile + _GAP), y))
        y += tile + _GAP
    return canvas


def save_preview(out: str | Path, name: str, **kwargs) -> Path:
    """Write :func:`preview_image` to ``out`` (PNG); returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    preview_image(name, **kwargs).save(out, format="PNG")
    return out
