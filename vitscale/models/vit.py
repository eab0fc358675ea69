"""Vision Transformer (Dosovitskiy et al., ICLR 2021, Sec. 3.1 and Eq. 1-4).

    z0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos          (Eq. 1)
    z'_l = MSA(LN(z_{l-1})) + z_{l-1}                      (Eq. 2)
    z_l = MLP(LN(z'_l)) + z'_l                             (Eq. 3)
    y = LN(z_L^0)                                          (Eq. 4)

Initialisation follows the official code (google-research/vision_transformer): dense
kernels xavier-uniform with biases ~N(0, 1e-6), position embedding ~N(0, 0.02), class
token zeros, head kernel zeros. The hybrid (Sec. 3.1, "Hybrid Architecture") is this
class with a ResNet trunk as ``stem`` and 1x1 patches on its feature map.

Numerics follow the official code too, where ports depart from it: the MLP's GELU is
flax's default, the tanh approximation (timm and Hugging Face use the exact erf form),
LayerNorm epsilon is 1e-6 (flax; Hugging Face uses 1e-12), and a position embedding is
resized as the official ``interpolate_posembed`` does (``scipy.ndimage.zoom``, order 1:
bilinear with the corner pixels aligned; timm resizes bicubically).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn
from torchvision.ops import StochasticDepth

from ..families.base import Build, drop_rates
from ..families.hybrid import HybridSpec
from ..families.vit import ViTSpec
from .heads import Head
from .resnet import ResNetTrunk

LN_EPS = 1e-6  # flax.linen.LayerNorm's default, as in the official code


def lecun_normal_(weight: torch.Tensor) -> None:
    """flax's ``lecun_normal``: truncated normal at 2 std, variance 1 / fan_in."""
    std = math.sqrt(1.0 / weight[0].numel()) / 0.87962566103423978  # std of N(0,1) cut at 2
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v, written out: the oracle tests hold SDPA against."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bhkd->bhqd", scores.softmax(dim=-1), v)


class Attention(nn.Module):
    """Multi-head self-attention with one fused qkv projection (paper Appendix A)."""

    def __init__(self, *, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(
                f"width {dim} is not divisible by {heads} heads; use a divisor of {dim}"
            )
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)  # after the output projection, never on qkv
        self.attend = F.scaled_dot_product_attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.heads)
        out = rearrange(self.attend(q, k, v), "b h n d -> b n (h d)")
        return self.drop(self.proj(out))

    def init_weights(self) -> None:
        # xavier-uniform per q, k and v matrix, as if they were three D x D layers.
        dim = self.proj.in_features
        bound = math.sqrt(6.0 / (dim + dim))
        nn.init.uniform_(self.qkv.weight, -bound, bound)
        nn.init.zeros_(self.qkv.bias)
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)


class MLP(nn.Module):
    """Two dense layers with GELU; dropout after each (paper Appendix B.1). The GELU is
    flax's ``nn.gelu``, whose default is the tanh approximation: the official models'."""

    def __init__(self, *, dim: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(F.gelu(self.fc1(x), approximate="tanh"))))

    def init_weights(self) -> None:
        for fc in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.normal_(fc.bias, std=1e-6)


