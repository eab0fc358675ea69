"""Where a run executes: the Accelerator, its precision, and the hardware's peak FLOP/s.

Accelerate does all device and distribution work. Facts found on CPU: under ``torchrun
--nproc_per_node 2`` Accelerate joins the two processes only when it is built with
``cpu=True`` (else each silently trains alone), so ``cpu=True`` is passed whenever no GPU
is visible; :func:`shutdown` destroys the process group, the last thing a launched process
does, and nothing may keep the group alive past it (the import below).

Precision ``auto`` is bf16 where the hardware runs it natively (GPUs of compute capability
8.0 on: A100, H100, L40S, A10; CPUs with AVX512-BF16 or AMX units, measured 1.2-1.8x
faster than fp32 for the demo models), fp32 elsewhere: a V100 or T4 runs bf16 only
emulated, which ``torch.cuda.is_bf16_supported()`` counts unless told not to. What stays fp32 on a GPU (matmuls outside autocast, fp32 runs)
may use TF32 tensor cores.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import gc
import os
import socket
from collections.abc import MutableMapping
from typing import Any

import torch

from ..flops import peak_flops_of
from ..memory import checkpoint_write_s

# Before any process group exists: torch.distributed.nn's functions take
# ``group=group.WORLD`` as a default argument, evaluated when the module is first imported
# (by torch._dynamo, which DDP imports, or by FSDP). Imported after the group is made, it
# holds the group for ever: destroy_process_group then leaves gloo's worker threads running
# into the interpreter's finalisation, where one that releases a finished collective's
# Python tensor aborts the process ("terminate called without an active exception").
if torch.distributed.is_available():
    import torch.distributed.nn  # noqa: F401  (imported for that side effect)

# The process group's timeout never goes below 30 min (gloo's default; NCCL's is 10 min,
# which a ViT-H checkpoint, 10 GB at vitscale.memory's assumed write speed, would exceed).
MIN_TIMEOUT_S = 1800.0


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
        return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


def process_group_timeout(params: int) -> dt.timedelta:
    """Long enough for rank 0 to write a checkpoint while the other ranks wait at a
    barrier: twice the time :func:`vitscale.memory.checkpoint_write_s` assumes, the longest
    collective wait of a run."""
    return dt.timedelta(seconds=max(MIN_TIMEOUT_S, 2 * checkpoint_write_s(params)))


def use_cpu() -> bool:
    return not torch.cuda.is_available() or os.environ.get("ACCELERATE_USE_CPU") == "1"


def make_accelerator(
    *, precision: str, seed_everything: int | None = None, timeout: dt.timedelta | None = None
):
    """A fresh Accelerator for one run (``train`` may be called repeatedly in a process),
    every RNG seeded from ``seed_everything`` and this process's rank: processes that drew
    the same numbers would drop the same units of their different examples (the weights
    are rank 0's anyway: DDP broadcasts them); a resume restores each rank's RNGs.

    Accelerate keeps its precision in a process-wide singleton and refuses a second run
    with another precision; the per-run part is reset here, the process group (the
    ``PartialState``) is kept. ``timeout``: the process group's, when this call creates it
    (:func:`process_group_timeout`).
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import InitProcessGroupKwargs, set_seed

    mixed = resolve_precision(precision)
    pin_gloo_interface()
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    # fp32 matmuls and convolutions on TF32 tensor cores (the legacy flags: the new
    # per-backend API raises when mixed with them, and these touch CUDA only).
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    # Shapes are fixed within a run (one resolution, one micro-batch): cuDNN's autotuning
    # costs the first step of each shape and picks the fastest convolution thereafter.
    torch.backends.cudnn.benchmark = True
    handlers = [InitProcessGroupKwargs(timeout=timeout)] if timeout is not None else []
    accelerator = Accelerator(
        cpu=use_cpu(),
        mixed_precision="bf16" if mixed == "bf16" else "no",
        kwargs_handlers=handlers,
    )
    if seed_everything is not None:  # seed + rank: each process its own dropout masks
        set_seed(seed_everything, device_specific=True)
    return accelerator, mixed


def pin_gloo_interface(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Pin gloo (the CPU process group, and the stop-signal group beside NCCL) to the
    network interface that reaches ``MASTER_ADDR``, unless ``GLOO_SOCKET_IFNAME`` says
    otherwise; returns the interface pinned, or None. Left to itself gloo binds to the
    address the host's name resolves to, which on a node with several interfaces (or a
    shared hostname) may be one the other nodes cannot reach: the ranks then never meet."""
    if environ.get("GLOO_SOCKET_IFNAME") or int(environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    master = environ.get("MASTER_ADDR")
    name = interface_towards(master) if master else None
    if name is not None:
        environ["GLOO_SOCKET_IFNAME"] = name
    return name


def interface_towards(host: str) -> str | None:
    """The name of this machine's interface holding the address it reaches ``host`` from
    (``lo`` for this machine itself by loopback); None when ``host`` does not resolve or
    no route leads there. A UDP socket's connect picks the route and sends nothing."""
    import psutil

    try:
        family, _, _, _, address = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            local = probe.getsockname()[0]
    except OSError:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addresses):
            return name
    return None


def from_rank0(accelerator, value: Any) -> Any:
    """Rank 0's ``value`` on every process (``value`` itself when alone): for a choice the
    processes must make alike but only one should make (which checkpoint to resume from),
    since each making it alone may see something else (a transient read error)."""
    if accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


def from_every_rank(accelerator, value: Any) -> list[Any]:
    """Every process's ``value``, by rank, on every process: what each found alone (an
    error loading its files), so that all of them act on it together."""
    if accelerator.num_processes == 1:
        return [value]
    from accelerate.utils import gather_object

    return gather_object([value])


def shutdown() -> None:
    """Destroy the process group, if any: last thing a launched process does (what
    ``Accelerator.end_training`` does; never inside ``train``, whose caller may go on
    using the group, e.g. to agree on the next cell)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def peak_flops(device: torch.device, precision: str) -> float | None:
    """Dense peak at ``precision`` (as resolved) of the GPU ``device`` is on, if known:
    model-FLOPs utilisation against what that precision can reach."""
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device), precision)


def mfu(images_per_s: float, *, flops_per_image: float, processes: int, peak: float) -> float:
    """Model-FLOPs utilisation of one device: the global rate's share of one device
    (``/ processes``) at training FLOPs per image, over that device's peak."""
    return images_per_s / processes * flops_per_image / peak


@contextlib.contextmanager
def prepared(accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """``accelerator.prepare(model, optimizer)`` for the duration, then released: the
    Accelerator drops its references (it keeps every prepared object otherwise: 25
    fine-tunes would keep 25 models on the GPU), and the memory goes back."""
    model, optimizer = accelerator.prepare(model, optimizer)
    try:
        yield model, optimizer
    finally:
        release(accelerator, model, optimizer)
        del model, optimizer
        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def release(accelerator, *objects) -> None:
    """Forget ``objects`` (prepared models, optimisers, schedulers) in ``accelerator``
    without touching the others (``Accelerator.free_memory`` forgets all of them)."""
    ids = {id(o) for o in objects}
    for attr in ("_models", "_optimizers", "_schedulers", "_dataloaders"):
        held = getattr(accelerator, attr, [])
        held[:] = [o for o in held if id(o) not in ids]
