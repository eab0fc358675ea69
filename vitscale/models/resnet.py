"""ResNets with GroupNorm and weight standardisation: BiT's ResNet-v2 and the hybrid trunk.

BiT (Kolesnikov et al., ECCV 2020; the paper's ResNet baselines, Sec. 4.1): pre-activation
bottlenecks (He et al. 2016, "Identity Mappings"), every BatchNorm replaced by
GroupNorm(32) and every convolution weight-standardised, so that training does not
depend on the per-device batch. Global average pooling, then the head.

The hybrid's trunk (paper Sec. 3.1) is the official code's post-activation ResNet with the
same GroupNorm + weight standardisation; its output feature map is the "image" the ViT
cuts into 1x1 patches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .heads import Head
from .names import ResNetSpec

__all__ = ["StdConv2d", "ResNetV2", "ResNetTrunk"]

GN_GROUPS = 32


class StdConv2d(nn.Conv2d):
    """Convolution with a weight standardised per output channel (Qiao et al. 2019)."""

    def __init__(self, *args, eps: float = 1e-8, **kwargs) -> None:
        super().__init__(*args, bias=False, **kwargs)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (w - mean) / sqrt(var + eps) per output channel, as one fused op: batch norm over
        # the kernel seen as a batch of one with out_channels channels (2-3x faster than
        # var_mean and arithmetic, forward and backward).
        flat = rearrange(self.weight, "o i h w -> 1 o (i h w)")
        weight = F.batch_norm(flat, None, None, training=True, momentum=0.0, eps=self.eps)
        weight = weight.reshape_as(self.weight)
        return F.conv2d(x, weight, None, self.stride, self.padding, self.dilation, self.groups)


def _gn(channels: int, eps: float) -> nn.GroupNorm:
    return nn.GroupNorm(GN_GROUPS, channels, eps=eps)


class PreActBottleneck(nn.Module):
    """BiT unit: GN-ReLU-conv1x1, GN-ReLU-conv3x3 (stride), GN-ReLU-conv1x1; projection
    shortcut from the pre-activation when the shape changes."""

    def __init__(self, *, cin: int, mid: int, cout: int, stride: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = _gn(cin, 1e-5), StdConv2d(cin, mid, 1)
        self.norm2, self.conv2 = _gn(mid, 1e-5), StdConv2d(mid, mid, 3, stride=stride, padding=1)
        self.norm3, self.conv3 = _gn(mid, 1e-5), StdConv2d(mid, cout, 1)
        self.downsample = (
            StdConv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        shortcut = x if self.downsample is None else self.downsample(pre)
        y = self.conv1(pre)
        y = self.conv2(F.relu(self.norm2(y)))
        y = self.conv3(F.relu(self.norm3(y)))
        return y + shortcut


class Bottleneck(nn.Module):
    """Post-activation unit of the official hybrid trunk: conv-GN-ReLU x2, conv-GN, add,
    ReLU. The last GN's scale starts at zero so every unit starts as the identity."""

    def __init__(self, *, cin: int, mid: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.norm1 = StdConv2d(cin, mid, 1), _gn(mid, 1e-6)
        self.conv2, self.norm2 = StdConv2d(mid, mid, 3, stride=stride, padding=1), _gn(mid, 1e-6)
        self.conv3, self.norm3 = StdConv2d(mid, cout, 1), _gn(cout, 1e-6)
        nn.init.zeros_(self.norm3.weight)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(StdConv2d(cin, cout, 1, stride=stride), _gn(cout, 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.proj is None else self.proj(x)
        y = F.relu(self.norm1(self.conv1(x)))
        y = F.relu(self.norm2(self.conv2(y)))
        return F.relu(self.norm3(self.conv3(y)) + shortcut)


def _stages(spec: ResNetSpec) -> nn.Sequential:
    unit = PreActBottleneck if spec.preact else Bottleneck
    stages, cin = [], spec.stem_channels
    for units, (mid, cout, stride) in zip(spec.layers, spec.stage_channels(), strict=True):
        blocks = []
        for i in range(units):
            blocks.append(unit(cin=cin, mid=mid, cout=cout, stride=stride if i == 0 else 1))
            cin = cout
        stages.append(nn.Sequential(*blocks))
    return nn.Sequential(*stages)


def _init_convs(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


class ResNetTrunk(nn.Module):
    """Post-activation stem + stages: the hybrid's patch embedding (no pooling, no head)."""

    def __init__(self, spec: ResNetSpec) -> None:
        super().__init__()
        self.conv = StdConv2d(3, spec.stem_channels, 7, stride=2, padding=3)
        self.norm = _gn(spec.stem_channels, 1e-6)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.stages = _stages(spec)
        _init_convs(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.pool(F.relu(self.norm(self.conv(x)))))


class ResNetV2(nn.Module):
    """BiT ResNet-v2: stem (7x7/2 conv, 3x3/2 max-pool), pre-activation stages, final
    GN-ReLU, global average pooling, head. Its pre-logits are the pooled features."""

    def __init__(self, *, spec: ResNetSpec, num_classes: int, head: str = "pretrain") -> None:
        super().__init__()
        self.image_channels = 3
        self.stem = nn.Sequential(
            StdConv2d(3, spec.stem_channels, 7, stride=2, padding=3),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.stages = _stages(spec)
        self.norm = _gn(spec.out_channels, 1e-5)
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
