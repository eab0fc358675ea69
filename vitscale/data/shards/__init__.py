"""Sharded sets: :mod:`.index` (torch-free), :mod:`.read`, :mod:`.order` (the stream's windows),
:mod:`.dataset` (the torch dataset and its stream), :mod:`.device` (decoding on the training
device) and :mod:`.write` (``vitscale data shard``); here, torch-free for the grid's dry
run, where a set is decoded (:func:`decode_on_device`)."""

from __future__ import annotations

# GPUs (a part of the name torch gives them) on which decoding on the device was measured
# feeding training faster than the loader's workers (benchmarks/gpu_feed.sh): ``data.decode:
# auto`` decodes on the device there and on the workers everywhere else. None yet: on the
# one GPU measured, an H100 80GB with 16 cores (benchmarks/RESULTS.md, 2026-11-24), the
# device decoded and cropped 1,379 img/s, the workers read and decoded 2,659.
DEVICE_DECODE_FASTER: tuple[str, ...] = ()


def decode_on_device(data, *, gpu: str | None) -> bool:
    """Whether the pre-training set of ``data`` (a config's ``data`` section) is decoded on
    its device: a sharded set's, under ``data.decode: device``, or ``auto`` on a GPU named
    ``gpu`` that :data:`DEVICE_DECODE_FASTER` lists (``gpu`` None: a CPU, where both are
    the same cores)."""
    from ..registry import parse_name

    if parse_name(data.dataset)[0] != "shards":
        return False
    if data.decode == "auto":
        return gpu is not None and any(name in gpu for name in DEVICE_DECODE_FASTER)
    return data.decode == "device"
