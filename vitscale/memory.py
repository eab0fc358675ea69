"""Peak accelerator memory of one training step, estimated before anything runs (the grid
places cells with it, :mod:`vitscale.grid.placement`; the trainer picks micro-batches with
it, :mod:`vitscale.train.hardware`). Per process::

    peak = weights + gradients + optimiser state (+ DDP's gradient buckets, >1 process)
           (+ the pre-trained model kept while fine-tuning)
           (+ the batch decoded on the device, ``data.decode``: :func:`decode_bytes`)
           + max(activations + transient, the optimiser step's temporaries)

- weights, gradients fp32 (4 bytes per parameter each); AdamW keeps two fp32 moments
  (8), SGD with momentum one (4); ``DistributedDataParallel`` copies the gradients into
  its buckets (Accelerate's default ``gradient_as_bucket_view=False``: 4 more).
- activations: every tensor autograd saves for the backward pass at the micro-batch,
  counted layer by layer by each family's spec (:mod:`vitscale.families`) as the modules
  in :mod:`vitscale.models` save them, in the dtypes autocast gives them; plus the weight
  copies the forward keeps (autocast's bf16 casts; BiT's standardised kernels) and the
  loss's logits. Under CUDA autocast bf16, matmul and convolution inputs are saved in
  bf16, LayerNorm and GroupNorm run in fp32 (so a BiT unit keeps fp32 norm inputs and
  ReLU outputs *and* a bf16 copy for the next convolution), the ViT residual stream is
  fp32 (added to the fp32 position embedding), and attention (flash or memory-efficient
  SDPA) keeps q, k, v, its output and a log-sum-exp, never the N x N matrix.
- transient: gradients of activations in flight during the backward pass (two of the
  largest saved tensors) and library workspaces: a margin, not a measurement.

Calibration, on the CPU (``device="cpu"`` models CPU autocast, which keeps GroupNorm in
bf16) and on a GPU: tests/test_memory.py; benchmarks/RESULTS.md, "Memory estimate
against autograd".

Imports no torch: a dry run of a 100-cell grid costs milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .catalog import check_resolution, parse
from .families.base import Dtypes, Saved
from .flops import count

GiB = 2**30
PRECISIONS = ("fp32", "bf16")
DEVICES = ("cuda", "cpu")
OPTIMIZERS = {"adamw": 8, "sgd": 4}  # bytes of optimiser state per parameter
# What a GPU's memory holds besides the tensors torch allocates (CUDA context, NCCL
# buffers, the caching allocator's fragmentation): a cell must fit the rest.
USABLE_FRACTION = 0.90
CONTEXT_BYTES = 1 * GiB
WORKSPACE_BYTES = 256 * 2**20  # cuBLAS / cuDNN workspaces
# A checkpoint's size and the speed it is assumed written at (a slow shared file system
# under load): what the process group's timeout (vitscale.train.runtime) and the preemption
# window a cluster profile gives (vitscale.grid.profile) must hold.
# Decoding on the device holds a process's whole batch there, in the decoding streams' own
# pools, which the step's cannot reuse: each image at its stored resolution (uint8 RGB; a
# sharded set's sizes are known only once read: assumed this, above ImageNet's mean of
# about 400 x 350), its crop and their stack (uint8), and the float batch, the next one's
# beside the one the step reads. An estimate: not yet measured on a GPU.
DECODED_PIXELS = 512 * 512
CHECKPOINT_BYTES_PER_PARAM = 16  # weights and AdamW's two moments, fp32, with room
CHECKPOINT_WRITE_BYTES_PER_S = 20e6


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per process (one GPU) at one micro-batch; ``total`` is the estimated peak."""

    micro_batch: int
    weights: int
    gradients: int
    optimizer: int
    buckets: int
    kept: int  # the pre-trained model held while fine-tuning
    decode: int  # the batch decoded on the device (data.decode), in its streams' pools
    activations: int
    transient: int
    temporaries: int  # the optimiser step's (foreach) temporaries

    @property
    def resident(self) -> int:
        """What stays allocated between steps: an evaluation runs beside it."""
        state = self.weights + self.gradients + self.optimizer + self.buckets + self.kept
        return state + self.decode

    @property
    def total(self) -> int:
        return self.resident + max(self.activations + self.transient, self.temporaries)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"total": self.total}


# --------------------------------------------------------------------------- activations


def _dtypes(precision: str, device: str) -> Dtypes:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    mask = 1 if device == "cuda" else None
    if precision == "fp32":
        return Dtypes(compute=4, norm=4, mask=mask)
    return Dtypes(compute=2, norm=4 if device == "cuda" else 2, mask=mask)


@lru_cache(maxsize=4096)
def _saved(name: str, image_size: int, precision: str, device: str, **head) -> Saved:
    """The walk of ``name``'s saved tensors (``head``: ``create_model``'s head arguments)."""
    spec = parse(name)
    check_resolution(spec, image_size)
    s = Saved()
    spec.saved(s, spec.at(image_size, **head), _dtypes(precision, device))
    return s