class Block(nn.Module):
    """Pre-LN encoder block (Eq. 2-3); in training each residual branch is skipped for an
    example with probability ``drop_rate`` (stochastic depth, torchvision's; off in the paper)."""

    def __init__(
        self, *, dim: int, heads: int, mlp_dim: int, dropout: float, drop_rate: float = 0.0
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = Attention(dim=dim, heads=heads, dropout=dropout)
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = MLP(dim=dim, hidden=mlp_dim, dropout=dropout)
        self.skip = StochasticDepth(drop_rate, mode="row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.skip(self.attn(self.norm1(x)))
        return x + self.skip(self.mlp(self.norm2(x)))


def resize_pos_embed(
    pos_embed: torch.Tensor, *, new_grid: tuple[int, int], num_prefix_tokens: int
) -> torch.Tensor:
    """Resize a ``(1, prefix + h*w, D)`` position embedding to a new patch grid.

    Bilinear 2-D interpolation over the grid (paper Sec. 3.2, "Fine-tuning and higher
    resolution"); the class-token embedding is kept as it is. Exactly the official
    ``interpolate_posembed`` (vision_transformer ``checkpoint.py``, big_vision
    ``resample_posemb``): ``scipy.ndimage.zoom(order=1)``, which maps the corner pixel
    centres onto each other (``align_corners=True``). The old grid must be square.
    """
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    old = math.isqrt(grid.shape[1])
    if old * old != grid.shape[1]:
        raise ValueError(f"position embedding has {grid.shape[1]} grid tokens: not a square grid")
    if (old, old) == tuple(new_grid):
        return pos_embed
    grid = rearrange(grid, "1 (h w) d -> 1 d h w", h=old)
    work = torch.promote_types(grid.dtype, torch.float32)  # half precision: interpolate in fp32
    grid = F.interpolate(grid.to(work), size=tuple(new_grid), mode="bilinear", align_corners=True)
    grid = rearrange(grid.to(pos_embed.dtype), "1 d h w -> 1 (h w) d")
    return torch.cat([prefix, grid], dim=1)


class VisionTransformer(nn.Module):
    """ViT and, with ``stem``, the ResNet+ViT hybrid.

    ``pool="token"`` prepends a learnable class token and reads it out (paper); ``"gap"``
    averages the patch tokens and has no class token (paper Appendix D.3: works as well
    with a different learning rate). ``head`` picks the paper's pre-training head (tanh
    pre-logits, bias -10) or the fine-tuning head (one zero-initialised linear layer);
    ``representation=False`` leaves the pre-logits layer out of a pre-training head, as the
    official configs with ``representation_size=None`` (most published fine-tuned ViTs).
    """

    def __init__(
        self,
        *,
        image_size: int,
        patch_size: int,
        width: int,
        depth: int,
        mlp_dim: int,
        heads: int,
        num_classes: int,
        head: str = "pretrain",
        pool: str = "token",
        dropout: float = 0.0,
        stochastic_depth: float = 0.0,
        pre_logits: bool = True,
        stem: nn.Module | None = None,
        stem_channels: int = 3,
        stem_downsample: int = 1,
        representation: bool = True,
    ) -> None:
        super().__init__()
        if pool not in ("token", "gap"):
            raise ValueError(f"unknown pool {pool!r}; valid: 'token', 'gap'")
        feature_size = image_size // stem_downsample
        if feature_size % patch_size:
            raise ValueError(
                f"patch size {patch_size} does not divide feature map size {feature_size}"
            )
        self.image_size = image_size
        self.pool = pool
        self.grid = feature_size // patch_size
        self.num_prefix_tokens = 1 if pool == "token" else 0
        self.width = width

        self.stem = stem if stem is not None else nn.Identity()
        self.patch_embed = nn.Conv2d(
            stem_channels, width, kernel_size=patch_size, stride=patch_size
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width)) if pool == "token" else None
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_prefix_tokens + self.grid**2, width))
        self.pos_drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *(
                Block(dim=width, heads=heads, mlp_dim=mlp_dim, dropout=dropout, drop_rate=r)
                for r in drop_rates(stochastic_depth, depth)
            )
        )
        self.norm = nn.LayerNorm(width, eps=LN_EPS)
        self.head = Head(
            width=width, num_classes=num_classes, kind=head, pre_logits_layer=representation
        )
        self.init_weights()
        self._register_load_state_dict_pre_hook(self._resize_pos_embed_on_load)

    def init_weights(self) -> None:
        lecun_normal_(self.patch_embed.weight)  # the official code's flax Conv default
        nn.init.zeros_(self.patch_embed.bias)
        nn.init.normal_(self.pos_embed, std=0.02)
        for block in self.blocks:
            block.attn.init_weights()
            block.mlp.init_weights()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``(B, C, H, W)`` -> encoder output ``(B, tokens, D)`` after the final LN."""
        x = rearrange(self.patch_embed(self.stem(x)), "b d h w -> b (h w) d")
        if self.cls_token is not None:
            x = torch.cat([repeat(self.cls_token, "1 1 d -> b 1 d", b=x.shape[0]), x], dim=1)
        x = self.pos_drop(x + self.pos_embed)
        return self.norm(self.blocks(x))

    def pre_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The image representation few-shot evaluation reads (paper Sec. 4.1)."""
        tokens = self.forward_features(x)
        pooled = tokens[:, 0] if self.pool == "token" else tokens.mean(dim=1)
        return self.head.pre_logits(pooled)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pre_logits(x))

    def _resize_pos_embed_on_load(self, state_dict, prefix, *args) -> None:
        # A checkpoint from another resolution: interpolate its position embedding.
        key = prefix + "pos_embed"
        if key in state_dict and state_dict[key].shape != self.pos_embed.shape:
            loaded = state_dict[key]
            if loaded.shape[1] - self.num_prefix_tokens <= 0 or loaded.shape[2] != self.width:
                return  # a genuinely different model: let load_state_dict report it
            state_dict[key] = resize_pos_embed(
                loaded, new_grid=(self.grid, self.grid), num_prefix_tokens=self.num_prefix_tokens
            )


def build(spec: ViTSpec, at: Build, **stem) -> VisionTransformer:
    """The registry's builder (:mod:`vitscale.families.vit`)."""
    return VisionTransformer(
        image_size=at.size,
        patch_size=spec.patch,
        width=spec.width,
        depth=spec.depth,
        mlp_dim=spec.mlp_dim,
        heads=spec.heads,
        num_classes=at.num_classes,
        head=at.head,
        pool=at.pool,
        dropout=at.dropout,
        stochastic_depth=at.stochastic_depth,
        representation=at.pre_logits,
        **stem,
    )


def build_hybrid(spec: HybridSpec, at: Build) -> VisionTransformer:
    """The hybrid's builder (:mod:`vitscale.families.hybrid`): the encoder on the trunk."""
    trunk = ResNetTrunk(spec.resnet)
    return build(
        spec.vit,
        at,
        stem=trunk,
        stem_channels=spec.resnet.out_channels,
        stem_downsample=spec.downsample,
    )
