"""ViT (Dosovitskiy et al., ICLR 2021): ``ViT-{size}/{patch}``, the module in
:mod:`vitscale.models.vit`. The encoder's counts are shared with the hybrid, which is this
encoder on a ResNet's feature map."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from .base import Build, Dtypes, Family, Patches, Saved, Tally, choices, size_of


class Size(NamedTuple):
    depth: int
    width: int
    mlp_dim: int
    heads: int
    note: str


# Paper Table 1 gives B, L and H. Ti and S are not in the paper: DeiT and the official
# google-research/vision_transformer configs. "b" is B with every hidden dimension halved
# (paper Fig. 4: same 12 heads, head dimension 32). Femto, Pico and Nano are ours:
# CPU-sized models for the demo and tests at 32-64 px.
VIT_SIZES: dict[str, Size] = {
    "Femto": Size(depth=3, width=48, mlp_dim=192, heads=2, note="vitscale demo size"),
    "Pico": Size(depth=4, width=64, mlp_dim=256, heads=2, note="vitscale demo size"),
    "Nano": Size(depth=6, width=128, mlp_dim=512, heads=4, note="vitscale demo size"),
    "Ti": Size(depth=12, width=192, mlp_dim=768, heads=3, note="DeiT / official configs"),
    "S": Size(depth=12, width=384, mlp_dim=1536, heads=6, note="DeiT / official configs"),
    "b": Size(depth=12, width=384, mlp_dim=1536, heads=12, note="paper Fig. 4: B halved"),
    "B": Size(depth=12, width=768, mlp_dim=3072, heads=12, note="paper Table 1"),
    "L": Size(depth=24, width=1024, mlp_dim=4096, heads=16, note="paper Table 1"),
    "H": Size(depth=32, width=1280, mlp_dim=5120, heads=16, note="paper Table 1"),
}

# Patch sizes the paper uses (32, 16; 14 for H) and 8 from later work; demo sizes use
# the patches the CPU demo trains at 32 px (16: a 2x2 grid, 8: 4x4). Any divisor of the
# resolution is accepted; these are what list_models() enumerates.
_LISTED_PATCHES = {"Femto": (16, 8), "Pico": (16, 8), "Nano": (8, 4), "b": (32,), "H": (14,)}
_DEFAULT_PATCHES = (32, 16, 8)
# JFT-300M base learning rates (docs/protocol.md, from paper Appendix B.1 / Table 3).
JFT_LR = {("B", 32): 8e-4, ("B", 16): 8e-4, ("L", 32): 6e-4, ("L", 16): 4e-4, ("H", 14): 3e-4}
_NAME = re.compile(r"ViT-(?P<size>[A-Za-z]+)/(?P<patch>\d+)")


def encoder(size: str, patch: int, name: str) -> ViTSpec:
    s = size_of(VIT_SIZES, "ViT", size, patch, name)
    if s.width % s.heads:
        raise ValueError(f"{name!r}: width {s.width} is not divisible by {s.heads} heads")
    return ViTSpec(
        name=name,
        size=size,
        patch=patch,
        depth=s.depth,
        width=s.width,
        mlp_dim=s.mlp_dim,
        heads=s.heads,
    )


@dataclass(frozen=True)
class ViTSpec(Patches, Family):
    """A plain ViT: patch embedding, ``depth`` pre-LN blocks, class token."""

    name: str
    size: str
    patch: int
    depth: int
    width: int
    mlp_dim: int
    heads: int

    family: ClassVar[str] = "ViT"
    grammar: ClassVar[str] = f"'ViT-<size>/<patch>' (sizes {choices(VIT_SIZES)})"
    builder: ClassVar[str] = "vitscale.models.vit:build"
    pools: ClassVar[tuple[str, ...]] = ("token", "gap")
    pre_logits_layer: ClassVar[bool] = True
    tolerance: ClassVar[float] = 0.01

    @classmethod
    def parse(cls, name: str) -> ViTSpec | None:
        m = _NAME.fullmatch(name)
        return m and encoder(m["size"], int(m["patch"]), name)

    @classmethod
    def listed(cls) -> list[str]:
        return [
            f"ViT-{size}/{patch}"
            for size in VIT_SIZES
            for patch in _LISTED_PATCHES.get(size, _DEFAULT_PATCHES)
        ]

    def count(self, t: Tally, at: Build, *, channels: int = 3) -> None:
        d = self.width
        grid = t.conv(channels, d, self.patch, size=at.size, stride=self.patch, bias=True)
        prefix = 1 if at.pool == "token" else 0
        tokens = grid * grid + prefix
        t.params += prefix * d + tokens * d  # class token, position embedding
        for _ in range(self.depth):
            t.norm(d)
            t.dense(d, 3 * d, tokens=tokens)  # fused qkv
            t.add_macs(2 * tokens * tokens * d)  # QK^T and AV over all heads
            t.dense(d, d, tokens=tokens)  # output projection
            t.norm(d)
            t.dense(d, self.mlp_dim, tokens=tokens)
            t.dense(self.mlp_dim, d, tokens=tokens)
        t.norm(d)
        t.head(d, at.num_classes, at.head, pre_logits=at.pre_logits)

    def saved(
        self, s: Saved, at: Build, b: Dtypes, *, channels: int = 3, copies_input: bool = True
    ) -> None:
        """Patch embedding, encoder, final LN and head on a ``channels x size x size``
        input (``copies_input``: the patch embedding keeps a copy of it, as of the fp32
        images; a hybrid's trunk keeps its output already unless autocast casts it).

        Under autocast bf16 the residual stream is fp32 (added to the fp32 position
        embedding) and attention (flash or memory-efficient SDPA) keeps q, k, v, its
        output and a log-sum-exp, never the N x N matrix."""
        c, size = b.compute, at.size
        d, m, h = self.width, self.mlp_dim, self.heads
        if copies_input:
            s.act(channels * size * size, c)
        if c != 4:
            s.weight_copy(channels * self.patch**2 * d, c)
        n = (size // self.patch) ** 2 + (1 if at.pool == "token" else 0)
        # Dropout keeps a mask per element: bool in CUDA's fused kernel, the input's dtype on
        # the CPU (a scaled noise tensor).
        drops = at.dropout > 0
        s.act(drops * n * d, b.mask or 4)  # after the position embedding (fp32 stream)
        for _ in range(self.depth):
            for _norm in range(2):
                s.ln(n, d)
                s.act(n * d, c)  # LN output as the next dense layer's input (qkv, fc1)
            s.act(3 * n * d, c)  # q, k, v (views of the qkv output) kept by attention
            s.act(n * d, c)  # attention output, also the output projection's input
            s.act(h * n, 4)  # attention's log-sum-exp
            s.act(n * m, c)  # fc1 output: GELU's input
            s.act(n * m, c)  # GELU output (after dropout): fc2's input
            s.act(drops * (2 * n * d + n * m), b.mask or c)  # after proj, GELU and fc2
            if c != 4:
                s.weight_copy(4 * d * d + 2 * d * m, c)
        s.ln(n, d)  # final LN
        if at.pool == "token" and c == 4:
            s.act(n * d, 4)  # the class token is a view: the whole final LN output stays
        else:
            s.act(d, c)  # the pooled (or cast) representation
        if at.head == "pretrain" and at.pre_logits:
            s.act(d, c)  # tanh output, the classifier's input
            if c != 4:
                s.weight_copy(d * d, c)
        if c != 4:
            s.weight_copy(d * at.num_classes, c)

    def jft_lr(self) -> float:
        return JFT_LR.get((self.size, self.patch), super().jft_lr())

    def timm(self, *, image_size: int, pool: str | None) -> tuple[str, dict]:
        return "vit_base_patch16_224", self.timm_args(image_size, pool) | {"patch_size": self.patch}

    def timm_args(self, image_size: int, pool: str | None) -> dict:
        return {
            "img_size": image_size,
            "embed_dim": self.width,
            "depth": self.depth,
            "num_heads": self.heads,
            "mlp_ratio": self.mlp_dim / self.width,
            "act_layer": "gelu_tanh",  # flax's nn.gelu, the official models' (timm: exact erf)
            "class_token": pool != "gap",
            "global_pool": "avg" if pool == "gap" else "token",
            "fc_norm": False,  # the official GAP reads the encoder's final LayerNorm
        }