def saved_activation_bytes(
    name: str,
    *,
    image_size: int,
    batch: int,
    num_classes: int = 1000,
    head: str = "pretrain",
    pool: str | None = None,
    pre_logits: bool | None = None,
    dropout: float = 0.0,
    precision: str = "bf16",
    device: str = "cuda",
) -> int:
    """Bytes autograd keeps for the backward pass of ``model(images)`` at ``batch``
    examples: saved activations plus the weight copies the forward makes (autocast's
    casts, standardised kernels); parameters themselves are not counted."""
    heads = dict(num_classes=num_classes, head=head, pool=pool, pre_logits=pre_logits)
    s = _saved(name, image_size, precision, device, **heads, dropout=float(dropout))
    return batch * s.per_example + s.constant


def measure_saved_bytes(model, images, *, bf16: bool = False, device_type: str = "cpu") -> int:
    """What :func:`saved_activation_bytes` estimates, measured: the bytes of every
    distinct storage autograd saves during ``model(images)`` (parameters excluded), under
    ``device_type`` autocast in bf16 when ``bf16``. The calibration's oracle."""
    import torch

    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage._cdata not in params:
            saved.setdefault(storage._cdata, storage.nbytes())
        return t

    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16),
    ):
        model(images)
    return sum(saved.values())


# --------------------------------------------------------------------------- the step


def estimate(
    name: str,
    *,
    image_size: int,
    micro_batch: int,
    num_classes: int = 1000,
    head: str = "pretrain",
    pool: str | None = None,
    pre_logits: bool | None = None,
    dropout: float = 0.0,
    precision: str = "bf16",
    device: str = "cuda",
    optimizer: str = "adamw",
    processes: int = 1,
    loss: str = "softmax",
    kept_params: int = 0,
    decode_batch: int = 0,
) -> MemoryEstimate:
    """Peak memory of one process's training step at ``micro_batch`` (see module doc).

    ``kept_params``: parameters of a model held beside the one training (fine-tuning
    keeps the pre-trained model); ``decode_batch``: the process's batch, where it is
    decoded on the device (``data.decode``).
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    if micro_batch < 1:
        raise ValueError(f"micro_batch must be at least 1, got {micro_batch}")
    heads = dict(num_classes=num_classes, head=head, pool=pool, pre_logits=pre_logits)
    params = count(name, image_size, **heads).params
    s = _saved(name, image_size, precision, device, **heads, dropout=float(dropout))
    # The loss: fp32 logits and log-softmax (softmax), or logits and multi-hot targets (sigmoid).
    loss_bytes = micro_batch * num_classes * 4 * (1 if loss == "softmax" else 2)
    return MemoryEstimate(
        micro_batch=micro_batch,
        weights=4 * params,
        gradients=4 * params,
        optimizer=OPTIMIZERS[optimizer] * params,
        buckets=4 * params if processes > 1 else 0,
        kept=4 * kept_params,
        decode=decode_bytes(decode_batch, image_size=image_size),
        activations=micro_batch * s.per_example + s.constant + loss_bytes,
        transient=2 * micro_batch * s.largest + WORKSPACE_BYTES,
        temporaries=4 * params,
    )


def evaluation_batch(
    requested: int, memory_bytes: float, *, resident: int, name: str, image_size: int,
    precision: str, **heads,
) -> int:  # fmt: skip
    """The largest batch up to ``requested`` whose forward pass without gradients fits
    ``memory_bytes`` beside ``resident`` bytes (a training step's, :attr:`MemoryEstimate.
    resident`): nothing is saved for a backward pass, so what is live at once is a layer's
    input and output (two of the largest activations) and the workspaces; 1 if none fits."""
    largest = _saved(name, image_size, precision, "cuda", **heads, dropout=0.0).largest
    room = usable_bytes(memory_bytes) - resident - WORKSPACE_BYTES
    return max(1, min(requested, room // (2 * largest)))


def decode_bytes(batch: int, *, image_size: int) -> int:
    """What decoding ``batch`` images on the device holds there (:data:`DECODED_PIXELS`)."""
    crop = 3 * image_size**2
    return batch * (3 * DECODED_PIXELS + 2 * crop + 2 * 4 * crop)


def checkpoint_write_s(params: int) -> float:
    """Seconds to write a checkpoint of a model of ``params`` parameters, assumed."""
    return CHECKPOINT_BYTES_PER_PARAM * params / CHECKPOINT_WRITE_BYTES_PER_S


def usable_bytes(memory_bytes: float) -> int:
    """What a training process may allocate on a device of ``memory_bytes``."""
    return int(USABLE_FRACTION * memory_bytes - CONTEXT_BYTES)


def fits(e: MemoryEstimate, memory_bytes: float) -> bool:
    return e.total <= usable_bytes(memory_bytes)


def fit_micro_batch(
    per_process_batch: int, memory_bytes: float, **estimate_kwargs
) -> tuple[int | None, MemoryEstimate]:
    """The largest micro-batch dividing ``per_process_batch`` whose step fits
    ``memory_bytes``, and its estimate; ``(None, estimate at 1)`` when none fits."""
    if per_process_batch < 1:
        raise ValueError(f"per-process batch must be at least 1, got {per_process_batch}")
    for micro in sorted(_divisors(per_process_batch), reverse=True):
        e = estimate(micro_batch=micro, **estimate_kwargs)
        if fits(e, memory_bytes):
            return micro, e
    return None, e


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})
