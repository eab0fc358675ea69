"""Peak accelerator memory of one training step, estimated before anything runs (the grid
places cells with it, :mod:`vitscale.grid.placement`; the trainer picks micro-batches with
it, :mod:`vitscale.train.speed`). Per process::

    peak = weights + gradients + optimiser state (+ DDP's gradient buckets, >1 process)
           (+ the pre-trained model kept while fine-tuning)
           (+ the batch decoded on the device, ``data.decode``: :func:`decode_bytes`)
           + max(activations + transient, the optimiser step's temporaries)

- weights, gradients fp32 (4 bytes per parameter each); AdamW keeps two fp32 moments
  (8), SGD with momentum one (4); ``DistributedDataParallel`` copies the gradients into
  its buckets (Accelerate's default ``gradient_as_bucket_view=False``: 4 more).
- activations: every tensor autograd saves for the backward pass at the micro-batch,
  counted layer by layer from :mod:`vitscale.catalog` as the modules in
  :mod:`vitscale.models` save them, in the dtypes autocast gives them; plus the weight
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

from .catalog import HybridSpec, ResNetSpec, ViTSpec, check_resolution, parse, same_padding
from .flops import count

GiB = 2**30
PRECISIONS = ("fp32", "bf16")
DEVICES = ("cuda", "cpu")
OPTIMIZERS = {"adamw": 8, "sgd": 4}  # bytes of optimiser state per parameter
GN_GROUPS = 32
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
    def total(self) -> int:
        state = self.weights + self.gradients + self.optimizer + self.buckets + self.kept
        return state + self.decode + max(self.activations + self.transient, self.temporaries)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"total": self.total}


# --------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class _Dtypes:
    compute: int  # what a matmul or convolution saves of its input (autocast's cast copy)
    norm: int  # GroupNorm's saved input and its output
    mask: int | None  # a dropout mask element; None: the dropped tensor's dtype


def _dtypes(precision: str, device: str) -> _Dtypes:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    mask = 1 if device == "cuda" else None
    if precision == "fp32":
        return _Dtypes(compute=4, norm=4, mask=mask)
    return _Dtypes(compute=2, norm=4 if device == "cuda" else 2, mask=mask)


class _Saved:
    """Saved tensors: bytes per example, bytes once per forward (weight copies), the largest."""

    def __init__(self) -> None:
        self.per_example = 0
        self.constant = 0
        self.largest = 0

    def act(self, elements: int, nbytes: int) -> None:
        size = elements * nbytes
        self.per_example += size
        self.largest = max(self.largest, size)

    def gn_stats(self) -> None:  # GroupNorm's mean and rstd per (example, group), fp32
        self.act(2 * GN_GROUPS, 4)

    def weight_copy(self, elements: int, nbytes: int) -> None:
        self.constant += elements * nbytes


def _conv_out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def _std_conv(s: _Saved, cin: int, cout: int, k: int, b: _Dtypes) -> None:
    """A weight-standardised kernel: the standardised weight (fp32) or its bf16 cast is
    saved by the convolution, the standardisation's mean and inverse std by batch norm."""
    s.weight_copy(k * k * cin * cout, b.compute)
    s.weight_copy(2 * cout, 4)


def _same_std_conv(s: _Saved, cin: int, cout: int, k: int, b: _Dtypes) -> None:
    """The hybrid's kernel, ``(w - mean) / (std + eps)``: the division keeps the centred
    kernel (fp32) and the per-channel divisor, the square root its result, the
    convolution the standardised kernel (or its bf16 cast)."""
    s.weight_copy(k * k * cin * cout, 4)
    s.weight_copy(2 * cout, 4)
    s.weight_copy(k * k * cin * cout, b.compute)


def _same_conv_input(
    s: _Saved, channels: int, size: int, k: int, stride: int, *, b: _Dtypes, kept: bool
) -> None:
    """What a "SAME" convolution keeps of a ``channels x size x size`` input in GN's dtype
    (``kept``: a layer before keeps that input already): the padded copy when it pads,
    else the input's cast under autocast, else the input itself unless already kept."""
    pad = sum(same_padding(size, k, stride))
    if pad or b.compute != b.norm or not kept:
        s.act(channels * (size + pad) ** 2, b.compute)


