"""The ResNet + ViT hybrid (paper Sec. 3.1, "Hybrid Architecture"):
``R50x{width}+ViT-{size}/{downsample}``, whose number after the slash is the total
downsampling (docs/protocol.md): the ViT encoder on 1x1 patches of a ResNet-50 feature map,
built by :func:`vitscale.models.vit.build_hybrid`."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import ClassVar

from .base import Build, Dtypes, Family, Saved, Tally, choices, conv_out, same_padding
from .resnet import ResNetSpec, trunk
from .vit import JFT_LR, ViTSpec, encoder

# Stages per total downsampling: /16 folds stage 4 into stage 3.
HYBRID_STAGES: dict[int, tuple[int, ...]] = {16: (3, 4, 9), 32: (3, 4, 6, 3)}
TIMM_PORTS = {16: "vit_base_r50_s16_224", 32: "vit_large_r50_s32_224"}  # R50x1 trunks
_NAME = re.compile(r"R(?P<depth>\d+)x(?P<width>\d+)\+ViT-(?P<size>[A-Za-z]+)/(?P<ds>\d+)")


@dataclass(frozen=True)
class HybridSpec(Family):
    """ResNet trunk as patch embedding + ViT encoder (1x1 patches on the feature map)."""

    name: str
    resnet: ResNetSpec
    vit: ViTSpec

    family: ClassVar[str] = "Hybrid"
    grammar: ClassVar[str] = "'R50x<width>+ViT-<size>/<16|32>'"
    builder: ClassVar[str] = "vitscale.models.vit:build_hybrid"
    convolutional: ClassVar[bool] = True
    pools: ClassVar[tuple[str, ...]] = ("token", "gap")
    pre_logits_layer: ClassVar[bool] = True

    @classmethod
    def parse(cls, name: str) -> HybridSpec | None:
        if not (m := _NAME.fullmatch(name)):
            return None
        ds = int(m["ds"])
        if ds not in HYBRID_STAGES:
            raise ValueError(
                f"{name!r}: a hybrid's number after the slash is its total downsampling; "
                f"valid: {choices(HYBRID_STAGES)}"
            )
        if int(m["depth"]) != 50:
            raise ValueError(f"{name!r}: hybrids use a ResNet-50 trunk (R50x1 ... R50x4)")
        canonical = f"R50x{m['width']}+ViT-{m['size']}/{ds}"
        resnet = trunk(50, m["width"], canonical, preact=False, layers=HYBRID_STAGES[ds])
        return HybridSpec(name=canonical, resnet=resnet, vit=encoder(m["size"], 1, canonical))

    @classmethod
    def listed(cls) -> list[str]:
        return [f"R50x1+ViT-{size}/{ds}" for size in ("S", "B", "L") for ds in HYBRID_STAGES]

    @property
    def downsample(self) -> int:
        return self.resnet.downsample

    def columns(self) -> tuple[str, int | None]:
        return self.vit.size, self.downsample

    def check_resolution(self, image_size: int) -> None:
        if image_size % self.downsample:
            raise ValueError(
                f"{self.name}: total downsampling {self.downsample} does not divide resolution "
                f"{image_size}; use a multiple of {self.downsample}"
            )

    def smallest_resolution(self, at_least: int) -> int:
        return 2 * self.downsample

    def count(self, t: Tally, at: Build) -> None:
        r = self.resnet
        size = t.conv(3, r.stem_channels, 7, size=at.size, stride=2, pad=3)
        t.norm(r.stem_channels)
        size = r.count_stages(t, conv_out(size, 3, 2, 1))  # 3x3/2 max-pool
        self.vit.count(t, replace(at, size=size), channels=r.out_channels)

    def saved(self, s: Saved, at: Build, b: Dtypes) -> None:
        channels, size = self._trunk_saved(s, at.size, b)  # its last ReLU keeps the map
        at = replace(at, size=size)
        self.vit.saved(s, at, b, channels=channels, copies_input=b.norm != b.compute)

    def _trunk_saved(self, s: Saved, size: int, b: Dtypes) -> tuple[int, int]:
        """The post-activation trunk with TF "SAME" padding; returns (channels, size) of
        its feature map."""
        c, g = b.compute, b.norm
        r = self.resnet
        stem = r.stem_channels
        s.act(3 * (size + sum(same_padding(size, 7, 2))) ** 2, c)  # the padded image (cast)
        _same_std_conv(s, 3, stem, 7, b)
        size = -(-size // 2)
        s.act(stem * size * size, g)  # GN input
        s.gn_stats()
        s.act(stem * size * size, g)  # ReLU output
        s.act(stem * (size + sum(same_padding(size, 3, 2))) ** 2, g)  # max-pool's padded input
        size = -(-size // 2)
        s.act(stem * size * size, 8)  # max-pool indices
        cin, kept = stem, False  # the max-pool's output is kept by nothing yet
        for units, (mid, cout, stride) in zip(r.layers, r.stage_channels(), strict=True):
            for i in range(units):
                st = stride if i == 0 else 1
                project = st != 1 or cin != cout
                out = -(-size // st)
                # conv1 (and the projection's conv) on the unit's input: a cast each under
                # autocast (no padding for 1x1), else the input itself unless a ReLU keeps it.
                _same_conv_input(s, cin, size, 1, 1, b=b, kept=kept)
                if project:
                    if c != g:
                        _same_conv_input(s, cin, size, 1, st, b=b, kept=kept)
                    s.act(cout * out * out, g)  # the projection's GN input
                    s.gn_stats()
                for channels, z, k, conv_stride in ((mid, size, 3, st), (mid, out, 1, 1)):
                    s.act(channels * z * z, g)  # GN input
                    s.gn_stats()
                    s.act(channels * z * z, g)  # ReLU output
                    _same_conv_input(s, channels, z, k, conv_stride, b=b, kept=True)
                s.act(cout * out * out, g)  # conv3's GN input
                s.gn_stats()
                s.act(cout * out * out, g)  # ReLU(GN + shortcut): the next unit's input
                _same_std_conv(s, cin, mid, 1, b)
                _same_std_conv(s, mid, mid, 3, b)
                _same_std_conv(s, mid, cout, 1, b)
                if project:
                    _same_std_conv(s, cin, cout, 1, b)
                size, cin, kept = out, cout, True
        return cin, size

    def jft_lr(self) -> float:
        if (self.vit.size, self.downsample) == ("L", 32):
            return 2e-4
        return JFT_LR.get((self.vit.size, self.downsample), super().jft_lr())

    def timm(self, *, image_size: int, pool: str | None) -> tuple[str, dict]:
        if self.resnet.width != 1:
            raise ValueError(f"timm's hybrids have an R50x1 trunk; {self.name} has another")
        return TIMM_PORTS[self.downsample], self.vit.timm_args(image_size, pool)


def _same_std_conv(s: Saved, cin: int, cout: int, k: int, b: Dtypes) -> None:
    """The hybrid's kernel, ``(w - mean) / (std + eps)``: the division keeps the centred
    kernel (fp32) and the per-channel divisor, the square root its result, the
    convolution the standardised kernel (or its bf16 cast)."""
    s.weight_copy(k * k * cin * cout, 4)
    s.weight_copy(2 * cout, 4)
    s.weight_copy(k * k * cin * cout, b.compute)


def _same_conv_input(
    s: Saved, channels: int, size: int, k: int, stride: int, *, b: Dtypes, kept: bool
) -> None:
    """What a "SAME" convolution keeps of a ``channels x size x size`` input in GN's dtype
    (``kept``: a layer before keeps that input already): the padded copy when it pads,
    else the input's cast under autocast, else the input itself unless already kept."""
    pad = sum(same_padding(size, k, stride))
    if pad or b.compute != b.norm or not kept:
        s.act(channels * (size + pad) ** 2, b.compute)
