"""A sharded set's images decoded and augmented on the training device (``data.decode``).

Why: decoding JPEGs and cropping them on the CPU costs 250-500 images/s per core at 224 px,
so ViT-B/16 on an H100 needs 12-15 cores to be fed and waited 43% of its step time on the
loader. With ``data.decode: device`` the loader's workers only read: each batch
is the encoded bytes of its examples (:class:`EncodedBatch`), and the trainer's process
decodes them where it trains (``torchvision.io.decode_jpeg`` of the whole list, nvJPEG on
a GPU), then crops, resizes, flips and scales them there (:class:`DeviceDecoder`).

What does not change: which example is at which stream position (the loader's order,
subsets, resume), and the augmentation's randomness, a function of (seed, position) on
either path: the Inception crop and the flip are drawn by :func:`inception_crop` and
:func:`flipped` from a generator seeded with the position's key, the same draws in the
same order as torchvision's ``RandomResizedCrop`` and ``RandomHorizontalFlip`` make in the
workers (tested against them). On the CPU the two paths give bit-identical images (the
same decoder and kernels); on a GPU nvJPEG and the GPU's resampling differ from libjpeg
and the CPU's in the last bits.

Every image the workers decode decodes here, to the same pixels on the CPU (the workers'
decoder, :func:`~vitscale.data.shards.read.decode`): on a GPU nvJPEG gets the JPEGs it
decodes (8-bit, 1 or 3 components, read off the frame header) and the rest (PNG, WebP, CMYK
JPEGs) is decoded on the CPU and copied over, said once. An image that does not decode is
replaced as on the workers (``data.skip_bad_samples``: the next stream position's example,
counted with the batch), else an error naming its shard and key.

On a GPU (:meth:`DeviceDecoder.__call__`) the next batch is drawn while the step computes,
and nothing here waits for the device: no blocking copy, no sync, no tensor made from host
data (``v2.Normalize`` makes its mean and std so: Python scalars instead).
"""

from __future__ import annotations

import contextlib
import math
import sys

import torch
from torch import Tensor
from torchvision.transforms.v2 import functional as TF

from ..batch import Batch
from ..registry import DatasetFormatError
from ..transforms import EVAL_RESIZE_RATIO, INCEPTION_AREA, INCEPTION_RATIO
from .dataset import EncodedBatch, ShardStream
from .read import SampleError, decode


