"""The model zoo: ViT, BiT ResNet-v2 and R50+ViT hybrids behind one registry of names.

``create_model`` and the module classes need torch and are loaded on first use (PEP 562),
so ``vitscale.models.names`` (parse, list_models) stays importable without torch.
"""

from __future__ import annotations

from .names import family, list_models, parse

__all__ = [
    "create_model",
    "load_pretrained",
    "list_models",
    "parse",
    "family",
    "resize_pos_embed",
]


def __getattr__(name: str):
    if name == "create_model":
        from .factory import create_model

        return create_model
    if name == "load_pretrained":
        from .pretrained import load_pretrained

        return load_pretrained
    if name == "resize_pos_embed":
        from .vit import resize_pos_embed

        return resize_pos_embed
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
