"""Measured training speed per GPU type: what ``vitscale grid --dry-run`` budgets from
where a measurement exists, instead of one assumed FLOP/s for every model.

Why: a profile's ``sustained_tflops`` is one number per cluster, but measured MFU differs
by family (on an H100: 25-33% for ViT-B/16 and ViT-L/16, 5% for BiT, whose GroupNorm and
weight standardisation bound the step: benchmarks/RESULTS.md, "GPU smoke"), so one number
budgets BiT cells several times too low. ``benchmarks/gpu_smoke.sh --calibrate`` appends
what it measures to ``calibration.csv`` beside the profiles; a profile whose ``gpu_type``
matches a row's GPU reads it. For a cell, in order:

1. **measured**: a row of the same model, resolution, precision and compile setting:
   its images/s per GPU;
2. **family**: rows of the same family on that GPU: the median of their achieved
   TFLOP/s (paper-convention FLOPs per image x images/s), divided by the cell's FLOPs
   per image;
3. **est.**: nothing measured on that GPU, but on another: 1 or 2 there, scaled by the
   two GPUs' dense bf16 peaks (:data:`vitscale.flops.PEAK_BF16_FLOPS`), i.e. the same
   share of peak on both. Why: the profile's one assumed FLOP/s made an A100 grid look
   cheaper than the same grid budgeted from H100 measurements;
4. **assumed**: the profile's ``sustained_tflops`` (no measurement of the family
   anywhere, or a GPU whose peak is not in the table).

Columns of ``calibration.csv``: ``gpu`` (``torch.cuda.get_device_name``), ``model``,
``image_size``, ``precision``, ``compile``, ``batch_per_gpu``, ``images_per_s`` (per GPU),
``date``, ``source`` (the command, or where the number was published).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..catalog import parse
from ..flops import count, peak_flops_of

CALIBRATION_FILE = "calibration.csv"
COLUMNS = (
    "gpu",
    "model",
    "image_size",
    "precision",
    "compile",
    "batch_per_gpu",
    "images_per_s",
    "date",
    "source",
)
MEASURED, FAMILY, ESTIMATED, ASSUMED = "measured", "family", "est.", "assumed"
BASES = (MEASURED, FAMILY, ESTIMATED, ASSUMED)


@dataclass(frozen=True)
class Measured:
    """One measured training speed (a row of ``calibration.csv``)."""

    gpu: str
    model: str
    image_size: int
    precision: str
    compile: bool
    batch_per_gpu: int
    images_per_s: float
    date: str
    source: str

    @property
    def family(self) -> str:
        return parse(self.model).family

    @property
    def tflops(self) -> float:
        """Achieved pre-training TFLOP/s per GPU (paper convention: 3x forward, as Fig. 5)."""
        c = count(self.model, self.image_size, head="pretrain")
        return c.train_flops_per_example * self.images_per_s / 1e12


def load_calibration(path: str | Path) -> tuple[Measured, ...]:
    """The rows of a calibration file; none if there is no file. A malformed row is an
    error naming the file, the line and what is wrong."""
    path = Path(path)
    if not path.is_file():
        return ()
    rows = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{path}: missing columns {', '.join(missing)}; expected {', '.join(COLUMNS)}"
            )
        for line, row in enumerate(reader, start=2):
            try:
                measured = Measured(
                    gpu=row["gpu"],
                    model=row["model"],
                    image_size=int(row["image_size"]),
                    precision=row["precision"],
                    compile=row["compile"].strip().lower() in ("1", "true", "yes"),
                    batch_per_gpu=int(row["batch_per_gpu"]),
                    images_per_s=float(row["images_per_s"]),
                    date=row["date"],
                    source=row["source"],
                )
                measured.family  # noqa: B018 - a model name the catalog knows
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}, line {line}: {e}") from None
            if measured.images_per_s <= 0:
                raise ValueError(f"{path}, line {line}: images_per_s must be > 0")
            rows.append(measured)
    return tuple(rows)


def append_rows(path: str | Path, rows: list[Measured]) -> None:
    """Add ``rows`` to a calibration file (created with its header if absent)."""
    path = Path(path)
    new = not path.is_file()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        for r in rows:
            writer.writerow({c: getattr(r, c) for c in COLUMNS})


def matches(gpu_type: str | None, gpu: str) -> bool:
    """A profile's ``gpu_type`` names a row's GPU: case-insensitive, within the name
    (``H100 80GB HBM3`` names ``NVIDIA H100 80GB HBM3``)."""
    return bool(gpu_type) and gpu_type.lower() in gpu.lower()


def images_per_s(
    rows: tuple[Measured, ...],
    gpu_type: str | None,
    *,
    model: str,
    image_size: int,
    precision: str,
    compile: bool,
) -> tuple[float | None, str, str | None]:
    """``(images/s per GPU, basis, the GPU measured)`` for training ``model`` on
    ``gpu_type``: measured, from its family's measured TFLOP/s, estimated from another
    GPU's, or ``(None, "assumed", None)`` (the caller's assumed FLOP/s)."""
    precision = "bf16" if precision == "auto" else precision  # what "auto" is on a GPU
    kw = dict(model=model, image_size=image_size, compile=compile)
    same = [r for r in rows if r.precision == precision]
    here = [r for r in same if matches(gpu_type, r.gpu)]
    rate, basis = _on(here, **kw)
    if rate is not None:
        return rate, basis, here[0].gpu
    peak = peak_flops_of(gpu_type) if gpu_type else None
    found = []  # (model measured first, file order, rate scaled, gpu)
    for i, gpu in enumerate(dict.fromkeys(r.gpu for r in same if not matches(gpu_type, r.gpu))):
        rate, basis = _on([r for r in same if r.gpu == gpu], **kw)
        if rate is not None and peak and (theirs := peak_flops_of(gpu)):
            found.append((basis != MEASURED, i, rate * peak / theirs, gpu))
    if found:
        _, _, rate, gpu = min(found)
        return rate, ESTIMATED, gpu
    return None, ASSUMED, None


def _on(
    rows: list[Measured], *, model: str, image_size: int, compile: bool
) -> tuple[float | None, str]:
    """Images/s from rows of one GPU: the model's own (measured), else its family's
    median TFLOP/s (family), else ``(None, "assumed")``."""
    same = [r for r in rows if (r.model, r.image_size, r.compile) == (model, image_size, compile)]
    if same:
        return statistics.median(r.images_per_s for r in same), MEASURED
    family = parse(model).family
    kin = [r for r in rows if r.family == family and r.compile == compile]
    if kin:
        tflops = statistics.median(r.tflops for r in kin)
        per_image = count(model, image_size, head="pretrain").train_flops_per_example
        return tflops * 1e12 / per_image, FAMILY
    return None, ASSUMED
