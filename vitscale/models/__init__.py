"""The model zoo: ViT, BiT ResNet-v2 and R50+ViT hybrids, built from the names of
:mod:`vitscale.catalog` (which decodes them without torch)."""

from __future__ import annotations

__all__ = [
    "create_model",
    "load_pretrained",
    "resize_pos_embed",
]


def __getattr__(name: str):
    if name == "create_model":
        from .factory import create_model

        return create_model
    if name == "load_pretrained":
        from .factory import load_pretrained

        return load_pretrained
    if name == "resize_pos_embed":
        from .vit import resize_pos_embed

        return resize_pos_embed
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
