"""BiT ResNet-v2 (Kolesnikov et al., ECCV 2020; the paper's baselines, Sec. 4.1):
``BiT-R{depth}x{width}`` (the paper's ``ResNet{depth}x{width}`` is an alias), the module
in :mod:`vitscale.models.resnet`. The stage walk is shared with the hybrid's trunk."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from .base import Build, Dtypes, Family, Saved, Tally, choices, conv_out

# Bottleneck units per stage (He et al. 2016; BiT). 11 and 20 are ours, demo trunks of
# three stages (depth = 3 convs per unit + stem + head, as 50 = 3 x 16 + 2): downsampling
# 16, so at the demo's 32 px the last stage still sees a 2x2 map (a fourth would see 1x1).
RESNET_LAYERS: dict[int, tuple[int, ...]] = {
    11: (1, 1, 1),
    20: (2, 2, 2),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
}
# Width multipliers on 64 (stem) and 256/512/1024/2048 (stage outputs). 0.5 is ours:
# the narrowest width whose every layer still has 32 channels for GroupNorm(32).
RESNET_WIDTHS = (Fraction(1, 2), Fraction(1), Fraction(2), Fraction(3), Fraction(4))
# JFT-300M base learning rates (docs/protocol.md, from paper Appendix B.1 / Table 3).
JFT_LR = {(50, 1): 1e-3, (50, 2): 1e-3, (101, 1): 8e-4, (152, 1): 6e-4, (152, 2): 6e-4}
TIMM_PORTS = {(50, 1), (50, 3), (101, 1), (101, 3), (152, 2), (152, 4)}  # resnetv2_*_bit
_NUM = r"\d+(?:\.\d+)?"
_NAME = re.compile(rf"(?:BiT-R|ResNet)(?P<depth>\d+)x(?P<width>{_NUM})")


def fmt_width(width: Fraction) -> str:
    return str(width.numerator) if width.denominator == 1 else str(float(width))


def trunk(depth: int, width_text: str, name: str, *, preact: bool, layers=None) -> ResNetSpec:
    width = Fraction(width_text)
    if layers is None:
        if depth not in RESNET_LAYERS:
            raise ValueError(
                f"unknown ResNet depth {depth} in {name!r}; valid depths: {choices(RESNET_LAYERS)}"
            )
        layers = RESNET_LAYERS[depth]
    if width not in RESNET_WIDTHS:
        raise ValueError(
            f"unknown ResNet width x{width_text} in {name!r}; valid widths: "
            f"{choices('x' + fmt_width(w) for w in RESNET_WIDTHS)}"
        )
    return ResNetSpec(name=name, depth=depth, width=width, layers=tuple(layers), preact=preact)


@dataclass(frozen=True)
class ResNetSpec(Family):
    """A ResNet trunk: bottleneck units per stage and a width multiplier.

    ``preact`` selects BiT's ResNet-v2 (pre-activation) units; the hybrid's trunk is the
    official code's post-activation ResNet (both GroupNorm + weight standardisation).
    BiT's one head is global average pooling straight into the classifier.
    """

    name: str
    depth: int
    width: Fraction
    layers: tuple[int, ...]
    preact: bool = True

    family: ClassVar[str] = "ResNet"
    grammar: ClassVar[str] = (
        f"'BiT-R<depth>x<width>' or 'ResNet<depth>x<width>' (depths {choices(RESNET_LAYERS)}, "
        f"widths {choices(fmt_width(w) for w in RESNET_WIDTHS)})"
    )
    builder: ClassVar[str] = "vitscale.models.resnet:build"
    convolutional: ClassVar[bool] = True

    @classmethod
    def parse(cls, name: str) -> ResNetSpec | None:
        if not (m := _NAME.fullmatch(name)):
            return None
        canonical = f"BiT-R{m['depth']}x{fmt_width(Fraction(m['width']))}"
        return trunk(int(m["depth"]), m["width"], canonical, preact=True)

    @classmethod
    def listed(cls) -> list[str]:
        # Demo trunks are narrow and shallow; paper trunks are full width.
        return [
            f"BiT-R{depth}x{fmt_width(width)}"
            for depth in RESNET_LAYERS
            for width in RESNET_WIDTHS
            if (depth < 50) == (width < 1)
        ]

    @property
    def stem_channels(self) -> int:
        return int(64 * self.width)

    def stage_channels(self) -> list[tuple[int, int, int]]:
        """``(mid, out, stride)`` per stage: mid = 64·w·2^i, out = 4·mid, stride 1 then 2."""
        mids = [int(64 * self.width) * 2**i for i in range(len(self.layers))]
        return [(m, 4 * m, 1 if i == 0 else 2) for i, m in enumerate(mids)]

    @property
    def out_channels(self) -> int:
        return self.stage_channels()[-1][1]

    @property
    def downsample(self) -> int:
        """Stem conv (2) x max-pool (2) x one stride-2 stage per stage after the first."""
        return 4 * 2 ** (len(self.layers) - 1)

    def columns(self) -> tuple[str, int | None]:
        return f"R{self.depth}x{fmt_width(self.width)}", None

    def check_resolution(self, image_size: int) -> None:
        if image_size < self.downsample:
            raise ValueError(
                f"{self.name}: resolution {image_size} is below the trunk's downsampling "
                f"{self.downsample}"
            )

    def smallest_resolution(self, at_least: int) -> int:
        return max(at_least, self.downsample)

    def count_stages(self, t: Tally, size: int) -> int:
        cin = self.stem_channels
        for units, (mid, cout, stride) in zip(self.layers, self.stage_channels(), strict=True):
            for i in range(units):
                s = stride if i == 0 else 1
                project = s != 1 or cin != cout
                if self.preact:  # BiT: norms on the unit's input channels
                    t.norm(cin)
                    t.conv(cin, mid, 1, size=size)
                    t.norm(mid)
                    out = t.conv(mid, mid, 3, size=size, stride=s, pad=1)
                    t.norm(mid)
                    t.conv(mid, cout, 1, size=out)
                    if project:
                        t.conv(cin, cout, 1, size=size, stride=s)
                else:  # hybrid trunk: norms after each conv
                    t.conv(cin, mid, 1, size=size)
                    t.norm(mid)
                    out = t.conv(mid, mid, 3, size=size, stride=s, pad=1)
                    t.norm(mid)
                    t.conv(mid, cout, 1, size=out)
                    t.norm(cout)
                    if project:
                        t.conv(cin, cout, 1, size=size, stride=s)
                        t.norm(cout)
                size, cin = out, cout
        return size

    def count(self, t: Tally, at: Build) -> None:
        size = t.conv(3, self.stem_channels, 7, size=at.size, stride=2, pad=3)
        self.count_stages(t, conv_out(size, 3, 2, 1))  # 3x3/2 max-pool, padding 1
        t.norm(self.out_channels)
        t.head(self.out_channels, at.num_classes, at.head, pre_logits=False)

    def saved(self, s: Saved, at: Build, b: Dtypes) -> None:
        """BiT's trunk, final GN-ReLU and classifier. Under CUDA autocast GroupNorm runs in
        fp32, so a unit keeps fp32 norm inputs and ReLU outputs *and* a bf16 copy for the
        next convolution; the standardised kernels are kept too."""
        c, g, size = b.compute, b.norm, at.size
        stem = self.stem_channels
        s.act(3 * size * size, c)  # the image (its bf16 cast under autocast)
        _std_conv(s, 3, stem, 7, b)
        size = conv_out(size, 7, 2, 3)
        s.act(stem * (size + 2) ** 2, c)  # max-pool input: the stem output, zero-padded by 1
        size = conv_out(size + 2, 3, 2, 0)
        s.act(stem * size * size, 8)  # max-pool indices, int64
        cin = stem
        for units, (mid, cout, stride) in zip(self.layers, self.stage_channels(), strict=True):
            for i in range(units):
                st = stride if i == 0 else 1
                project = st != 1 or cin != cout
                out = conv_out(size, 3, st, 1)
                # GN-ReLU-conv three times; GN keeps its input, ReLU its output (both in GN's
                # dtype); a conv keeps the bf16 cast of its input when that dtype differs.
                for channels, z, convs in (
                    (cin, size, 2 if project else 1),
                    (mid, size, 1),
                    (mid, out, 1),
                ):
                    s.act(channels * z * z, g)
                    s.gn_stats()
                    s.act(channels * z * z, g)
                    if c != g:
                        for _ in range(convs):
                            s.act(channels * z * z, c)
                _std_conv(s, cin, mid, 1, b)
                _std_conv(s, mid, mid, 3, b)
                _std_conv(s, mid, cout, 1, b)
                if project:
                    _std_conv(s, cin, cout, 1, b)
                size, cin = out, cout
        s.act(cin * size * size, g)  # final GN input
        s.gn_stats()
        s.act(cin * size * size, g)  # its ReLU
        s.classifier(cin, at.num_classes, b)  # on the pooled features

    def jft_lr(self) -> float:
        if self.depth >= 152:
            return 6e-4
        return JFT_LR.get((self.depth, int(self.width)), super().jft_lr())

    def timm(self, *, image_size: int, pool: str | None) -> tuple[str, dict]:
        if self.width.denominator != 1 or (self.depth, self.width) not in TIMM_PORTS:
            ports = ", ".join(f"R{d}x{w}" for d, w in sorted(TIMM_PORTS))
            raise ValueError(
                f"timm has no architecture that builds {self.name} (its BiT ports: {ports})"
            )
        return f"resnetv2_{self.depth}x{self.width}_bit", {}


def _std_conv(s: Saved, cin: int, cout: int, k: int, b: Dtypes) -> None:
    """A weight-standardised kernel: the standardised weight (fp32) or its bf16 cast is
    saved by the convolution, the standardisation's mean and inverse std by batch norm."""
    s.weight_copy(k * k * cin * cout, b.compute)
    s.weight_copy(2 * cout, 4)
