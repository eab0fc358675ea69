"""The device-decoding path's augmentation is the workers' (vitscale.data.shards.device):
the same Inception crop and flip from the same seed, the same pixels on the CPU."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import v2

from vitscale.data.shards.device import DeviceDecoder, EncodedBatch, flipped, inception_crop
from vitscale.data.transforms import (
    INCEPTION_AREA,
    INCEPTION_RATIO,
    eval_transform,
    train_transform,
)

from .helpers.datasets import jpeg_bytes


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    height=st.integers(1, 600),
    width=st.integers(1, 600),
)
def test_the_crop_and_flip_are_torchvisions_draws(seed, height, width):
    """torchvision's RandomResizedCrop and RandomHorizontalFlip, drawing from the global
    generator seeded with ``seed`` (the workers' path), are the oracle."""
    crop = v2.RandomResizedCrop(8, scale=INCEPTION_AREA, ratio=INCEPTION_RATIO)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        expected = crop.make_params([torch.empty(1, 1, 1).expand(3, height, width)])
        expected_flip = bool(torch.rand(1) < 0.5)
    generator = torch.Generator().manual_seed(seed)
    top, left, h, w = inception_crop(generator, height, width)
    assert (top, left, h, w) == tuple(expected[k] for k in ("top", "left", "height", "width"))
    assert flipped(generator) == expected_flip


def _encoded(indices: list[int], seeds: list[int], size=(40, 30)) -> EncodedBatch:
    data = [torch.frombuffer(bytearray(jpeg_bytes(i, size)), dtype=torch.uint8) for i in indices]
    return EncodedBatch(
        images=torch.cat(data),
        targets=torch.tensor(indices),
        lengths=torch.tensor([len(d) for d in data]),
        seeds=tuple(seeds),
    )


def test_on_the_cpu_the_device_path_draws_the_workers_pixels():
    from vitscale.data.shards.read import decode

    seeds = [3, 2**63 + 5, 17]
    batch = _encoded([0, 1, 2], seeds)
    for augment, transform in ((True, train_transform(16)), (False, eval_transform(16))):
        out = DeviceDecoder(image_size=16, augment=augment, crop=True, device="cpu")(batch)
        for k, (i, seed) in enumerate(zip([0, 1, 2], seeds, strict=True)):
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)
                expected = transform(decode(jpeg_bytes(i, (40, 30))))
            assert torch.equal(out.images[k], expected), (augment, k)
        assert torch.equal(out.targets, batch.targets)