def _bit(s: _Saved, spec: ResNetSpec, size: int, b: _Dtypes) -> int:
    """BiT ResNet-v2 trunk and final GN-ReLU; returns its output channels."""
    c, g = b.compute, b.norm
    stem = spec.stem_channels
    s.act(3 * size * size, c)  # the image (its bf16 cast under autocast)
    _std_conv(s, 3, stem, 7, b)
    size = _conv_out(size, 7, 2, 3)
    s.act(stem * (size + 2) ** 2, c)  # max-pool input: the stem output, zero-padded by 1
    size = _conv_out(size + 2, 3, 2, 0)
    s.act(stem * size * size, 8)  # max-pool indices, int64
    cin = stem
    for units, (mid, cout, stride) in zip(spec.layers, spec.stage_channels(), strict=True):
        for i in range(units):
            st = stride if i == 0 else 1
            project = st != 1 or cin != cout
            out = _conv_out(size, 3, st, 1)
            # GN-ReLU-conv three times; GN keeps its input, ReLU its output (both in GN's
            # dtype); a conv keeps the bf16 cast of its input when that dtype differs.
            for channels, z, convs in (
                (cin, size, 2 if project else 1),
                (mid, size, 1),
                (mid, out, 1),
            ):
                s.act(channels * z * z, g)
                s.gn_stats()
                s.act(channels * z * z, g)
                if c != g:
                    for _ in range(convs):
                        s.act(channels * z * z, c)
            _std_conv(s, cin, mid, 1, b)
            _std_conv(s, mid, mid, 3, b)
            _std_conv(s, mid, cout, 1, b)
            if project:
                _std_conv(s, cin, cout, 1, b)
            size, cin = out, cout
    s.act(cin * size * size, g)  # final GN input
    s.gn_stats()
    s.act(cin * size * size, g)  # its ReLU
    return cin


