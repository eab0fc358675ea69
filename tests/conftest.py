"""Shared fixtures and helpers for the suite."""

from __future__ import annotations

import pytest
import torch

from vitscale.models.names import HybridSpec, ViTSpec, parse

# Real (CPU) forward/backward for models up to this size; larger ones are checked on the
# meta device (shapes, gradients reaching every parameter) to keep the suite fast.
REAL_PARAM_LIMIT = 30_000_000


def small_resolution(name: str) -> int:
    """The smallest resolution of at least 32 px that the model tiles exactly."""
    spec = parse(name)
    if isinstance(spec, ViTSpec):
        return spec.patch * max(1, -(-32 // spec.patch))
    if isinstance(spec, HybridSpec):
        return 2 * spec.downsample
    return 32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
