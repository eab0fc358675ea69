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

Nothing here builds a model: each family's spec walks its layers
(:mod:`vitscale.families`), mirroring the modules in :mod:`vitscale.models`, and tests hold them against ``numel()``
and ``FlopCounterMode`` on the built models. Imports no torch.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache

from .catalog import check_resolution, parse
from .families.base import Tally
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


# fp32 matmuls and convolutions run on TF32 tensor cores (vitscale.train.runtime enables
# them), whose dense peak is half the bf16 one on every GPU above (the same data sheets).
PRECISION_SHARE = {"bf16": 1.0, "fp32": 0.5}


def peak_flops_of(device_name: str, precision: str = "bf16") -> float | None:
    """Dense peak FLOP/s of one GPU from its CUDA name (or a part of it, as a profile's
    ``gpu_type``) at ``precision`` (``fp32`` on TF32 tensor cores), or None if not in
    the table."""
    bf16 = next(
        (v for pattern, v in PEAK_BF16_FLOPS if re.search(pattern, device_name, re.IGNORECASE)),
        None,
    )
    return None if bf16 is None else bf16 * PRECISION_SHARE[precision]


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
    t = Tally()
    spec.count(
        t, spec.at(resolution, num_classes=num_classes, head=head, pool=pool, pre_logits=pre_logits)
    )
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


def table6_check() -> list[Table6Row]:
    """Every row of paper Table 6 beside our count (303M images x epochs).

    A row is flagged, not fitted, when it misses our count by more than its family's
    tolerance (docs/protocol.md: ViT rows within 1%, ResNets and hybrids about 1-2% with
    padding-free counting); the flag says whether the paper's own rows for the same model disagree.
    """
    rows = table6()
    out = []
    for row in rows:
        model, epochs = row["model"], int(row["pretrain_epochs"])
        paper = float(row["pretrain_exaflops"])
        ours = pretrain_exaflops(model, epochs * JFT_IMAGES)
        tol = parse(model).tolerance
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
