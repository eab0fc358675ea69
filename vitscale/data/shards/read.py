"""Examples out of tar shards: random access through WebDataset's indexed reader (``wids``).

``wids.wids.IndexedTarSamples`` memory-maps one shard, indexes it by walking the tar
headers and groups consecutive members with the same key into a sample, so example ``i``
of a shard is one seek away and a batch can take its examples from anywhere in a shuffle
window (what makes the pre-training stream computable, :mod:`vitscale.data.shards.dataset`).
It is used per shard with a small LRU of open shards per process; wids' dataset wrapper
(``ShardListDataset``) is not, because it copies local shards into a cache folder and
takes lock files beside them, which a read-only cluster file system refuses.

A sample becomes ``(image, target)`` here:

- image: the first member with an image extension (``.jpg``, ``.jpeg``, ``.png``,
  ``.webp``), decoded by ``torchvision.io.decode_image`` to RGB uint8 (libjpeg-turbo;
  faster than PIL's decode + crop, measured in ``benchmarks/loader_throughput.py``);
- labels: ``.cls`` holds one class index as text (WebDataset's convention); ``.json``
  holds a class index or name, a list of them, or an object with ``"label"`` and/or
  ``"labels"``. The first label is the example's class; a multi-label set's target is
  the multi-hot vector of all of them (as for ``multilabel:`` trees).

Anything wrong with one example (no image, an image that does not decode, no label, a
label outside the class list) is a :class:`SampleError` naming the shard and the key.
:func:`scan_shard` is the integrity check ``vitscale data index`` runs on every shard with
the standard library's ``tarfile`` (headers and labels; images too with ``--verify``).
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

try:  # deprecated since torchvision 0.29 in favour of TorchCodec; PIL takes over without it
    from torchvision.io import ImageReadMode as _ImageReadMode
    from torchvision.io import decode_image as _decode_image

    warnings.filterwarnings(
        "ignore",
        message="The image decoding and encoding capabilities of TorchVision are deprecated",
        category=DeprecationWarning,
    )
except ImportError:  # pragma: no cover - a torchvision without image decoding
    _decode_image = _ImageReadMode = None

from ..registry import DatasetFormatError, DatasetNotFoundError, decode_reason
from .index import IMAGE_EXTS, LABEL_EXTS

_BLOCK = 512
_USTAR_NAME = 100  # longest member name the indexed reader reads (plain ustar header)


class SampleError(DatasetFormatError):
    """One bad example: names the dataset, the shard and the key."""

    def __init__(self, name: str, shard: str | Path, key: str, reason: str) -> None:
        self.dataset, self.shard, self.key, self.reason = name, str(shard), key, reason
        super().__init__(f"{name}: shard {shard}, key {key!r}: {reason}")

    def __reduce__(self):  # pickles (DataLoader workers) with its fields
        return (type(self), (self.dataset, self.shard, self.key, self.reason))


def _wids():
    from wids.wids import IndexedTarSamples, group_by_key, splitname

    return IndexedTarSamples, group_by_key, splitname


class ShardReader:
    """Open shards of one process, least recently used closed first.

    Safe across ``fork``: a DataLoader worker that inherits the cache starts its own
    (memory maps are per process).
    """

    def __init__(self, name: str, *, capacity: int = 64) -> None:
        self.name = name
        self.capacity = capacity
        self._open: OrderedDict[str, Any] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict:
        return {"name": self.name, "capacity": self.capacity}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["name"], capacity=state["capacity"])

    def shard(self, path: Path, nsamples: int):
        if os.getpid() != self._pid:  # a forked worker: close the inherited copies
            self.close()
            self._pid = os.getpid()
        key = str(path)
        samples = self._open.get(key)
        if samples is not None:
            self._open.move_to_end(key)
            return samples
        IndexedTarSamples, _, _ = _wids()
        try:
            samples = IndexedTarSamples(path=key, use_mmap=True)
        except FileNotFoundError:
            raise DatasetNotFoundError(f"{self.name}: shard {path} is missing") from None
        except Exception as e:  # wids' header walk raises struct.error, ValueError, ...
            raise DatasetFormatError(
                f"{self.name}: shard {path} is not a readable tar ({type(e).__name__}: {e}); "
                "truncated or damaged: restore it, or re-index with `vitscale data index`"
            ) from e
        if len(samples) != nsamples:
            found = len(samples)
            samples.close()
            raise DatasetFormatError(
                f"{self.name}: shard {path} holds {found} examples but the index says "
                f"{nsamples}: rewritten since it was indexed; re-index with `vitscale data index`"
            )
        self._open[key] = samples
        while len(self._open) > self.capacity:
            _, old = self._open.popitem(last=False)
            old.close()
        return samples

    def sample(
        self, path: Path, nsamples: int, inner: int, *, only: tuple[str, ...] | None = None
    ) -> dict[str, Any]:
        """Members of example ``inner`` of a shard, ``{".jpg": bytes, ..., "__key__": key}``;
        with ``only``, just those extensions are read (labels without the image)."""
        shard = self.shard(path, nsamples)
        _, _, splitname = _wids()
        out: dict[str, Any] = {}
        for member in shard.samples[inner]:
            name = shard.reader.by_index[member][0]
            key, ext = splitname(name)
            out["__key__"] = key
            if only is None or ext in only:
                out[ext] = shard.reader.get_file(member)[1].getvalue()
        return out

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


def image_of(sample: dict[str, Any]) -> tuple[str, bytes] | None:
    for ext, data in sample.items():
        if ext.lower() in IMAGE_EXTS:
            return ext, data
    return None


@dataclass(frozen=True)
class Labels:
    """How label values map to class indices: a class list and whether names are allowed."""

    classes: tuple[str, ...]
    index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, classes: tuple[str, ...]) -> Labels:
        return cls(classes, {c: i for i, c in enumerate(classes)})


def _raw_labels(sample: dict[str, Any]) -> list[Any] | None:
    """Label values as written (ints or class names), or None if the sample has none."""
    if ".cls" in sample:
        text = sample[".cls"].decode("utf-8").strip()
        return [int(text)] if re.fullmatch(r"[+-]?\d+", text) else [text]
    if ".json" in sample:
        value = json.loads(sample[".json"])
        if isinstance(value, dict):
            first = [value["label"]] if "label" in value else []
            rest = value.get("labels", [])
            value = first + (list(rest) if isinstance(rest, list) else [rest])
        values = value if isinstance(value, list) else [value]
        return [v for v in values if v is not None and v != ""] or None
    return None


def labels_of(sample: dict[str, Any], labels: Labels) -> list[int]:
    """Class indices of a sample, first = its class; raises ValueError with the reason."""
    try:
        values = _raw_labels(sample)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"unreadable label ({type(e).__name__}: {e})") from None
    if values is None:
        raise ValueError("no label (.cls, or .json with a class index or name)")
    out = []
    n = len(labels.classes)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise ValueError(f"label {v!r} is neither a class index nor a class name")
        if isinstance(v, str):
            if v not in labels.index:
                raise ValueError(f"label {v!r} is not in the class list ({n} classes)")
            out.append(labels.index[v])
        elif not 0 <= v < n:
            raise ValueError(f"label {v} is outside the class list (0..{n - 1}, {n} classes)")
        else:
            out.append(v)
    return list(dict.fromkeys(out))


def decode_pil(data: bytes) -> Tensor:
    """PIL's decoder, the same libjpeg-turbo: bit-identical pixels (tested), a little slower
    (``benchmarks/loader_throughput.py``); used where torchvision no longer decodes."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            pixels = np.array(im.convert("RGB"))
    except (OSError, SyntaxError, ValueError) as e:  # PIL's UnidentifiedImageError is an OSError
        raise ValueError(f"cannot decode the image: {decode_reason(e)}") from None
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()


