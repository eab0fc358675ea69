"""Analytic parameters, multiply-adds and pre-training compute per (model name, resolution),
and the GPUs' peak FLOP/s they are run at.

The convention (paper Table 6 and Fig. 5; docs/protocol.md):

    exaFLOPs = examples seen x 3 (forward + backward) x 2 (FLOPs per multiply-add)
               x forward multiply-adds per image, / 1e18

Forward multiply-adds count every dense and convolution layer, the patch embedding and
attention's two products (QK^T and AV); norms, softmax, activations, pooling and
additions are not counted. Two counts are kept:

- ``macs``: dense, every kernel tap of every output position, padding included. This is
  what ``torch.utils.flop_counter.FlopCounterMode`` measures on the built model
  (``flops = 2 * macs``).
- ``paper_macs``: the paper's count, in which a convolution tap that lands on zero padding
  is not a multiply-add (equal to ``macs`` for ViTs, which pad no convolution).

Nothing here builds a model: the counts follow :mod:`vitscale.catalog` layer by layer,
mirroring the modules in :mod:`vitscale.models`, and tests hold them against ``numel()``
and ``FlopCounterMode`` on the built models. Imports no torch.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache

from .catalog import HybridSpec, ResNetSpec, ViTSpec, check_resolution, parse
from .paper import JFT_IMAGES, table6

TRAIN_MULTIPLIER = 3  # forward + backward (backward ~ 2x forward), paper convention
FLOPS_PER_MAC = 2

# Dense bf16 tensor-core peak (no sparsity) per GPU from the vendors' data sheets, FLOP/s,
# for MFU and for budgets on a GPU no speed was measured on (vitscale.grid.calibration). First match of the CUDA device name wins, so variants come before their family.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    (r"H200 NVL", 835e12),  # H200 NVL: 1,671 TFLOP/s with sparsity
    (r"H200", 989e12),  # H200 SXM
    (r"H100 NVL", 835e12),  # H100 NVL: 1,671 TFLOP/s with sparsity
    (r"H100.*PCIe", 756e12),  # H100 PCIe: 1,513 TFLOP/s with sparsity
    (r"H100", 989e12),  # H100 SXM ("NVIDIA H100 80GB HBM3")
    (r"A100", 312e12),  # A100 40/80 GB, SXM and PCIe alike
    (r"L40S", 362e12),
    (r"A10G", 70e12),  # AWS's A10G (its own data sheet), not the A10's 125
    (r"A10\b", 125e12),
)


def peak_flops_of(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of one GPU from its CUDA name (or a part of it, as a
    profile's ``gpu_type``), or None if not in the table."""
    return next(
        (v for pattern, v in PEAK_BF16_FLOPS if re.search(pattern, device_name, re.IGNORECASE)),
        None,
    )


@dataclass(frozen=True)
class Count:
    """Parameters and forward multiply-adds of one model at one resolution."""

    name: str
    resolution: int
    num_classes: int
    head: str
    params: int
    macs: int
    paper_macs: int

    @property
    def flops(self) -> int:
        """Dense forward FLOPs (2 per multiply-add)."""
        return FLOPS_PER_MAC * self.macs

    @property
    def train_flops_per_example(self) -> int:
        """Paper-convention training FLOPs per image: 3 x 2 x paper multiply-adds."""
        return TRAIN_MULTIPLIER * FLOPS_PER_MAC * self.paper_macs

    def as_dict(self) -> dict:
        derived = {"flops": self.flops, "train_flops_per_example": self.train_flops_per_example}
        return asdict(self) | derived


def _valid_taps(size: int, k: int, stride: int, pad: int, out: int) -> int:
    """Kernel taps, summed over output positions along one axis, that land on the input."""
    return sum(min(k, size + pad - o * stride) - max(0, pad - o * stride) for o in range(out))


class _Tally:
    """Running totals while walking an architecture layer by layer."""

    def __init__(self) -> None:
        self.params = self.macs = self.paper_macs = 0

    def conv(
        self,
        cin: int,
        cout: int,
        k: int,
        *,
        size: int,
        stride: int = 1,
        pad: int = 0,
        bias: bool = False,
    ) -> int:
        out = (size + 2 * pad - k) // stride + 1
        self.params += k * k * cin * cout + (cout if bias else 0)
        self.macs += out * out * k * k * cin * cout
        self.paper_macs += _valid_taps(size, k, stride, pad, out) ** 2 * cin * cout
        return out

    def dense(self, fin: int, fout: int, *, tokens: int = 1) -> None:
        self.params += fin * fout + fout
        self.add_macs(tokens * fin * fout)

    def add_macs(self, n: int) -> None:
        self.macs += n
        self.paper_macs += n

    def norm(self, channels: int) -> None:  # LayerNorm / GroupNorm: scale and bias
        self.params += 2 * channels


def _head(t: _Tally, width: int, num_classes: int, head: str, *, pre_logits_layer: bool) -> None:
    if head == "pretrain" and pre_logits_layer:
        t.dense(width, width)
    t.dense(width, num_classes)


def _max_pool(size: int) -> int:  # 3x3, stride 2, padding 1
    return (size + 2 - 3) // 2 + 1


