"""MLP-Mixer (Tolstikhin et al., NeurIPS 2021, Sec. 2, Eq. 1):

    U_{*,i} = X_{*,i} + W2 σ(W1 LN(X)_{*,i})     token mixing, one MLP per channel column
    Y_{j,*} = U_{j,*} + W4 σ(W3 LN(U)_{j,*})     channel mixing, one MLP per token row

on the S x C table of linearly embedded patches; then LayerNorm, global average pooling
over tokens and the head. No position embedding (token mixing is position-aware), no
class token, no pre-logits layer. The MLPs are the ViT's (flax's tanh GELU, dropout after
each dense layer, its initialisation, as timm's port); the stem is flax's ``lecun_normal``.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn
from torchvision.ops import StochasticDepth

from ..families.base import Build, drop_rates
from ..families.mixer import MixerSpec
from .heads import Head
from .vit import LN_EPS, MLP, lecun_normal_


class MixerBlock(nn.Module):
    """Token mixing, then channel mixing; each residual branch skipped per example with
    probability ``drop_rate`` in training (stochastic depth, as in the ViT's block)."""

    def __init__(
        self,
        *,
        tokens: int,
        width: int,
        token_mlp: int,
        channel_mlp: int,
        dropout: float,
        drop_rate: float = 0.0,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=LN_EPS)
        self.mlp_tokens = MLP(dim=tokens, hidden=token_mlp, dropout=dropout)
        self.norm2 = nn.LayerNorm(width, eps=LN_EPS)
        self.mlp_channels = MLP(dim=width, hidden=channel_mlp, dropout=dropout)
        self.skip = StochasticDepth(drop_rate, mode="row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = self.mlp_tokens(rearrange(self.norm1(x), "b s c -> b c s"))
        x = x + self.skip(rearrange(mixed, "b c s -> b s c"))
        return x + self.skip(self.mlp_channels(self.norm2(x)))


class MlpMixer(nn.Module):
    """The Mixer a spec describes (:mod:`vitscale.families.mixer`) at ``image_size``, with
    the paper's pre-training or fine-tuning head (:class:`~vitscale.models.heads.Head`)."""

    def __init__(
        self,
        *,
        spec: MixerSpec,
        image_size: int,
        num_classes: int,
        head: str = "pretrain",
        dropout: float = 0.0,
        stochastic_depth: float = 0.0,
    ) -> None:
        super().__init__()
        if image_size % spec.patch:
            raise ValueError(f"patch size {spec.patch} does not divide image size {image_size}")
        self.image_size = image_size
        tokens, width = (image_size // spec.patch) ** 2, spec.width
        self.stem = nn.Conv2d(3, width, kernel_size=spec.patch, stride=spec.patch)
        self.blocks = nn.Sequential(
            *(
                MixerBlock(
                    tokens=tokens,
                    width=width,
                    token_mlp=spec.token_mlp,
                    channel_mlp=spec.channel_mlp,
                    dropout=dropout,
                    drop_rate=r,
                )
                for r in drop_rates(stochastic_depth, spec.depth)
            )
        )
        self.norm = nn.LayerNorm(width, eps=LN_EPS)
        self.head = Head(width=width, num_classes=num_classes, kind=head, pre_logits_layer=False)
        lecun_normal_(self.stem.weight)
        nn.init.zeros_(self.stem.bias)
        for block in self.blocks:
            block.mlp_tokens.init_weights()
            block.mlp_channels.init_weights()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``(B, 3, H, W)`` -> the table ``(B, S, C)`` after the final LN."""
        return self.norm(self.blocks(rearrange(self.stem(x), "b c h w -> b (h w) c")))

    def pre_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The image representation few-shot evaluation reads: the mean over tokens."""
        return self.head.pre_logits(self.forward_features(x).mean(dim=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pre_logits(x))


def build(spec: MixerSpec, at: Build) -> MlpMixer:
    """The registry's builder (:mod:`vitscale.families.mixer`)."""
    return MlpMixer(
        spec=spec,
        image_size=at.size,
        num_classes=at.num_classes,
        head=at.head,
        dropout=at.dropout,
        stochastic_depth=at.stochastic_depth,
    )
