"""``create_model``: a registry name -> an initialised (or pre-trained) ``nn.Module``."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn

from .names import HybridSpec, ResNetSpec, ViTSpec, check_resolution, parse
from .resnet import ResNetTrunk, ResNetV2
from .vit import VisionTransformer

POOLS = ("token", "gap")


def create_model(
    name: str,
    *,
    num_classes: int,
    image_size: int,
    head: str = "pretrain",
    pool: str | None = None,
    dropout: float = 0.0,
    pre_logits: bool | None = None,
    pretrained: str | os.PathLike | Mapping[str, torch.Tensor] | None = None,
) -> nn.Module:
    """Build the model a registry name describes (see :mod:`vitscale.models.names`).

    ``pool`` is ``"token"`` (class token, the paper's ViT default) or ``"gap"`` (global
    average pooling); ``None`` picks the family's paper default: token for ViT and
    hybrids, gap for BiT, which has no other. ``dropout`` applies to ViT encoders (paper
    Table 3: 0.1 on ImageNet and ImageNet-21k, 0 on JFT); BiT uses none.

    ``pre_logits`` is the pre-training head's hidden tanh layer (paper Sec. 3.1: "a MLP
    with one hidden layer at pre-training time"); ``None`` picks the paper's default, on
    for ViT and hybrids; ``False`` gives a linear pre-training head, as BiT has and as
    big_vision's ViT defaults to (``rep_size=False``). Fine-tuning heads never have it.

    ``pretrained``: a checkpoint file (or timm / Hugging Face model folder, or a state
    dict) in any layout :func:`~vitscale.models.load_pretrained` reads. Every trunk weight
    must match; the pre-logits layer follows the checkpoint; its classifier is kept when
    it has ``num_classes`` outputs over the same features, else a fresh one is initialised
    as the paper's (timm's convention for a new label set).
    """
    if pretrained is not None:
        from .pretrained import build_pretrained

        return build_pretrained(
            name,
            pretrained,
            num_classes=num_classes,
            image_size=image_size,
            head=head,
            pool=pool,
            dropout=dropout,
        )
    spec = parse(name)
    check_resolution(spec, image_size)
    if pool is not None and pool not in POOLS:
        raise ValueError(f"unknown pool {pool!r}; valid: {', '.join(map(repr, POOLS))}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if isinstance(spec, ResNetSpec):
        if pre_logits:
            raise ValueError(
                f"{spec.name}: BiT has no pre-logits layer; valid pre_logits: None, False"
            )
        if pool not in (None, "gap"):
            raise ValueError(
                f"{spec.name}: BiT ResNets pool by global average only; valid pool: 'gap'"
            )
        return ResNetV2(spec=spec, num_classes=num_classes, head=head)

    vit: ViTSpec = spec.vit if isinstance(spec, HybridSpec) else spec
    stem_kwargs = {}
    if isinstance(spec, HybridSpec):
        stem_kwargs = dict(
            stem=ResNetTrunk(spec.resnet),
            stem_channels=spec.resnet.out_channels,
            stem_downsample=spec.resnet.downsample,
        )
    return VisionTransformer(
        image_size=image_size,
        patch_size=vit.patch,
        width=vit.width,
        depth=vit.depth,
        mlp_dim=vit.mlp_dim,
        heads=vit.heads,
        num_classes=num_classes,
        head=head,
        pool=pool or "token",
        dropout=dropout,
        representation=pre_logits is not False,
        **stem_kwargs,
    )
