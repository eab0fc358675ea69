"""A sharded set's images decoded and augmented on the training device (``data.decode``).

Why: decoding JPEGs and cropping them on the CPU costs 250-500 images/s per core at 224 px,
so ViT-B/16 on an H100 needs 12-15 cores to be fed and waited 43% of its step time on the
loader (issue 22). With ``data.decode: device`` the loader's workers only read: each batch
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

Bad examples: the workers still find a missing image or label and replace it
(``data.skip_bad_samples``); an image that only fails to *decode* is found here, and is
an error naming its shard and key (decode on the workers to have it replaced).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ..batch import Batch
from ..registry import DatasetFormatError
from ..transforms import EVAL_RESIZE_RATIO, INCEPTION_AREA, INCEPTION_RATIO


@dataclass(frozen=True, kw_only=True)
class EncodedBatch(Batch):
    """A batch as the workers read it: ``images`` holds every example's encoded bytes
    back to back (uint8, 1-D), ``lengths`` each one's length, ``seeds`` each one's
    augmentation key (64-bit, so not a tensor), ``keys`` where each came from (errors)."""

    lengths: Tensor
    seeds: tuple[int, ...]
    keys: tuple[str, ...] = ()

    def encoded(self) -> list[Tensor]:
        return list(self.images.split(self.lengths.tolist()))


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


class DeviceDecoder:
    """:class:`EncodedBatch` -> :class:`Batch` on ``device``: what the workers' transforms
    (:mod:`vitscale.data.transforms`) would have made of the same bytes and seeds."""

    def __init__(self, *, image_size: int, augment: bool, crop: bool, device) -> None:
        self.size = image_size
        self.augment = augment
        self.crop = crop
        self.device = torch.device(device)
        self._stream = None  # the side CUDA stream the batches are drawn on
        self._to_float = v2.Compose(
            [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean=[0.5] * 3, std=[0.5] * 3)]
        )

    def _decode(self, batch: EncodedBatch) -> list[Tensor]:
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg

        data = batch.encoded()
        jpeg = [bool(len(d) > 2 and d[0] == 0xFF and d[1] == 0xD8) for d in data]
        out: list[Tensor | None] = [None] * len(data)
        at = [i for i, j in enumerate(jpeg) if j]
        try:
            if at:
                decoded = decode_jpeg(
                    [data[i] for i in at], mode=ImageReadMode.RGB, device=self.device
                )
                for i, image in zip(at, decoded, strict=True):
                    out[i] = image
            for i in (i for i, j in enumerate(jpeg) if not j):  # PNG, WebP: on the CPU
                out[i] = decode_image(data[i], mode=ImageReadMode.RGB).to(self.device)
        except RuntimeError:
            return [
                self._one(d, batch.keys[i] if batch.keys else str(i)) for i, d in enumerate(data)
            ]
        return out

    def _one(self, data: Tensor, key: str) -> Tensor:
        """One image, alone: to find which one of a batch does not decode."""
        from torchvision.io import ImageReadMode, decode_image

        try:
            return decode_image(data, mode=ImageReadMode.RGB).to(self.device)
        except RuntimeError as e:
            raise DatasetFormatError(
                f"{key}: cannot decode the image on {self.device}: {str(e).splitlines()[0]} "
                "(set data.decode: workers to have bad images replaced, data.skip_bad_samples)"
            ) from None

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
        images = self._decode(batch)
        seeds = batch.seeds
        pixels = torch.stack(
            [self._transform(im, sd) for im, sd in zip(images, seeds, strict=True)]
        )
        return Batch(
            images=self._to_float(pixels),
            targets=batch.targets.to(self.device, non_blocking=True),
            skipped=batch.skipped,
        )

    def __call__(self, batch: EncodedBatch) -> Batch:
        """The batch's images on the device. On a GPU they are drawn on a side stream,
        which the training stream waits for without the host waiting: the trainer asks
        for batch ``i + 1`` after it has queued step ``i``, so the GPU decodes the next
        batch while it computes the current step."""
        if self.device.type != "cuda":
            return self._pixels(batch)
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        main = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(main)  # the buffers it may reuse are free
        with torch.cuda.stream(self._stream):
            out = self._pixels(batch)
        main.wait_stream(self._stream)
        for t in (out.images, out.targets):
            t.record_stream(main)  # allocated on the side stream, used on the main one
        return out


def decode_on_device(setting: str, device: torch.device) -> bool:
    """``data.decode``: ``"device"``, ``"workers"``, or ``"auto"``: on the device where it
    is a GPU (nvJPEG), on the workers elsewhere (on a CPU both are the same cores). The
    config schema has checked the value."""
    return setting == "device" or (setting == "auto" and torch.device(device).type == "cuda")
