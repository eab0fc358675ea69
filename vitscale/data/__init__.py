"""Datasets, nested subsets, few-shot samples and the resumable example stream.

- :func:`build_dataset`: a dataset name and split -> a torch ``Dataset`` of (image,
  target); the embedded synthetic family (``"synthetic"``, ``"synthetic-<task>"``) or a
  real source (CIFAR-10/100, Pets, Flowers-102, ImageNet, ImageFolder trees, multi-label
  trees) read by torchvision's own loaders;
- :func:`subset_indices`: the indices a subset spec (``30000``, ``0.1``, ``"9M"``)
  selects, prefixes of one seeded permutation so smaller subsets nest in larger ones;
- :func:`fewshot_indices`, :func:`finetune_splits`: transfer samples and held-out slices;
- :func:`build_loader`: the exact, resumable pre-training stream of :class:`Batch` es,
  split across processes, for every source.

The registry (:mod:`vitscale.data.registry`) and subsets (:mod:`vitscale.data.subsets`)
import no torch.
"""

from __future__ import annotations

import importlib

# Name -> submodule. Loaded on first use (PEP 562), so ``vitscale.data.subsets`` and
# ``vitscale.data.registry`` stay importable without torch (config and grid validation).
_EXPORTS = {
    "Batch": "batch",
    "collate": "batch",
    "build_dataset": "build",
    "build_fewshot": "build",
    "finetune_splits": "build",
    "known_size": "available",
    "check_available": "available",
    "build_loader": "stream",
    "dataset_names": "registry",
    "DatasetNotFoundError": "registry",
    "DatasetFormatError": "registry",
    "SeededPermutation": "subsets",
    "subset_indices": "subsets",
    "subset_size": "subsets",
    "fewshot_indices": "subsets",
    "holdout_split": "subsets",
    "parse_subset": "subsets",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
