"""Model names -> architecture specs: the one table every other part reads.

This module imports nothing heavy (no torch), so compute accounting, grid validation and
the analysis package can decode a name such as ``"ViT-L/16"`` or ``"ResNet152x2"`` on a
laptop. The module code in :mod:`vitscale.models.vit` and :mod:`vitscale.models.resnet`
builds exactly what a spec says, and :mod:`vitscale.flops` counts exactly that.

Names (paper Sec. 4.1; docs/protocol.md, "Models"): ``ViT-{size}/{patch}`` (sizes
:data:`VIT_SIZES`, any patch size that divides the resolution), ``BiT-R{depth}x{width}``
(:data:`RESNET_LAYERS`, :data:`RESNET_WIDTHS`; the paper's ``ResNet{depth}x{width}`` is
an alias) and hybrids ``R{depth}x{width}+ViT-{size}/{downsample}``, whose number after the
slash is the total downsampling, 16 or 32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import ClassVar, get_args


@dataclass(frozen=True)
class _Size:
    depth: int
    width: int
    mlp_dim: int
    heads: int
    note: str


# Paper Table 1 gives B, L and H. Ti and S are not in the paper: DeiT and the official
# google-research/vision_transformer configs. "b" is B with every hidden dimension halved
# (paper Fig. 4: same 12 heads, head dimension 32). Femto, Pico and Nano are ours:
# CPU-sized models for the demo and tests at 32-64 px.
VIT_SIZES: dict[str, _Size] = {
    "Femto": _Size(depth=3, width=48, mlp_dim=192, heads=2, note="vitscale demo size"),
    "Pico": _Size(depth=4, width=64, mlp_dim=256, heads=2, note="vitscale demo size"),
    "Nano": _Size(depth=6, width=128, mlp_dim=512, heads=4, note="vitscale demo size"),
    "Ti": _Size(depth=12, width=192, mlp_dim=768, heads=3, note="DeiT / official configs"),
    "S": _Size(depth=12, width=384, mlp_dim=1536, heads=6, note="DeiT / official configs"),
    "b": _Size(depth=12, width=384, mlp_dim=1536, heads=12, note="paper Fig. 4: B halved"),
    "B": _Size(depth=12, width=768, mlp_dim=3072, heads=12, note="paper Table 1"),
    "L": _Size(depth=24, width=1024, mlp_dim=4096, heads=16, note="paper Table 1"),
    "H": _Size(depth=32, width=1280, mlp_dim=5120, heads=16, note="paper Table 1"),
}

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
RESNET_WIDTHS: tuple[Fraction, ...] = (
    Fraction(1, 2),
    Fraction(1),
    Fraction(2),
    Fraction(3),
    Fraction(4),
)

# Hybrid stages per total downsampling (docs/protocol.md): /16 folds stage 4 into stage 3.
HYBRID_STAGES: dict[int, tuple[int, ...]] = {16: (3, 4, 9), 32: (3, 4, 6, 3)}

# Patch sizes the paper uses (32, 16; 14 for H) and 8 from later work; demo sizes use
# the patches the CPU demo trains at 32 px (16: a 2x2 grid, 8: 4x4). Any divisor of the
# resolution is accepted; these are what list_models() enumerates.
_LISTED_PATCHES = {"Femto": (16, 8), "Pico": (16, 8), "Nano": (8, 4), "b": (32,), "H": (14,)}
_DEFAULT_PATCHES = (32, 16, 8)


@dataclass(frozen=True)
class ViTSpec:
    """A plain ViT: patch embedding, ``depth`` pre-LN blocks, class token."""

    name: str
    size: str
    patch: int
    depth: int
    width: int
    mlp_dim: int
    heads: int

    family: ClassVar[str] = "ViT"
    convolutional: ClassVar[bool] = False  # a convolution trunk (channels-last pays on a GPU)


@dataclass(frozen=True)
class ResNetSpec:
    """A ResNet trunk: bottleneck units per stage and a width multiplier.

    ``preact`` selects BiT's ResNet-v2 (pre-activation) units; the hybrid's trunk is the
    official code's post-activation ResNet (both GroupNorm + weight standardisation).
    """

    name: str
    depth: int
    width: Fraction
    layers: tuple[int, ...]
    preact: bool = True

    family: ClassVar[str] = "ResNet"
    convolutional: ClassVar[bool] = True

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


@dataclass(frozen=True)
class HybridSpec:
    """ResNet trunk as patch embedding + ViT encoder (1x1 patches on the feature map)."""

    name: str
    resnet: ResNetSpec
    vit: ViTSpec

    family: ClassVar[str] = "Hybrid"
    convolutional: ClassVar[bool] = True

    @property
    def downsample(self) -> int:
        return self.resnet.downsample


ModelSpec = ViTSpec | ResNetSpec | HybridSpec
FAMILIES: tuple[str, ...] = tuple(spec.family for spec in get_args(ModelSpec))  # Table 6's order

_NUM = r"\d+(?:\.\d+)?"
_VIT_RE = re.compile(r"ViT-(?P<size>[A-Za-z]+)/(?P<patch>\d+)")
_BIT_RE = re.compile(rf"(?:BiT-R|ResNet)(?P<depth>\d+)x(?P<width>{_NUM})")
_HYBRID_RE = re.compile(r"R(?P<depth>\d+)x(?P<width>\d+)\+ViT-(?P<size>[A-Za-z]+)/(?P<ds>\d+)")


def _fmt_width(width: Fraction) -> str:
    return str(width.numerator) if width.denominator == 1 else str(float(width))


def _choices(values) -> str:
    return ", ".join(str(v) for v in values)


def _vit(size: str, patch: int, name: str) -> ViTSpec:
    if size not in VIT_SIZES:
        raise ValueError(
            f"unknown ViT size {size!r} in {name!r}; valid sizes: {_choices(VIT_SIZES)}"
        )
    if patch < 1:
        raise ValueError(f"patch size must be a positive integer, got {patch} in {name!r}")
    s = VIT_SIZES[size]
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


def _resnet(depth: int, width_text: str, name: str, *, preact: bool, layers=None) -> ResNetSpec:
    width = Fraction(width_text)
    if layers is None:
        if depth not in RESNET_LAYERS:
            raise ValueError(
                f"unknown ResNet depth {depth} in {name!r}; valid depths: {_choices(RESNET_LAYERS)}"
            )
        layers = RESNET_LAYERS[depth]
    if width not in RESNET_WIDTHS:
        raise ValueError(
            f"unknown ResNet width x{width_text} in {name!r}; valid widths: "
            f"{_choices('x' + _fmt_width(w) for w in RESNET_WIDTHS)}"
        )
    return ResNetSpec(name=name, depth=depth, width=width, layers=tuple(layers), preact=preact)


def parse(name: str) -> ModelSpec:
    """Decode a model name into its spec; ``ValueError`` naming the valid choices.

    >>> parse("ViT-B/16").width
    768
    >>> parse("ResNet50x1").name
    'BiT-R50x1'
    """
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string, got {type(name).__name__}")
    if m := _HYBRID_RE.fullmatch(name):
        ds = int(m["ds"])
        if ds not in HYBRID_STAGES:
            raise ValueError(
                f"{name!r}: a hybrid's number after the slash is its total downsampling; "
                f"valid: {_choices(HYBRID_STAGES)}"
            )
        depth = int(m["depth"])
        if depth != 50:
            raise ValueError(f"{name!r}: hybrids use a ResNet-50 trunk (R50x1 ... R50x4)")
        canonical = f"R{depth}x{m['width']}+ViT-{m['size']}/{ds}"
        resnet = _resnet(depth, m["width"], canonical, preact=False, layers=HYBRID_STAGES[ds])
        vit = _vit(m["size"], 1, canonical)
        return HybridSpec(name=canonical, resnet=resnet, vit=vit)
    if m := _VIT_RE.fullmatch(name):
        return _vit(m["size"], int(m["patch"]), name)
    if m := _BIT_RE.fullmatch(name):
        width = Fraction(m["width"])
        canonical = f"BiT-R{m['depth']}x{_fmt_width(width)}"
        return _resnet(int(m["depth"]), m["width"], canonical, preact=True)
    raise ValueError(
        f"unknown model name {name!r}; valid forms: 'ViT-<size>/<patch>' "
        f"(sizes {_choices(VIT_SIZES)}), 'BiT-R<depth>x<width>' or 'ResNet<depth>x<width>' "
        f"(depths {_choices(RESNET_LAYERS)}, widths {_choices(_fmt_width(w) for w in RESNET_WIDTHS)}), "
        f"'R50x<width>+ViT-<size>/<16|32>'. Listed models: vitscale.models.list_models()"
    )


def family(name: str) -> str:
    """``"ViT"``, ``"ResNet"`` or ``"Hybrid"`` (paper Table 6's family column)."""
    return parse(name).family


def check_resolution(spec: ModelSpec, image_size: int) -> None:
    """Raise ``ValueError`` when the model cannot tile ``image_size`` exactly."""
    if image_size < 1:
        raise ValueError(f"image_size must be positive, got {image_size}")
    if isinstance(spec, ViTSpec):
        if image_size % spec.patch:
            divisors = [p for p in range(1, image_size + 1) if image_size % p == 0]
            raise ValueError(
                f"{spec.name}: patch size {spec.patch} does not divide resolution {image_size}; "
                f"patch sizes that do: {_choices(divisors)}"
            )
    elif isinstance(spec, HybridSpec):
        ds = spec.downsample
        if image_size % ds:
            raise ValueError(
                f"{spec.name}: total downsampling {ds} does not divide resolution {image_size}; "
                f"use a multiple of {ds}"
            )
    elif image_size < spec.downsample:
        raise ValueError(
            f"{spec.name}: resolution {image_size} is below the trunk's downsampling {spec.downsample}"
        )


def head_problems(spec: ModelSpec, *, pool: str | None, pre_logits: bool | None) -> list[str]:
    """Head settings the architecture has no such part for, each as ``"key: why"``: BiT's
    one head is global average pooling straight into the classifier (Kolesnikov et al.
    2020). The config's rules and ``create_model`` both say these."""
    if not isinstance(spec, ResNetSpec):
        return []
    problems = []
    if pool not in (None, "gap"):
        problems.append("pool: BiT ResNets pool by global average only; valid: 'gap'")
    if pre_logits:
        problems.append("pre_logits: BiT has no pre-logits layer; valid: null, false")
    return problems


def smallest_resolution(name: str, *, at_least: int = 32) -> int:
    """The smallest resolution of at least ``at_least`` px that the model tiles exactly
    (a hybrid: twice its downsampling), for real forward passes that must stay cheap
    (tests, the memory calibration)."""
    spec = parse(name)
    if isinstance(spec, ViTSpec):
        return spec.patch * max(1, -(-at_least // spec.patch))
    if isinstance(spec, HybridSpec):
        return 2 * spec.downsample
    return max(at_least, spec.downsample)


def list_models(family: str | None = None) -> list[str]:
    """Canonical names of the registry, optionally one family ("ViT", "ResNet", "Hybrid").

    ViT patch sizes and BiT depth/width pairs beyond these parse too; this is the set
    tests are parametrised over and the paper's figures use.
    """
    names: list[str] = []
    for size in VIT_SIZES:
        for patch in _LISTED_PATCHES.get(size, _DEFAULT_PATCHES):
            names.append(f"ViT-{size}/{patch}")
    for depth in RESNET_LAYERS:
        for width in RESNET_WIDTHS:
            demo = depth < 50 or width < 1
            if demo and not (depth < 50 and width < 1):
                continue  # demo trunks are narrow and shallow; paper trunks are full width
            names.append(f"BiT-R{depth}x{_fmt_width(width)}")
    for size in ("S", "B", "L"):
        for ds in HYBRID_STAGES:
            names.append(f"R50x1+ViT-{size}/{ds}")
    if family is None:
        return names
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; valid: {_choices(FAMILIES)}")
    return [n for n in names if parse(n).family == family]


@lru_cache(maxsize=4096)
def model_columns(name: str) -> tuple[str, str, int | None]:
    """``(family, size, patch)`` of a model name, as result tables and W&B summaries show
    it: size "B", "L" ... for ViTs and hybrids, "R50x1" ... for ResNets; patch the ViT's
    patch size, a hybrid's total downsampling (the number after its slash), None for
    ResNets. ``ValueError`` for an unknown name."""
    spec = parse(name)
    if isinstance(spec, ResNetSpec):
        return spec.family, f"R{spec.depth}x{_fmt_width(spec.width)}", None
    if isinstance(spec, HybridSpec):
        return spec.family, spec.vit.size, spec.downsample
    return spec.family, spec.size, spec.patch


# --------------------------------------------------------------------------- geometry

# TensorFlow's "SAME" padding, one place for the modules and the compute accounting.
# The official hybrid trunk (google-research/vision_transformer, ``models_vit.py`` and
# ``models_resnet.py``) is written in flax, whose convolutions and pools default to
# ``padding="SAME"``: the output has ``ceil(size / stride)`` positions and the padding
# this needs is split with the odd pixel at the *end*. For a stride-2 layer on an even
# input that is (k - 2) // 2 before and one more after, e.g. (2, 3) for the 7x7 root
# convolution and (0, 1) for a 3x3: not PyTorch's symmetric ``padding=k // 2``.


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """``(before, after)`` padding of one axis of ``size`` for TF/flax "SAME"."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2
