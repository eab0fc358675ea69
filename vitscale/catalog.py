"""Model names -> architecture specs: the registry every other part asks.

This module imports nothing heavy (no torch), so compute accounting, grid validation and
the analysis package can decode a name such as ``"ViT-L/16"`` or ``"ResNet152x2"`` on a
laptop. Each family is one module of :mod:`vitscale.families` (its name grammar, sizes,
counts, defaults and where its ``nn.Module`` is); this module asks each in turn.

Names (paper Sec. 4.1; docs/protocol.md, "Models"): ``ViT-{size}/{patch}``, ``BiT-R{depth}x{width}``
(the paper's ``ResNet{depth}x{width}`` is an alias), hybrids ``R50x{width}+ViT-{size}/{downsample}``
and ``Mixer-{size}/{patch}``.
"""

from __future__ import annotations

from functools import lru_cache

from .families import REGISTRY
from .families.base import Family, choices, same_padding

ModelSpec = Family
FAMILIES: tuple[str, ...] = tuple(spec.family for spec in REGISTRY)  # Table 6's order first
__all__ = [
    "FAMILIES",
    "ModelSpec",
    "parse",
    "family",
    "check_resolution",
    "head_problems",
    "smallest_resolution",
    "list_models",
    "model_columns",
    "same_padding",
]


def parse(name: str) -> ModelSpec:
    """Decode a model name into its spec; ``ValueError`` naming the valid choices.

    >>> parse("ViT-B/16").width
    768
    >>> parse("ResNet50x1").name
    'BiT-R50x1'
    """
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string, got {type(name).__name__}")
    for spec in REGISTRY:
        if (found := spec.parse(name)) is not None:
            return found
    raise ValueError(
        f"unknown model name {name!r}; valid forms: {', '.join(s.grammar for s in REGISTRY)}. "
        "Listed models: vitscale.models.list_models()"
    )


def family(name: str) -> str:
    """The family of a model name (paper Table 6's family column)."""
    return parse(name).family


def check_resolution(spec: ModelSpec, image_size: int) -> None:
    """Raise ``ValueError`` when the model cannot tile ``image_size`` exactly."""
    if image_size < 1:
        raise ValueError(f"image_size must be positive, got {image_size}")
    spec.check_resolution(image_size)


def head_problems(spec: ModelSpec, *, pool: str | None, pre_logits: bool | None) -> list[str]:
    """Head settings the architecture has no such part for, each as ``"key: why"`` (BiT
    and Mixer pool by global average straight into the classifier). The config's rules
    and ``create_model`` both say these."""
    return spec.head_problems(pool=pool, pre_logits=pre_logits)


def smallest_resolution(name: str, *, at_least: int = 32) -> int:
    """The smallest resolution of at least ``at_least`` px that the model tiles exactly
    (a hybrid: twice its downsampling), for real forward passes that must stay cheap
    (tests, the memory calibration)."""
    return parse(name).smallest_resolution(at_least)


def list_models(family: str | None = None) -> list[str]:
    """Canonical names of the registry, optionally of one family (:data:`FAMILIES`).

    Other patch sizes and BiT depth/width pairs parse too; this is the set tests are
    parametrised over and the paper's figures use.
    """
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; valid: {choices(FAMILIES)}")
    return [n for spec in REGISTRY if family in (None, spec.family) for n in spec.listed()]


@lru_cache(maxsize=4096)
def model_columns(name: str) -> tuple[str, str, int | None]:
    """``(family, size, patch)`` of a model name, as result tables and W&B summaries show
    it: size "B", "L" ... for ViTs, hybrids and Mixers, "R50x1" ... for ResNets; patch the
    pixels per token side (a hybrid's: its total downsampling, the number after its
    slash), None for ResNets. ``ValueError`` for an unknown name."""
    spec = parse(name)
    return (spec.family, *spec.columns())
