"""Where a run executes: the Accelerator, its precision, and the hardware's peak FLOP/s.

Accelerate does all device and distribution work. Facts found on CPU: under ``torchrun
--nproc_per_node 2`` Accelerate joins the two processes only when it is built with
``cpu=True`` (else each silently trains alone), so ``cpu=True`` is passed whenever no GPU
is visible; ``end_training()`` destroys the process group, so it is called last.

Precision ``auto`` is bf16 where the hardware runs it fast (CUDA GPUs with bf16 support;
CPUs with AVX512-BF16 or AMX units, measured 1.2-1.8x faster than fp32 for the demo
models), fp32 elsewhere.
"""

from __future__ import annotations

import functools
import os

import torch

# Dense bf16 peak (no sparsity) from the vendors' data sheets, FLOP/s; for MFU.
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


@functools.cache
def cpu_has_fast_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: str) -> str:
    """``auto`` -> ``bf16`` or ``fp32`` for this machine; explicit values pass through."""
    if precision != "auto":
        return precision
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


def make_accelerator(*, precision: str, seed_everything: int | None = None):
    """A fresh Accelerator for one run (``train`` may be called repeatedly in a process).

    Accelerate keeps its precision in a process-wide singleton and refuses a second run
    with another precision; the per-run part is reset here, the process group (the
    ``PartialState``) is kept.
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import set_seed

    use_cpu = not torch.cuda.is_available() or os.environ.get("ACCELERATE_USE_CPU") == "1"
    mixed = resolve_precision(precision)
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=use_cpu, mixed_precision="bf16" if mixed == "bf16" else "no")
    if seed_everything is not None:
        set_seed(seed_everything)
    return accelerator, mixed


def shutdown() -> None:
    """Destroy the process group, if any: last thing a launched process does (what
    ``Accelerator.end_training`` does; never inside ``train``, whose caller may go on
    using the group, e.g. to agree on the next cell)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak of the GPU ``device`` is on, if known (for model-FLOPs utilisation)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
