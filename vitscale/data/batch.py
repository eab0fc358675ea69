"""A pre-collated batch, and the collate function that lets it through.

Sources that render whole batches (the synthetic set's ``__getitems__``) return a
:class:`Batch`; torch's DataLoader hands whatever the dataset returned to ``collate_fn``,
so :func:`collate` passes a ``Batch`` through untouched and stacks per-example tuples with
torch's ``default_collate``. One function serves every source.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor
from torch.utils.data import default_collate

__all__ = ["Batch", "collate"]


class Batch(NamedTuple):
    """Images ``(B, 3, H, W)`` in [-1, 1]; targets ``(B,)`` int64 or ``(B, K)`` multi-hot float."""

    images: Tensor
    targets: Tensor


def collate(samples: Batch | list[tuple[Tensor, Tensor]]) -> Batch:
    """``Batch`` as is; a list of (image, target) pairs stacked into one."""
    if isinstance(samples, Batch):
        return samples
    images, targets = default_collate(samples)
    return Batch(images, targets)
