"""MLP-Mixer (Tolstikhin et al., NeurIPS 2021): ``Mixer-{size}/{patch}``, the module in
:mod:`vitscale.models.mixer`.

Each layer mixes the S patch tokens with one MLP shared across channels (on the
transposed table), then the C channels with one MLP shared across tokens; pre-LN, skip
connections, global average pooling, one linear head. The token-mixing MLP's weights are
S x D_S, so a Mixer's parameters depend on its resolution (224 px in their Table 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from .base import Build, Dtypes, Family, Patches, Saved, Tally, choices, size_of


class Size(NamedTuple):
    depth: int
    width: int  # C, the hidden size
    token_mlp: int  # D_S
    channel_mlp: int  # D_C


# Tolstikhin et al. Table 1 (S, B, L, H; patch sizes as there: 32 and 16, 14 for H). Femto
# is ours, the demo's CPU size beside ViT-Femto: its width and depth, Table 1's ratios
# (D_S = C / 2, D_C = 4 C).
MIXER_SIZES = {
    "Femto": Size(depth=3, width=48, token_mlp=24, channel_mlp=192),
    "S": Size(depth=8, width=512, token_mlp=256, channel_mlp=2048),
    "B": Size(depth=12, width=768, token_mlp=384, channel_mlp=3072),
    "L": Size(depth=24, width=1024, token_mlp=512, channel_mlp=4096),
    "H": Size(depth=32, width=1280, token_mlp=640, channel_mlp=5120),
}
_NAME = re.compile(r"Mixer-(?P<size>[A-Za-z]+)/(?P<patch>\d+)")


@dataclass(frozen=True)
class MixerSpec(Patches, Family):
    name: str
    size: str
    patch: int
    depth: int
    width: int
    token_mlp: int
    channel_mlp: int

    family: ClassVar[str] = "Mixer"
    grammar: ClassVar[str] = f"'Mixer-<size>/<patch>' (sizes {choices(MIXER_SIZES)})"
    builder: ClassVar[str] = "vitscale.models.mixer:build"

    @classmethod
    def parse(cls, name: str) -> MixerSpec | None:
        if not (m := _NAME.fullmatch(name)):
            return None
        size, patch = m["size"], int(m["patch"])
        s = size_of(MIXER_SIZES, "Mixer", size, patch, name)
        return MixerSpec(name=name, size=size, patch=patch, **s._asdict())

    @classmethod
    def listed(cls) -> list[str]:
        paper = [f"Mixer-{s}/{p}" for s in ("S", "B", "L") for p in (32, 16)]
        return ["Mixer-Femto/8", *paper, "Mixer-H/14"]

    def count(self, t: Tally, at: Build) -> None:
        c, n = self.width, (at.size // self.patch) ** 2
        t.conv(3, c, self.patch, size=at.size, stride=self.patch, bias=True)
        for _ in range(self.depth):
            t.norm(c)
            t.dense(n, self.token_mlp, tokens=c)  # token mixing: one MLP per channel
            t.dense(self.token_mlp, n, tokens=c)
            t.norm(c)
            t.dense(c, self.channel_mlp, tokens=n)  # channel mixing: one MLP per token
            t.dense(self.channel_mlp, c, tokens=n)
        t.norm(c)
        t.head(c, at.num_classes, at.head, pre_logits=False)

    def saved(self, s: Saved, at: Build, b: Dtypes) -> None:
        """As the ViT's encoder with the two MLPs in place of attention, but under autocast
        the residual stream is the stem's bf16 (no fp32 position embedding is added): a
        LayerNorm keeps it as GroupNorm does (its fp32 cast on CUDA, itself on the CPU)."""
        c = b.compute
        size = at.size
        d, n = self.width, (size // self.patch) ** 2
        ds, dc = self.token_mlp, self.channel_mlp
        s.act(3 * size * size, c)  # the images (or their cast), kept by the stem
        drops = at.dropout > 0
        for _ in range(self.depth):
            for tokens, hidden in ((d, ds), (n, dc)):  # token mixing: rows are channels
                s.ln(n, d, b.norm)
                s.act(n * d, c)  # LN output (transposed for token mixing): fc1's input
                s.act(tokens * hidden, c)  # fc1 output: GELU's input
                s.act(tokens * hidden, c)  # GELU output (after dropout): fc2's input
                s.act(drops * (tokens * hidden + n * d), b.mask or c)  # after GELU and fc2
        s.ln(n, d, b.norm)  # final LN; the mean over tokens keeps nothing
        s.classifier(d, at.num_classes, b)
        if c != 4:
            s.weight_copy(3 * self.patch**2 * d + self.depth * 2 * (n * ds + d * dc), c)

    def timm(self, *, image_size: int, pool: str | None) -> tuple[str, dict]:
        if self.size not in "SBL" or self.patch not in (16, 32):
            super().timm(image_size=image_size, pool=pool)  # timm's mixer_s32 ... mixer_l16
        return f"mixer_{self.size.lower()}{self.patch}_224", {"img_size": image_size}