def inception_crop(
    generator: torch.Generator,
    height: int,
    width: int,
    *,
    scale: tuple[float, float] = INCEPTION_AREA,
    ratio: tuple[float, float] = INCEPTION_RATIO,
) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` of an Inception crop (Szegedy et al. 2015; paper
    App. B): up to 10 tries of an area fraction in ``scale`` and a log-uniform aspect
    ratio in ``ratio``, else the largest centred crop within the ratios. The same draws,
    in the same order, as torchvision's ``RandomResizedCrop`` from the global generator."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target = area * torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        aspect = torch.exp(
            torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=generator)
        ).item()
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, size=(1,), generator=generator).item())
            left = int(torch.randint(0, width - w + 1, size=(1,), generator=generator).item())
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def flipped(generator: torch.Generator) -> bool:
    """Whether the image is mirrored: ``RandomHorizontalFlip``'s draw (p = 0.5)."""
    return bool(torch.rand(1, generator=generator).item() < 0.5)


# Frame headers (SOF) of the JPEGs nvJPEG decodes: baseline, extended and progressive
# Huffman; not lossless, not arithmetic-coded.
_NVJPEG_FRAMES = (0xC0, 0xC1, 0xC2)
_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # every SOFn (C4, C8, CC are not)


def nvjpeg_decodes(data: Tensor) -> bool:
    """Whether nvJPEG decodes these bytes to RGB: a JPEG whose frame header says 8-bit
    samples in 1 or 3 components. Not CMYK or YCCK (4 components; ImageNet-1k has about
    22), 12-bit, lossless or arithmetic-coded JPEGs, nor anything but a JPEG."""
    b = memoryview(data.numpy())
    if len(b) < 4 or b[0] != 0xFF or b[1] != 0xD8:
        return False
    i = 2
    while i + 9 < len(b) and b[i] == 0xFF:
        marker = b[i + 1]
        if marker == 0xFF:  # a fill byte
            i += 1
        elif marker in _FRAMES:
            return marker in _NVJPEG_FRAMES and b[i + 4] == 8 and b[i + 9] in (1, 3)
        else:
            i += 2 + (b[i + 2] << 8 | b[i + 3])
    return False


class DeviceDecoder:
    """:class:`EncodedBatch` -> :class:`Batch` on ``device``: what the workers' transforms
    (:mod:`vitscale.data.transforms`) would have made of the same bytes and seeds.
    ``stream``: the set's stream, which replaces an image that does not decode
    (``data.skip_bad_samples``); without it such an image is an error."""

    def __init__(
        self,
        *,
        image_size: int,
        augment: bool,
        crop: bool,
        device,
        stream: ShardStream | None = None,
    ) -> None:
        self.size = image_size
        self.augment = augment
        self.crop = crop
        self.device = torch.device(device)
        self.stream = stream
        self._streams = None  # (augmentation, nvJPEG): side CUDA streams, made on first use
        self._said = False  # the fall back to the CPU is said once

    def _on(self, kind: int):
        """Work queued on side stream ``kind`` (0: augmentation, 1: nvJPEG) on a GPU."""
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        if self._streams is None:
            self._streams = (torch.cuda.Stream(self.device), torch.cuda.Stream(self.device))
        return torch.cuda.stream(self._streams[kind])

    def _to_device(self, image: Tensor) -> Tensor:
        """A CPU tensor on the device without the host waiting: copied from pinned memory."""
        if self.device.type != "cuda":
            return image
        return image.pin_memory().to(self.device, non_blocking=True)

    def _decode(self, batch: EncodedBatch) -> tuple[list[Tensor | None], dict[int, str]]:
        """Each image on the device, RGB (uint8; uint16 for 16-bit PNGs), and why those
        that do not decode do not. On a GPU the JPEGs nvJPEG decodes go to it in one call;
        the rest, and all on a CPU, are decoded as the workers decode them."""
        from torchvision.io import ImageReadMode, decode_jpeg

        data = batch.encoded()
        out: list[Tensor | None] = [None] * len(data)
        gpu = [i for i, d in enumerate(data) if self.device.type == "cuda" and nvjpeg_decodes(d)]
        if gpu:
            # nvJPEG writes on a private stream, ordered after nothing, into memory taken on
            # the current stream (pytorch/vision PR 9606): a stream of its own, where no
            # kernel ever reads a block freed while still in use. What it wrote is marked
            # used by the augmentation stream, which waits for the decode.
            try:
                with self._on(1):
                    decoded = decode_jpeg(
                        [data[i] for i in gpu], mode=ImageReadMode.RGB, device=self.device
                    )
            except RuntimeError as e:  # nvJPEG refused one of them: all of them on the CPU
                self._say(batch.where[gpu[0]] if batch.where else None, str(e).splitlines()[0])
                gpu = []
            else:
                augmentation, nvjpeg = self._streams
                augmentation.wait_stream(nvjpeg)
                for i, image in zip(gpu, decoded, strict=True):
                    image.record_stream(augmentation)
                    out[i] = image
        failed = {}
        for i in sorted(set(range(len(data))) - set(gpu)):
            if self.device.type == "cuda":
                self._say(batch.where[i] if batch.where else None, "not a JPEG nvJPEG decodes")
            try:
                out[i] = self._to_device(decode(data[i].numpy().tobytes()))
            except ValueError as e:
                failed[i] = str(e)
        return out, failed

    def _say(self, where: tuple[str, str] | None, why: str) -> None:
        if not self._said:
            self._said = True
            image = f"{where[0]}: key {where[1]!r}" if where else "an image"
            print(
                f"warning: data.decode: device: {image} is decoded on the CPU ({why}); so are "
                "such images from here on, unreported",
                file=sys.stderr,
                flush=True,
            )

    def _replace(self, batch: EncodedBatch, i: int, reason: str, skipped: list[str]) -> tuple:
        """``(image, seed, target)`` of the example that replaces example ``i`` of the batch,
        which does not decode: the next stream position's, as the workers replace it."""
        (shard, key), position = batch.where[i], batch.positions[i]
        while True:
            if self.stream is None:
                raise DatasetFormatError(f"shard {shard}, key {key!r}: {reason}")
            error = SampleError(self.stream.base.name, shard, key, reason)
            data, target, shard, key, seed, position = self.stream.replacement(
                position, error, skipped
            )
            print(f"warning: replaced a bad example: {skipped[-1]}", file=sys.stderr)
            try:
                image = self._to_device(decode(data))
            except ValueError as e:
                reason = str(e)
                continue
            return image, seed, target

    def _transform(self, image: Tensor, seed: int) -> Tensor:
        s = self.size
        if not self.crop:  # a framed set (the synthetic one): resized only
            return TF.resize(image, [s, s], antialias=True)
        if not self.augment:
            image = TF.resize(image, round(s * EVAL_RESIZE_RATIO), antialias=True)
            return TF.center_crop(image, [s, s])
        generator = torch.Generator().manual_seed(seed)
        top, left, h, w = inception_crop(generator, image.shape[-2], image.shape[-1])
        image = TF.resized_crop(image, top, left, h, w, [s, s], antialias=True)
        return TF.horizontal_flip(image) if flipped(generator) else image

    def _pixels(self, batch: EncodedBatch) -> Batch:
        images, failed = self._decode(batch)
        seeds, targets, skipped = list(batch.seeds), batch.targets, list(batch.skipped)
        if failed:
            targets = targets.clone()
            for i, reason in failed.items():
                images[i], seeds[i], targets[i] = self._replace(batch, i, reason, skipped)
        pixels = [self._transform(im, sd) for im, sd in zip(images, seeds, strict=True)]
        if len({p.dtype for p in pixels}) > 1:  # e.g. a 16-bit PNG among 8-bit JPEGs
            pixels = [TF.to_dtype(p, torch.float32, scale=True) for p in pixels]
        # [-1, 1] as the workers' v2.Normalize(0.5, 0.5) makes it, bit for bit, with Python
        # scalars: Normalize's own tensors would be copies from the host, each a sync.
        images = TF.to_dtype(torch.stack(pixels), torch.float32, scale=True).sub_(0.5).div_(0.5)
        return Batch(
            images=images,
            targets=(targets.pin_memory() if self.device.type == "cuda" else targets).to(
                self.device, non_blocking=True
            ),
            skipped=tuple(skipped),
        )

    def __call__(self, batch: EncodedBatch) -> Batch:
        """The batch's images on the device. On a GPU they are drawn on a side stream,
        which the training stream waits for without the host waiting: the trainer asks
        for batch ``i + 1`` after it has queued step ``i``, so the GPU draws the next
        batch while it computes the current step. The side stream waits for nothing of
        the training stream's: what it allocates is its own, and what the training stream
        uses of it is marked so (``record_stream``), so the allocator reuses none of it
        before that stream is done with it."""
        if self.device.type != "cuda":
            return self._pixels(batch)
        with self._on(0):
            out = self._pixels(batch)
        main = torch.cuda.current_stream(self.device)
        main.wait_stream(self._streams[0])
        for t in (out.images, out.targets):
            t.record_stream(main)
        return out
