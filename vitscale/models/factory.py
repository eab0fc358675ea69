"""``create_model``: a registry name -> an initialised (or pre-trained) ``nn.Module``."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

import torch
from torch import nn

from ..catalog import check_resolution, head_problems, parse
from .pretrained import (
    Checkpoint,
    PretrainedError,
    Source,
    load_into,
    pool_for,
    read_checkpoint,
    shape_error,
)


def create_model(
    name: str,
    *,
    num_classes: int,
    image_size: int,
    head: str = "pretrain",
    pool: str | None = None,
    dropout: float = 0.0,
    stochastic_depth: float = 0.0,
    pre_logits: bool | None = None,
    pretrained: str | os.PathLike | Mapping[str, torch.Tensor] | None = None,
) -> nn.Module:
    """Build the model a registry name describes (see :mod:`vitscale.catalog`).

    ``pool``, ``dropout``, ``stochastic_depth``, ``pre_logits`` and ``pretrained`` mean what
    the ``model.*`` config keys of those names do (docs/config.md); a ``pool`` or
    ``pre_logits`` of ``None`` picks the family's paper default. A ``pretrained`` checkpoint
    (or state dict) must match every trunk weight; the pre-logits layer follows the
    checkpoint; its classifier is kept when it has ``num_classes`` outputs over the same
    features, else a fresh one is initialised as the paper's (timm's convention for a new
    label set).
    """
    if pretrained is not None:
        return build_pretrained(
            name,
            pretrained,
            num_classes=num_classes,
            image_size=image_size,
            head=head,
            pool=pool,
            dropout=dropout,
            stochastic_depth=stochastic_depth,
        )
    spec = parse(name)
    check_resolution(spec, image_size)
    for key, rate in (("dropout", dropout), ("stochastic_depth", stochastic_depth)):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{key} must be in [0, 1), got {rate}")
    if problems := head_problems(spec, pool=pool, pre_logits=pre_logits):
        raise ValueError(f"{spec.name}: {problems[0]}")
    at = spec.at(
        image_size,
        num_classes=num_classes,
        head=head,
        pool=pool,
        pre_logits=pre_logits,
        dropout=dropout,
        stochastic_depth=stochastic_depth,
    )
    module, builder = spec.builder.split(":")
    return getattr(importlib.import_module(module), builder)(spec, at)


# --------------------------------------------------------------------------- published checkpoints

HEAD_CHOICES = ("keep", "drop")


def _build(
    ckpt: Checkpoint,
    *,
    num_classes: int,
    image_size: int,
    head: str,
    pool: str | None,
    dropout: float,
    keep_classifier: bool,
    stochastic_depth: float = 0.0,
) -> nn.Module:
    with torch.device("meta"):
        model = create_model(
            ckpt.name,
            num_classes=num_classes,
            image_size=image_size,
            head=head,
            pool=pool_for(ckpt, pool),
            dropout=dropout,
            stochastic_depth=stochastic_depth,
            pre_logits=head == "pretrain" and ckpt.has_pre_logits,
        )
    return load_into(model, ckpt, keep_classifier=keep_classifier)


def build_pretrained(
    name: str,
    source: Source | Checkpoint,
    *,
    num_classes: int,
    image_size: int,
    head: str = "pretrain",
    pool: str | None = None,
    dropout: float = 0.0,
    stochastic_depth: float = 0.0,
) -> nn.Module:
    """``create_model(name, ..., pretrained=source)`` (see there); the pre-logits layer, if
    any, is kept by a pre-training head and dropped by a fine-tuning head (paper Sec. 3.2)."""
    ckpt = source if isinstance(source, Checkpoint) else read_checkpoint(name, source)
    if pool is None and ckpt.pool is not None:
        pool = "token"  # as create_model without a checkpoint: the family's default, said
    same_features = head == "pretrain" or not ckpt.has_pre_logits
    keep = same_features and ckpt.num_classes == num_classes
    return _build(
        ckpt,
        num_classes=num_classes,
        image_size=image_size,
        head=head,
        pool=pool,
        dropout=dropout,
        keep_classifier=keep,
        stochastic_depth=stochastic_depth,
    )


def load_pretrained(
    name: str,
    source: Source,
    *,
    head: str = "keep",
    num_classes: int | None = None,
    image_size: int | None = None,
    pool: str | None = None,
    dropout: float = 0.0,
) -> nn.Module:
    """A published (or exported) checkpoint as the registry model ``name``.

    ``head="keep"``: the checkpoint's head as it is (its pre-logits layer if it has one,
    its classifier and number of classes). ``head="drop"``: the paper's fine-tuning
    start (Sec. 3.2): pre-logits and classifier dropped, one zero-initialised linear
    layer of ``num_classes`` outputs.

    ``image_size`` defaults to the checkpoint's own resolution (224 for BiT, whose weights
    do not say); another one resizes the position embedding as the official code does.

    >>> model = load_pretrained("ViT-B/16", "ViT-B_16.npz", head="drop", num_classes=10,
    ...                         image_size=384)  # doctest: +SKIP
    """
    if head not in HEAD_CHOICES:
        raise ValueError(f"unknown head {head!r}; valid: {', '.join(map(repr, HEAD_CHOICES))}")
    ckpt = read_checkpoint(name, source)
    if image_size is None:
        image_size = ckpt.image_size or 224
    keep = head == "keep"
    if not keep and num_classes is None:
        raise ValueError("head='drop' starts a new classifier: give num_classes")
    if keep and ckpt.num_classes is None:
        raise PretrainedError(
            f"{ckpt.source} has no classifier to keep; load it with head='drop' and num_classes"
        )
    if keep and num_classes is not None and num_classes != ckpt.num_classes:
        w = ckpt.state["head.classifier.weight"]
        raise shape_error(ckpt, "head.classifier.weight", w.shape, (num_classes, w.shape[1]))
    return _build(
        ckpt,
        num_classes=ckpt.num_classes if keep else num_classes,
        image_size=image_size,
        head="pretrain" if keep else "finetune",
        pool=pool,
        dropout=dropout,
        keep_classifier=keep,
    )