def _hybrid_trunk(s: _Saved, spec: ResNetSpec, size: int, b: _Dtypes) -> tuple[int, int]:
    """The hybrid's post-activation trunk with TF "SAME" padding; returns (channels, size)
    of its feature map."""
    c, g = b.compute, b.norm
    stem = spec.stem_channels
    s.act(3 * (size + sum(same_padding(size, 7, 2))) ** 2, c)  # the padded image (cast)
    _same_std_conv(s, 3, stem, 7, b)
    size = -(-size // 2)
    s.act(stem * size * size, g)  # GN input
    s.gn_stats()
    s.act(stem * size * size, g)  # ReLU output
    s.act(stem * (size + sum(same_padding(size, 3, 2))) ** 2, g)  # max-pool's padded input
    size = -(-size // 2)
    s.act(stem * size * size, 8)  # max-pool indices
    cin, kept = stem, False  # the max-pool's output is kept by nothing yet
    for units, (mid, cout, stride) in zip(spec.layers, spec.stage_channels(), strict=True):
        for i in range(units):
            st = stride if i == 0 else 1
            project = st != 1 or cin != cout
            out = -(-size // st)
            # conv1 (and the projection's conv) on the unit's input: a cast each under
            # autocast (no padding for 1x1), else the input itself unless a ReLU keeps it.
            _same_conv_input(s, cin, size, 1, 1, b=b, kept=kept)
            if project:
                if c != g:
                    _same_conv_input(s, cin, size, 1, st, b=b, kept=kept)
                s.act(cout * out * out, g)  # the projection's GN input
                s.gn_stats()
            for channels, z, k, conv_stride in ((mid, size, 3, st), (mid, out, 1, 1)):
                s.act(channels * z * z, g)  # GN input
                s.gn_stats()
                s.act(channels * z * z, g)  # ReLU output
                _same_conv_input(s, channels, z, k, conv_stride, b=b, kept=True)
            s.act(cout * out * out, g)  # conv3's GN input
            s.gn_stats()
            s.act(cout * out * out, g)  # ReLU(GN + shortcut): the next unit's input
            _same_std_conv(s, cin, mid, 1, b)
            _same_std_conv(s, mid, mid, 3, b)
            _same_std_conv(s, mid, cout, 1, b)
            if project:
                _same_std_conv(s, cin, cout, 1, b)
            size, cin, kept = out, cout, True
    return cin, size


def _vit(
    s: _Saved,
    spec: ViTSpec,
    *,
    channels: int,
    size: int,
    input_bytes: int,
    input_saved: bool,
    pool: str,
    dropout: float,
    b: _Dtypes,
) -> int:
    """Patch embedding, encoder and final LN on a ``channels x size x size`` input of
    ``input_bytes`` per element (``input_saved``: a layer before already keeps it)."""
    c = b.compute
    d, m, h = spec.width, spec.mlp_dim, spec.heads
    if input_bytes != c or not input_saved:  # the patch embedding keeps its input (or cast)
        s.act(channels * size * size, c)
    if c != 4:
        s.weight_copy(channels * spec.patch**2 * d, c)
    n = (size // spec.patch) ** 2 + (1 if pool == "token" else 0)
    # Dropout keeps a mask per element: bool in CUDA's fused kernel, the input's dtype on
    # the CPU (a scaled noise tensor).
    drops = dropout > 0
    s.act(drops * n * d, b.mask or 4)  # after the position embedding (fp32 stream)
    for _ in range(spec.depth):
        for _norm in range(2):  # LN keeps its (fp32 residual stream) input, mean and rstd
            s.act(n * d, 4)
            s.act(2 * n, 4)
            s.act(n * d, c)  # LN output as the next dense layer's input (qkv, fc1)
        s.act(3 * n * d, c)  # q, k, v (views of the qkv output) kept by attention
        s.act(n * d, c)  # attention output, also the output projection's input
        s.act(h * n, 4)  # attention's log-sum-exp
        s.act(n * m, c)  # fc1 output: GELU's input
        s.act(n * m, c)  # GELU output (after dropout): fc2's input
        s.act(drops * (2 * n * d + n * m), b.mask or c)  # after proj, GELU and fc2
        if c != 4:
            s.weight_copy(4 * d * d + 2 * d * m, c)
    s.act(n * d, 4)  # final LN
    s.act(2 * n, 4)
    return n


def _vit_head(
    s: _Saved,
    *,
    d: int,
    n: int,
    pool: str,
    head: str,
    pre_logits: bool,
    num_classes: int,
    b: _Dtypes,
):
    c = b.compute
    if pool == "token" and c == 4:
        s.act(n * d, 4)  # the class token is a view: the whole final LN output stays
    else:
        s.act(d, c)  # the pooled (or cast) representation
    if head == "pretrain" and pre_logits:
        s.act(d, c)  # tanh output, the classifier's input
        if c != 4:
            s.weight_copy(d * d, c)
    if c != 4:
        s.weight_copy(d * num_classes, c)


@lru_cache(maxsize=4096)
def _saved(
    name: str,
    image_size: int,
    num_classes: int,
    head: str,
    pool: str | None,
    pre_logits: bool | None,
    dropout: float,
    precision: str,
    device: str,
) -> _Saved:
    spec = parse(name)
    check_resolution(spec, image_size)
    b = _dtypes(precision, device)
    s = _Saved()
    if isinstance(spec, ResNetSpec):
        width = _bit(s, spec, image_size, b)
        s.act(width, b.compute)  # pooled features: the classifier's input
        if b.compute != 4:
            s.weight_copy(width * num_classes, b.compute)
        return s
    pool = pool or "token"
    if isinstance(spec, HybridSpec):  # the trunk's last ReLU keeps its output
        channels, size = _hybrid_trunk(s, spec.resnet, image_size, b)
        vit, input_bytes, input_saved = spec.vit, b.norm, True
    else:  # the fp32 images
        channels, size, vit, input_bytes, input_saved = 3, image_size, spec, 4, False
    n = _vit(
        s,
        vit,
        channels=channels,
        size=size,
        input_bytes=input_bytes,
        input_saved=input_saved,
        pool=pool,
        dropout=dropout,
        b=b,
    )
    _vit_head(
        s,
        d=vit.width,
        n=n,
        pool=pool,
        head=head,
        pre_logits=pre_logits is not False,
        num_classes=num_classes,
        b=b,
    )
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
    s = _saved(
        name, image_size, num_classes, head, pool, pre_logits, float(dropout), precision, device
    )
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
    params = count(
        name, image_size, num_classes=num_classes, head=head, pool=pool, pre_logits=pre_logits
    ).params
    s = _saved(
        name, image_size, num_classes, head, pool, pre_logits, float(dropout), precision, device
    )
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