def _stages(t: _Tally, spec: ResNetSpec, size: int) -> int:
    cin = spec.stem_channels
    for units, (mid, cout, stride) in zip(spec.layers, spec.stage_channels(), strict=True):
        for i in range(units):
            s = stride if i == 0 else 1
            project = s != 1 or cin != cout
            if spec.preact:  # BiT: norms on the unit's input channels
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


def _resnet(t: _Tally, spec: ResNetSpec, size: int, num_classes: int, head: str) -> None:
    size = _max_pool(t.conv(3, spec.stem_channels, 7, size=size, stride=2, pad=3))
    _stages(t, spec, size)
    t.norm(spec.out_channels)
    _head(t, spec.out_channels, num_classes, head, pre_logits_layer=False)


def _vit(
    t: _Tally,
    spec: ViTSpec | HybridSpec,
    size: int,
    num_classes: int,
    head: str,
    pool: str,
    pre_logits: bool,
) -> None:
    channels = 3
    if isinstance(spec, HybridSpec):
        trunk = spec.resnet
        size = t.conv(3, trunk.stem_channels, 7, size=size, stride=2, pad=3)
        t.norm(trunk.stem_channels)
        size = _stages(t, trunk, _max_pool(size))
        channels, spec = trunk.out_channels, spec.vit
    d = spec.width
    grid = t.conv(channels, d, spec.patch, size=size, stride=spec.patch, bias=True)
    prefix = 1 if pool == "token" else 0
    tokens = grid * grid + prefix
    t.params += prefix * d + tokens * d  # class token, position embedding
    for _ in range(spec.depth):
        t.norm(d)
        t.dense(d, 3 * d, tokens=tokens)  # fused qkv
        t.add_macs(2 * tokens * tokens * d)  # QK^T and AV over all heads
        t.dense(d, d, tokens=tokens)  # output projection
        t.norm(d)
        t.dense(d, spec.mlp_dim, tokens=tokens)
        t.dense(spec.mlp_dim, d, tokens=tokens)
    t.norm(d)
    _head(t, d, num_classes, head, pre_logits_layer=pre_logits)


@lru_cache(maxsize=1024)
def count(
    name: str,
    resolution: int = 224,
    *,
    num_classes: int = 1000,
    head: str = "finetune",
    pool: str | None = None,
    pre_logits: bool | None = None,
) -> Count:
    """Params and forward multiply-adds of ``create_model(name, ...)`` with these arguments.

    The defaults (224 px, a 1000-way fine-tuning head) are the setting of paper Table 6.
    """
    spec = parse(name)
    check_resolution(spec, resolution)
    if head not in ("pretrain", "finetune"):
        raise ValueError(f"unknown head {head!r}; valid: 'pretrain', 'finetune'")
    t = _Tally()
    if isinstance(spec, ResNetSpec):
        _resnet(t, spec, resolution, num_classes, head)
    else:
        _vit(t, spec, resolution, num_classes, head, pool or "token", pre_logits is not False)
    return Count(
        name=spec.name,
        resolution=resolution,
        num_classes=num_classes,
        head=head,
        params=t.params,
        macs=t.macs,
        paper_macs=t.paper_macs,
    )


def pretrain_exaflops(
    name: str, examples_seen: int | float, resolution: int = 224, **count_kwargs
) -> float:
    """Total pre-training compute after ``examples_seen`` images, in exaFLOPs (1e18)."""
    return count(name, resolution, **count_kwargs).train_flops_per_example * examples_seen / 1e18


@dataclass(frozen=True)
class Table6Row:
    model: str
    family: str
    epochs: int
    paper: float
    ours: float
    flag: str  # empty when the row agrees within its family's tolerance

    @property
    def rel_error(self) -> float:
        return self.ours / self.paper - 1.0


# Agreement the convention reaches (docs/protocol.md): ViT rows within 1%; the ResNet rows
# within about 1-2% with padding-free counting, hybrids likewise.
TOLERANCE = {"ViT": 0.01, "ResNet": 0.02, "Hybrid": 0.02}


def table6_check() -> list[Table6Row]:
    """Every row of paper Table 6 beside our count (303M images x epochs).

    A row is flagged, not fitted, when it misses our count by more than its family's
    tolerance; the flag says whether the paper's own rows for the same model disagree.
    """
    rows = table6()
    out = []
    for row in rows:
        model, epochs = row["model"], int(row["pretrain_epochs"])
        paper = float(row["pretrain_exaflops"])
        ours = pretrain_exaflops(model, epochs * JFT_IMAGES)
        tol = TOLERANCE[row["family"]]
        flag = ""
        if abs(ours / paper - 1) > tol:
            flag = f"off by {100 * (ours / paper - 1):+.1f}% (tolerance {100 * tol:.0f}%)"
            for other in rows:
                o_epochs = int(other["pretrain_epochs"])
                if other["model"] == model and o_epochs != epochs:
                    implied = float(other["pretrain_exaflops"]) * epochs / o_epochs
                    if abs(implied / paper - 1) > tol:
                        flag += (
                            f"; paper inconsistent: its {o_epochs}-epoch row implies {implied:.0f}"
                        )
        out.append(Table6Row(model, row["family"], epochs, paper, ours, flag))
    return out
