"""The batch every vitscale loader yields, and how a dataset's examples become one: sources
that render or read whole batches (the synthetic set's ``__getitems__``) return a
:class:`Batch`, which :func:`collate` passes through; per-example tuples are stacked."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from torch import Tensor
from torch.utils.data import Dataset, default_collate


@dataclass(frozen=True, kw_only=True)
class Batch:
    """Images ``(B, 3, H, W)`` in [-1, 1]; targets ``(B,)`` int64 or ``(B, K)`` multi-hot
    float; ``skipped``: the bad examples the stream replaced in this batch
    (``data.skip_bad_samples``, sharded sets; the same one again each epoch: the trainer
    counts distinct ones), empty for every other source. Unpacks as ``images, targets = batch``;
    not a tuple, so torch's ``pin_memory`` calls :meth:`pin_memory`, which keeps ``skipped``.
    """

    images: Tensor
    targets: Tensor
    skipped: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Tensor]:
        yield self.images
        yield self.targets

    def pin_memory(self) -> Batch:
        return replace(self, images=self.images.pin_memory(), targets=self.targets.pin_memory())


def collate(samples: Batch | list[tuple[Tensor, Tensor]]) -> Batch:
    """``Batch`` as is; a list of (image, target) pairs stacked into one."""
    if isinstance(samples, Batch):
        return samples
    images, targets = default_collate(samples)
    return Batch(images=images, targets=targets)


def examples(dataset: Dataset, indices: list[int]) -> Batch | list[tuple[Tensor, Tensor]]:
    """``dataset``'s examples at ``indices`` as torch's DataLoader reads them: one call to
    its ``__getitems__`` where it renders or reads whole batches, else one by one."""
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(indices) if getitems else [dataset[i] for i in indices]
