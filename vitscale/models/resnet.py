"""ResNets with GroupNorm and weight standardisation: BiT's ResNet-v2 and the hybrid trunk.

BiT (Kolesnikov et al., ECCV 2020; the paper's ResNet baselines, Sec. 4.1): pre-activation
bottlenecks (He et al. 2016, "Identity Mappings"), every BatchNorm replaced by
GroupNorm(32) and every convolution weight-standardised, so that training does not
depend on the per-device batch. Global average pooling, then the head.

The hybrid's trunk (paper Sec. 3.1) is the official code's post-activation ResNet with the
same GroupNorm + weight standardisation; its output feature map is the "image" the ViT
cuts into 1x1 patches.

The two official codes differ in small numerical details, and each model here follows its
own source exactly, so that the published checkpoints compute what they computed:

=====================  ==============================  ====================================
detail                 BiT (google-research/            hybrid trunk (google-research/
                       big_transfer, all three of       vision_transformer, models_vit.py
                       bit_jax, bit_pytorch, bit_tf2)   and models_resnet.py)
=====================  ==============================  ====================================
weight std.            (w - mean) / sqrt(var + 1e-10)   (w - mean) / (std + 1e-5)
GroupNorm epsilon      1e-5                             1e-6 (flax.linen default)
7x7/2 stem conv        pad 3 on every side              "SAME": (2, 3) on an even input
3x3/2 max-pool         zero pad 1, then no padding      "SAME": (0, 1), after GN + ReLU
3x3/2 unit conv        pad 1 on every side              "SAME": (0, 1) on an even input
=====================  ==============================  ====================================

timm's ports depart from both in the epsilons (weight std. sqrt(var + 1e-8) for both,
GroupNorm 1e-5 in the hybrid); big_vision's ``bit_paper.py`` pads the BiT stem's
max-pool with -inf where big_transfer pads the (signed) conv output with zeros.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn
from torchvision.ops import StochasticDepth

from ..families.base import GN_GROUPS, Build, drop_rates, same_padding
from ..families.resnet import ResNetSpec
from .heads import Head

BIT_WS_EPS = 1e-10  # big_transfer: inside the square root, with the variance
BIT_GN_EPS = 1e-5
HYBRID_WS_EPS = 1e-5  # vision_transformer models_resnet.weight_standardize: added to the std
HYBRID_GN_EPS = 1e-6  # flax.linen.GroupNorm's default


class StdConv2d(nn.Conv2d):
    """Convolution with a weight standardised per output channel (Qiao et al. 2019), as BiT:
    ``(w - mean) / sqrt(var + eps)``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        padding: int = 0,
        eps: float = BIT_WS_EPS,
    ) -> None:
        super().__init__(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=False
        )
        self.eps = eps

    def standardized_weight(self) -> torch.Tensor:
        # (w - mean) / sqrt(var + eps) per output channel, as one fused op: batch norm over
        # the kernel seen as a batch of one with out_channels channels (2-3x faster than
        # var_mean and arithmetic, forward and backward). The kernel is flattened in the
        # order it lies in memory, NCHW or channels-last (``train.channels_last``), so that
        # the flattening and its inverse are views: a copy there makes a compiled backward
        # view a channels-last gradient as NCHW, which torch refuses.
        order = "h w i" if _channels_last(self.weight) else "i h w"
        flat = rearrange(self.weight, f"o i h w -> 1 o ({order})")
        weight = F.batch_norm(flat, None, None, training=True, momentum=0.0, eps=self.eps)
        _, i, h, w = self.weight.shape
        return rearrange(weight, f"1 o ({order}) -> o i h w", i=i, h=h, w=w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.standardized_weight(), None, self.stride, self.padding)


