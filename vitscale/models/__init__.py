"""The model zoo: ViT, BiT ResNet-v2 and R50+ViT hybrids behind one registry of names.

``create_model`` and the module classes need torch and are loaded on first use (PEP 562),
so ``vitscale.models.names`` (parse, list_models) stays importable without torch.
"""

from __future__ import annotations

from .names import family, list_models, parse

__all__ = ["create_model", "list_models", "parse", "family", "resize_pos_embed"]


def __getattr__(name: str):
    if name in ("create_model", "resize_pos_embed"):
        from . import factory, vit

        return {"create_model": factory.create_model, "resize_pos_embed": vit.resize_pos_embed}[
            name
        ]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
