"""The model zoo: ViT, BiT ResNet-v2 and R50+ViT hybrids, built from the names of
:mod:`vitscale.catalog` (which decodes them without torch)."""

from __future__ import annotations

import importlib

# Name -> submodule, loaded on first use (PEP 562), as in vitscale.data.
_EXPORTS = {"create_model": "factory", "load_pretrained": "factory", "resize_pos_embed": "vit"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
