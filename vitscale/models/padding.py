"""TensorFlow's "SAME" padding, one place for the modules and the compute accounting.

The official hybrid trunk (google-research/vision_transformer, ``models_vit.py`` and
``models_resnet.py``) is written in flax, whose convolutions and pools default to
``padding="SAME"``: the output has ``ceil(size / stride)`` positions and the padding
this needs is split with the odd pixel at the *end*. For a stride-2 layer on an even
input that is (k - 2) // 2 before and one more after, e.g. (2, 3) for the 7x7 root
convolution and (0, 1) for a 3x3: not PyTorch's symmetric ``padding=k // 2``.
Imports no torch (``vitscale.flops`` uses it).
"""

from __future__ import annotations

__all__ = ["same_padding"]


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """``(before, after)`` padding of one axis of ``size`` for TF/flax "SAME"."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2