class SameStdConv2d(StdConv2d):
    """The hybrid trunk's convolution (vision_transformer ``models_resnet.StdConv``):
    ``(w - mean) / (std + eps)`` and flax's "SAME" padding, worked out from the input size
    (:func:`~vitscale.families.base.same_padding`)."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, eps=HYBRID_WS_EPS)

    def standardized_weight(self) -> torch.Tensor:
        var, mean = torch.var_mean(self.weight, dim=(1, 2, 3), keepdim=True, correction=0)
        return (self.weight - mean) / (var.sqrt() + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(
            _pad_same(x, self.kernel_size[0], self.stride[0]),
            self.standardized_weight(),
            None,
            self.stride,
        )


def _channels_last(weight: torch.Tensor) -> bool:
    return not weight.is_contiguous() and weight.is_contiguous(memory_format=torch.channels_last)


def _pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    top, bottom = same_padding(x.shape[-2], kernel, stride)
    left, right = same_padding(x.shape[-1], kernel, stride)
    if not (top or bottom or left or right):
        return x
    return F.pad(x, (left, right, top, bottom), value=value)


def _gn(channels: int, eps: float) -> nn.GroupNorm:
    return nn.GroupNorm(GN_GROUPS, channels, eps=eps)


class PreActBottleneck(nn.Module):
    """BiT unit: GN-ReLU-conv1x1, GN-ReLU-conv3x3 (stride), GN-ReLU-conv1x1; projection
    shortcut from the pre-activation when the shape changes. In training the residual
    branch is skipped for an example with probability ``drop_rate`` (stochastic depth)."""

    def __init__(self, *, cin: int, mid: int, cout: int, stride: int, drop_rate: float) -> None:
        super().__init__()
        self.norm1, self.conv1 = _gn(cin, BIT_GN_EPS), StdConv2d(cin, mid, 1)
        self.norm2 = _gn(mid, BIT_GN_EPS)
        self.conv2 = StdConv2d(mid, mid, 3, stride=stride, padding=1)
        self.norm3, self.conv3 = _gn(mid, BIT_GN_EPS), StdConv2d(mid, cout, 1)
        self.downsample = (
            StdConv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None
        )
        self.skip = StochasticDepth(drop_rate, mode="row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        shortcut = x if self.downsample is None else self.downsample(pre)
        y = self.conv1(pre)
        y = self.conv2(F.relu(self.norm2(y)))
        y = self.conv3(F.relu(self.norm3(y)))
        return self.skip(y) + shortcut


class Bottleneck(nn.Module):
    """Post-activation unit of the official hybrid trunk: conv-GN-ReLU x2, conv-GN, add,
    ReLU. The last GN's scale starts at zero so every unit starts as the identity."""

    def __init__(self, *, cin: int, mid: int, cout: int, stride: int, drop_rate: float) -> None:
        super().__init__()
        self.conv1, self.norm1 = SameStdConv2d(cin, mid, 1), _gn(mid, HYBRID_GN_EPS)
        self.conv2 = SameStdConv2d(mid, mid, 3, stride=stride)
        self.norm2 = _gn(mid, HYBRID_GN_EPS)
        self.conv3, self.norm3 = SameStdConv2d(mid, cout, 1), _gn(cout, HYBRID_GN_EPS)
        nn.init.zeros_(self.norm3.weight)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(
                SameStdConv2d(cin, cout, 1, stride=stride), _gn(cout, HYBRID_GN_EPS)
            )
        self.skip = StochasticDepth(drop_rate, mode="row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.proj is None else self.proj(x)
        y = F.relu(self.norm1(self.conv1(x)))
        y = F.relu(self.norm2(self.conv2(y)))
        return F.relu(self.skip(self.norm3(self.conv3(y))) + shortcut)


def _stages(spec: ResNetSpec, stochastic_depth: float = 0.0) -> nn.Sequential:
    unit = PreActBottleneck if spec.preact else Bottleneck
    stages, cin = [], spec.stem_channels
    rates = iter(drop_rates(stochastic_depth, sum(spec.layers)))
    for units, (mid, cout, stride) in zip(spec.layers, spec.stage_channels(), strict=True):
        blocks = []
        for i in range(units):
            stride_i = stride if i == 0 else 1
            blocks.append(unit(cin=cin, mid=mid, cout=cout, stride=stride_i, drop_rate=next(rates)))
            cin = cout
        stages.append(nn.Sequential(*blocks))
    return nn.Sequential(*stages)


def _init_convs(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


class ResNetTrunk(nn.Module):
    """Post-activation stem + stages: the hybrid's patch embedding (no pooling, no head).

    Root block as ``models_vit.py``: 7x7/2 conv, GN, ReLU, 3x3/2 max-pool, all "SAME"."""

    def __init__(self, spec: ResNetSpec) -> None:
        super().__init__()
        self.conv = SameStdConv2d(3, spec.stem_channels, 7, stride=2)
        self.norm = _gn(spec.stem_channels, HYBRID_GN_EPS)
        self.stages = _stages(spec)
        _init_convs(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv(x)))
        x = F.max_pool2d(_pad_same(x, 3, 2, value=float("-inf")), 3, stride=2)
        return self.stages(x)


class ResNetV2(nn.Module):
    """BiT ResNet-v2: stem (7x7/2 conv, zero pad, 3x3/2 max-pool), pre-activation stages,
    final GN-ReLU, global average pooling, head. Its pre-logits are the pooled features."""

    def __init__(
        self,
        *,
        spec: ResNetSpec,
        num_classes: int,
        head: str = "pretrain",
        stochastic_depth: float = 0.0,
    ) -> None:
        super().__init__()
        # big_transfer pads the stem conv's output with zeros, then pools without padding
        # (its bit_pytorch notes that MaxPool2d(padding=1), i.e. -inf, "is subtly not the
        # same": the conv output is signed, there is no ReLU before the pool).
        self.stem = nn.Sequential(
            StdConv2d(3, spec.stem_channels, 7, stride=2, padding=3),
            nn.ConstantPad2d(1, 0.0),
            nn.MaxPool2d(3, stride=2),
        )
        self.stages = _stages(spec, stochastic_depth)
        self.norm = _gn(spec.out_channels, BIT_GN_EPS)
        self.head = Head(
            width=spec.out_channels, num_classes=num_classes, kind=head, pre_logits_layer=False
        )
        _init_convs(self)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images -> final feature map ``(B, C, h, w)`` after the closing GN-ReLU."""
        return F.relu(self.norm(self.stages(self.stem(x))))

    def pre_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head.pre_logits(self.forward_features(x).mean(dim=(2, 3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pre_logits(x))


def build(spec: ResNetSpec, at: Build) -> ResNetV2:
    """The registry's builder (:mod:`vitscale.families.resnet`): BiT has one pool and no
    pre-logits layer, and the paper trains it without dropout."""
    return ResNetV2(
        spec=spec, num_classes=at.num_classes, head=at.head, stochastic_depth=at.stochastic_depth
    )