def decode_torchvision(data: bytes) -> Tensor:
    """``torchvision.io.decode_image`` (JPEG, PNG, WebP, GIF) to RGB uint8."""
    if not data:
        raise ValueError("cannot decode the image: the file is empty")
    try:
        return _decode_image(
            torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=_ImageReadMode.RGB
        )
    except RuntimeError as e:
        raise ValueError(f"cannot decode the image: {decode_reason(e)}") from None


def decode(data: bytes) -> Tensor:
    """Image bytes -> ``(3, H, W)`` uint8 RGB; ValueError with the decoder's reason."""
    return decode_torchvision(data) if _decode_image is not None else decode_pil(data)


# --------------------------------------------------------------------------- scanning


@dataclass
class ShardScan:
    """What ``vitscale data index`` learns of one shard without reading its images."""

    nsamples: int = 0
    filesize: int = 0
    labels: list[list[Any]] = field(default_factory=list)  # raw values per example
    problems: list[str] = field(default_factory=list)  # the first ones
    unlisted: int = 0  # and how many more


def scan_shard(path: Path, *, verify: bool = False, max_problems: int = 20) -> ShardScan:
    """Count a shard's examples the way the indexed reader groups them, check the tar is
    whole (every member's data inside the file, the end-of-archive blocks present) and
    that every example has an image and a readable label; with ``verify``, that its image
    decodes too (as training decodes it: the whole cost of reading the set once)."""
    _, group_by_key, splitname = _wids()
    scan = ShardScan(filesize=os.stat(path).st_size)

    def problem(text: str) -> None:
        if len(scan.problems) < max_problems:
            scan.problems.append(f"shard {path}: {text}")
        else:
            scan.unlisted += 1

    try:
        with tarfile.open(path, "r:") as tf:
            members = [m for m in tf if m.isreg()]
            end = tf.offset
            for m in members:
                if m.offset_data + m.size > scan.filesize:
                    problem(f"member {m.name!r} runs past the end of the file: truncated")
                    return scan
                if len(m.name.encode()) > _USTAR_NAME:
                    problem(f"member name {m.name!r} is longer than {_USTAR_NAME} bytes")
            with open(path, "rb") as fh:
                fh.seek(end)
                trailer = fh.read(2 * _BLOCK)
            if len(trailer) < 2 * _BLOCK or trailer.strip(b"\0"):
                problem("no end-of-archive blocks after the last member: truncated or damaged")
                return scan
            named = [m for m in members if "." in os.path.basename(m.name)]
            groups = group_by_key([m.name for m in named])
            for group in groups:
                sample, member = {}, {}
                key = splitname(named[group[0]].name)[0]
                for i in group:
                    ext = splitname(named[i].name)[1]
                    member[ext] = named[i]
                    if ext in LABEL_EXTS:
                        sample[ext] = tf.extractfile(named[i]).read()
                    else:
                        sample[ext] = b""
                if (image := image_of(sample)) is None:
                    problem(f"key {key!r}: no image ({', '.join(IMAGE_EXTS)})")
                elif verify:
                    try:
                        decode(tf.extractfile(member[image[0]]).read())
                    except ValueError as e:
                        problem(f"key {key!r}: {e}")
                try:
                    values = _raw_labels(sample)
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    problem(f"key {key!r}: unreadable label ({e})")
                    values = []
                if values is None:
                    problem(f"key {key!r}: no label (.cls, or .json with a class index or name)")
                    values = []
                scan.labels.append(values)
            scan.nsamples = len(groups)
    except tarfile.TarError as e:
        problem(f"not a readable tar ({e}): truncated or damaged")
    return scan
