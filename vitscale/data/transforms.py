"""The paper's image transforms (docs/protocol.md, "Pre-training" and "Transfer"): for
training an Inception crop (random area 8-100%, aspect 3/4-4/3; Szegedy et al. 2015), a
random flip and [-1, 1]; for evaluation the shorter side resized to 256/224 of the target
(384 px: 439 -> 384), a centre crop and [-1, 1]. Any resolution: the crop size is the
argument, the evaluation resize scales with it.
"""

from __future__ import annotations

import torch
from torchvision.transforms import v2

EVAL_RESIZE_RATIO = 256 / 224
INCEPTION_AREA = (0.08, 1.0)
INCEPTION_RATIO = (3 / 4, 4 / 3)


def to_signed_float() -> v2.Compose:
    """PIL / uint8 image -> float32 tensor in [-1, 1]."""
    return v2.Compose(
        [
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.5] * 3, std=[0.5] * 3),
        ]
    )


def train_transform(image_size: int) -> v2.Compose:
    return v2.Compose(
        [
            v2.RandomResizedCrop(
                image_size, scale=INCEPTION_AREA, ratio=INCEPTION_RATIO, antialias=True
            ),
            v2.RandomHorizontalFlip(),
            to_signed_float(),
        ]
    )


def eval_transform(image_size: int) -> v2.Compose:
    return v2.Compose(
        [
            v2.Resize(round(image_size * EVAL_RESIZE_RATIO), antialias=True),
            v2.CenterCrop(image_size),
            to_signed_float(),
        ]
    )
