"""Datasets, nested subsets, few-shot samples and the resumable example stream: the names
below, each documented where it is defined. The registry (:mod:`vitscale.data.registry`)
and subsets (:mod:`vitscale.data.subsets`) import no torch.
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
    "rank0_downloads_first": "build",
    "known_size": "available",
    "known_classes": "available",
    "check_available": "available",
    "fingerprint": "available",
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
