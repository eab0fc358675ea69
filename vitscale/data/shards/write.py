"""Make sharded sets: ``vitscale data shard`` (convert any source) and ``data index``
(docs/datasets.md, "Sharded datasets", says what each does for the user).

``shard_dataset`` writes with WebDataset's own ``TarWriter``, in a fixed random order
(``SeededPermutation(n, SHARD_ORDER_SEED)``) so that a subset made of whole shards
(:func:`vitscale.data.shards.index.select`) is a random subset whatever the source's order
(ImageFolder lists class by class). Formats other than JPEG, PNG and WebP, and arrays
(CIFAR, the rendered synthetic set), become PNG; keys name the source example
(``train/n01440764/n01440764_10026_JPEG``), so an error at training time points back to
the file. A shard is written to a hidden temporary file, flushed and renamed; the plan a
conversion resumes from is ``DEST/.shard-plan.json``, and ``index.json`` is written last.

A source file that does not decode where it must (a format converted, an image resized,
every image file with ``verify``) is never written: the shard that would hold it is not
either, and the conversion ends with every such file named.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import multiprocessing
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...config.counts import parse_count
from ...errors import listing
from ...record.folder import write_text_atomic
from ..registry import DatasetFormatError, parse_name
from ..subsets import SeededPermutation
from .index import IMAGE_EXTS, INDEX_FILE, Shard, expand_pattern, write_index

SHARD_ORDER_SEED = 0x5A4D_5EED
PLAN_FILE = ".shard-plan.json"
PLAN_VERSION = 1
_MTIME = 946684800.0  # fixed member times (2000-01-01): the same input gives the same bytes
_LARGE_SPLIT = 10**8
_UNDECODED = "cannot decode the image: "  # what the list of such files need not repeat


class ShardingError(ValueError):
    """A conversion or indexing that cannot go ahead (arguments, destination, source)."""


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class _Bad:
    """A source file that does not decode: which, and why (the reason alone)."""

    file: str
    reason: str


@dataclass
class _Split:
    """One split of the source as examples ``(key, {ext: bytes})``, or :class:`_Bad`."""

    size: int
    read: Callable[[list[int]], list[tuple[str, dict[str, bytes]] | _Bad]]
    classes: list[str]
    multilabel: bool
    crop: bool
    copies: bool = False  # image files copied as they are (unless verified)


def _png(array: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _key(text: str) -> str:
    """A WebDataset key: no dots (the first dot of a member name starts its extension)."""
    return re.sub(r"[^A-Za-z0-9_/-]", "_", text)


def _label_members(labels: list[int], multilabel: bool) -> dict[str, bytes]:
    if multilabel:
        return {".json": json.dumps({"labels": labels}).encode()}
    return {".cls": str(labels[0]).encode()}


def _shrunk(file: Path, shorter_side: int) -> dict[str, bytes] | None:
    """The image re-encoded (JPEG, quality 95) with its shorter side ``shorter_side``, or
    None if it is no larger than that (then it is copied as it is)."""
    from PIL import Image

    with Image.open(file) as im:
        w, h = im.size
        if min(w, h) <= shorter_side:
            return None
        size = (round(w * shorter_side / min(w, h)), round(h * shorter_side / min(w, h)))
        im.draft("RGB", size)  # JPEG: decode at a reduced scale when it can
        out = io.BytesIO()
        im.convert("RGB").resize(size, Image.BICUBIC).save(out, format="JPEG", quality=95)
    return {".jpg": out.getvalue()}


def _image_members(file: Path, *, shorter_side: int | None, verify: bool) -> dict[str, bytes]:
    """A source file as the shard's image member: resized (``shorter_side``), converted to
    PNG (a format the reader does not take), or its bytes as they are, decoded first with
    ``verify``. ValueError with the reason when it does not decode."""
    from PIL import Image

    from ..registry import decode_reason
    from .read import decode

    ext = ".jpg" if file.suffix.lower() == ".jpeg" else file.suffix.lower()
    try:
        if shorter_side and (shrunk := _shrunk(file, shorter_side)) is not None:
            return shrunk
        if ext not in IMAGE_EXTS:
            with Image.open(file) as im:
                return {".png": _png(np.asarray(im.convert("RGB")))}
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"{_UNDECODED}{decode_reason(e)}") from None
    data = file.read_bytes()
    if verify:
        decode(data)
    return {ext: data}


def _open_split(
    src: str,
    split: str,
    *,
    root: str | None,
    download: bool,
    image_size: int,
    shorter_side: int | None = None,
    verify: bool = False,
    holdout: float | None = None,
) -> _Split:
    from ..embedded import EMBEDDED, open_task
    from ..registry import default_root

    source, path = parse_name(src)
    if source in EMBEDDED:
        ds = open_task(source, split, image_size)

        multi = ds.multilabel

        def labels(target) -> list[int]:
            return target.nonzero().flatten().tolist() if multi else [int(target)]

        def read_synthetic(ids: list[int]):
            images, targets = ds.__getitems__(ids)
            pixels = ((images.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
            return [
                (f"{source}-{split}-{i:010d}", {".png": _png(p)} | _label_members(labels(t), multi))
                for i, p, t in zip(ids, pixels, targets, strict=True)
            ]

        return _Split(len(ds), read_synthetic, list(ds.classes), multi, crop=False)
    from ..sources.load import load_source

    where = path if path is not None else Path(root).expanduser() if root else default_root(source)
    ds = load_source(
        src, source, split, root=where, transform=None, download=download, holdout=holdout
    )
    base = Path(where)

    def labels(i: int) -> list[int]:
        extra = ds.extra_labels[i] if ds.multilabel else ()
        return list(dict.fromkeys([int(ds.labels[i]), *extra]))

    if ds.files is None:  # CIFAR: the images are arrays in memory
        data = ds.images.data

        def read_arrays(ids: list[int]):
            return [
                (
                    f"{source}-{split}-{i:05d}",
                    {".png": _png(data[i])} | _label_members(labels(i), ds.multilabel),
                )
                for i in ids
            ]

        return _Split(len(ds), read_arrays, ds.classes, ds.multilabel, crop=True)

    def read_files(ids: list[int]):
        out = []
        for i in ids:
            file = Path(ds.files[i])
            try:
                rel = file.relative_to(base).as_posix()
            except ValueError:
                rel = file.name
            try:
                image = _image_members(file, shorter_side=shorter_side, verify=verify)
            except ValueError as e:
                out.append(_Bad(str(file), str(e)))
                continue
            out.append((_key(rel), image | _label_members(labels(i), ds.multilabel)))
        return out

    return _Split(len(ds), read_files, ds.classes, ds.multilabel, crop=True, copies=True)


def _shard_name(split: str, j: int) -> str:
    return f"{split}-{j:06d}.tar"


def _check_dest(dest: Path, plan: dict[str, Any]) -> None:
    plan_file = dest / PLAN_FILE
    if plan_file.is_file():
        old = json.loads(plan_file.read_text())
        if old != plan:
            differ = sorted(k for k in set(old) | set(plan) if old.get(k) != plan.get(k))
            raise ShardingError(
                f"{dest} holds a conversion with other settings ({', '.join(differ)} differ: "
                f"{ {k: old.get(k) for k in differ} }); run it with the same arguments to "
                "resume it, or choose an empty folder"
            )
        return
    if dest.exists() and any(p for p in dest.iterdir() if not p.name.startswith(".")):
        raise ShardingError(f"{dest} is not empty; choose an empty (or new) folder")
    dest.mkdir(parents=True, exist_ok=True)
    write_text_atomic(plan_file, json.dumps(plan, indent=1))


# --------------------------------------------------------------------------- writing

_WORKER: dict[str, Any] = {}


def _write_shard(job: tuple[str, int, list[int], str]) -> tuple[int, list[_Bad]]:
    """Write one shard (in a worker or in-process); returns (examples, bad source files).
    A shard with a bad file is not written (the same command writes it once it is fixed)."""
    from webdataset import TarWriter

    split, j, ids, dest = job
    reader = _WORKER["splits"][split].read
    final = Path(dest) / _shard_name(split, j)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    bad: list[_Bad] = []
    try:
        with open(tmp, "wb") as fh:
            writer = TarWriter(fh, encoder=False, mtime=_MTIME)
            for start in range(0, len(ids), 256):
                for example in reader(ids[start : start + 256]):
                    if isinstance(example, _Bad):
                        bad.append(example)
                        continue
                    key, members = example
                    writer.write(
                        {"__key__": key} | {ext[1:]: data for ext, data in members.items()}
                    )
            writer.close()
            fh.flush()
            os.fsync(fh.fileno())
        if bad:
            tmp.unlink()
        else:
            os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return len(ids), bad


def _init_worker() -> None:
    """A forked writer inherits the opened source (a big tree is listed once, not per
    worker) and renders or encodes on one thread."""
    import torch

    torch.set_num_threads(1)


def _checked_cap(
    shard_size: int, workers: int, shorter_side: int | None, max_examples: int | str | None
) -> int | None:
    """The arguments checked before any source is opened; the examples cap, if any."""
    if shard_size < 1:
        raise ShardingError(f"--shard-size must be at least 1 example, got {shard_size}")
    if workers < 1:
        raise ShardingError(f"--workers must be at least 1, got {workers}")
    if shorter_side is not None and shorter_side < 8:
        raise ShardingError(f"--shorter-side must be at least 8 pixels, got {shorter_side}")
    cap = None if max_examples is None else parse_count(max_examples, what="--max-examples")
    if cap is not None and cap < 1:
        raise ShardingError(f"--max-examples must be at least 1, got {cap}")
    return cap


def _sizes(src: str, splits: dict[str, _Split], cap: int | None) -> dict[str, int]:
    """Examples to shard per split: all, or a random part of at most ``cap``."""
    for s, sp in splits.items():
        if cap is None and sp.size > _LARGE_SPLIT:
            raise ShardingError(
                f"{src} {s} has {sp.size:,} examples; give --max-examples (e.g. 1M) to shard "
                "a random part of it"
            )
    return {s: sp.size if cap is None else min(cap, sp.size) for s, sp in splits.items()}


def _jobs(
    dest: Path, splits: dict[str, _Split], sizes: dict[str, int], shard_size: int
) -> tuple[list[tuple[str, int, list[int], str]], int]:
    """``(shards still to write, examples in the shards already written)``."""
    jobs, done = [], 0
    for s, size in sizes.items():
        order = SeededPermutation(splits[s].size, SHARD_ORDER_SEED)(np.arange(size)).tolist()
        for j, start in enumerate(range(0, size, shard_size)):
            ids = order[start : start + shard_size]
            if (dest / _shard_name(s, j)).is_file():
                done += len(ids)
            else:
                jobs.append((s, j, ids, str(dest)))
    return jobs, done


def _write_all(jobs: list, splits: dict[str, _Split], *, workers: int, bar) -> list[_Bad]:
    """Write the shards in-process or in forked workers, counting examples on ``bar``;
    returns the source files that did not decode."""
    _WORKER["splits"] = splits
    bad: list[_Bad] = []
    try:
        with contextlib.ExitStack() as stack:
            if workers == 1 or len(jobs) <= 1:
                done: Iterable = map(_write_shard, jobs)
            else:
                ctx = multiprocessing.get_context("fork")
                pool = stack.enter_context(ctx.Pool(workers, _init_worker))
                done = pool.imap_unordered(_write_shard, jobs)
            for n, found in done:
                bar.update(n)
                bad += found
    finally:
        bar.close()
        _WORKER.clear()
    return sorted(bad, key=lambda b: b.file)


def shard_dataset(
    src: str,
    dest: str | Path,
    *,
    shard_size: int,
    max_examples: int | str | None = None,
    image_size: int = 32,
    shorter_side: int | None = None,
    root: str | None = None,
    download: bool = False,
    workers: int = 1,
    verify: bool = False,
    holdout: float | None = None,
    progress: bool = True,
) -> Path:
    """Convert every split of ``src`` into WebDataset shards of ``shard_size`` examples
    under ``dest`` (module docstring); returns the index file. Resumable.

    ``shorter_side``: image files larger than that are stored resized (shorter side =
    that, JPEG quality 95), which doubles the loader's decode rate at 256 px
    (``benchmarks/RESULTS.md``) at the cost of the crops' detail; default: byte for byte.
    ``verify``: every image file is decoded before it is copied (a conversion is verified
    or not throughout: the plan records it). ``holdout``: ``data.holdout`` (a folder set
    without a test folder).
    """
    from tqdm import tqdm

    cap = _checked_cap(shard_size, workers, shorter_side, max_examples)
    if holdout is not None and not 0 < holdout < 1:
        raise ShardingError(f"--holdout must be in (0, 1), e.g. 0.2, got {holdout}")
    dest = Path(dest).expanduser()
    kwargs = dict(
        root=root,
        download=download,
        image_size=image_size,
        shorter_side=shorter_side,
        verify=verify,
        holdout=holdout,
    )
    splits = {s: _open_split(src, s, **kwargs) for s in ("train", "test")}
    sizes = _sizes(src, splits, cap)
    plan = {
        "version": PLAN_VERSION,
        "source": src,
        "sizes": sizes,
        "shard_size": shard_size,
        "image_size": None if splits["train"].crop else image_size,  # rendered (synthetic)
        "shorter_side": shorter_side,
        "order_seed": SHARD_ORDER_SEED,
    } | {k: v for k, v in (("verify", verify), ("holdout", holdout)) if v}  # when given
    _check_dest(dest, plan)
    for stale in dest.glob(".*.tmp-*"):  # a killed run's unfinished shard
        stale.unlink()
    jobs, done = _jobs(dest, splits, sizes, shard_size)
    bar = tqdm(
        total=sum(sizes.values()),
        initial=done,
        desc=f"sharding {src}",
        unit="img",
        disable=not progress,
        dynamic_ncols=True,
    )
    if bad := _write_all(jobs, splits, workers=workers, bar=bar):
        raise ShardingError(
            f"{src}: cannot decode {len(bad)} image file(s), listed below; the shards that "
            "would hold them were not written (the others were): replace the files and run "
            "the same command again, or remove them and convert into an empty folder\n"
            + listing([f"{b.file}: {b.reason.removeprefix(_UNDECODED)}" for b in bad])
        )
    index_splits = {
        s: [
            Shard(
                _shard_name(s, j),
                min(shard_size, size - j * shard_size),
                (dest / _shard_name(s, j)).stat().st_size,
            )
            for j in range(-(-size // shard_size))
        ]
        for s, size in sizes.items()
    }
    first = splits["train"]
    if first.copies and not verify:
        print(
            "note: image files were copied without decoding them (a damaged one is found when "
            f"training reads it); `vitscale data index {dest} --verify` decodes every one",
            file=sys.stderr,
        )
    return write_index(
        dest,
        classes=first.classes,
        splits=index_splits,
        multilabel=first.multilabel,
        crop=first.crop,
        source=src if shorter_side is None else f"{src} (shorter side at most {shorter_side} px)",
    )


# --------------------------------------------------------------------------- indexing


def _scan(path: str, *, verify: bool = False):
    from .read import scan_shard

    return scan_shard(Path(path), verify=verify)


def _matches(name: str, pattern: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(name, p) for p in expand_pattern(pattern))


def _warn_if_sorted(scans: list, num_classes: int) -> None:
    """Shards written class by class shuffle poorly in windows of a few shards
    (``benchmarks/shuffle_quality.py``): say so while it is cheap to re-shard."""
    distinct = [len({labels[0] for labels in s.labels if labels}) for s in scans]
    iid = [num_classes * (1 - (1 - 1 / num_classes) ** s.nsamples) for s in scans]
    if not distinct or float(np.median(distinct)) >= 0.5 * float(np.median(iid)):
        return
    print(
        f"warning: the train shards hold few classes each (median {np.median(distinct):.0f}, "
        f"a random order would give {np.median(iid):.0f}): they look written class by class, "
        "and the stream's windows of data.shuffle_shards shards would then give batches of "
        "only that many shards' classes; re-shard them with `vitscale data shard` (random "
        "order), or raise data.shuffle_shards (benchmarks/shuffle_quality.py)",
        file=sys.stderr,
    )


def index_shards(
    folder: str | Path,
    *,
    train: str = "*.tar",
    test: str = "{test,val}*.tar",
    classes_file: str | Path | None = None,
    workers: int = 1,
    verify: bool = False,
    progress: bool = True,
) -> Path:
    """Scan the ``.tar`` shards in ``folder`` and write its ``index.json``: shards matching
    ``test`` form the test split, the other ones matching ``train`` the train split;
    ``verify``: every image is decoded too."""
    from tqdm import tqdm

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ShardingError(f"{folder} is not a folder")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".tar") and p.is_file())
    split_of = {}
    for name in names:
        if _matches(name, test):
            split_of[name] = "test"
        elif _matches(name, train):
            split_of[name] = "train"
    if not any(v == "train" for v in split_of.values()):
        raise ShardingError(f"{folder}: no .tar shard matches the train pattern {train!r}")
    shards = list(split_of)
    scan = functools.partial(_scan, verify=verify)
    with contextlib.ExitStack() as stack:
        if workers > 1:
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(workers))
            scans: Iterable = pool.imap(scan, [str(folder / n) for n in shards], chunksize=1)
        else:
            scans = map(scan, [str(folder / n) for n in shards])
        scans = list(
            tqdm(
                scans,
                total=len(shards),
                desc=f"indexing {folder}",
                unit="shard",
                disable=not progress,
            )
        )
    problems = [p for s in scans for p in s.problems]
    empty = [n for n, s in zip(shards, scans, strict=True) if not s.problems and s.nsamples == 0]
    problems += [f"shard {folder / n}: holds no examples" for n in empty]
    if problems:
        total = len(problems) + sum(s.unlisted for s in scans)
        undecodable = (
            " (images that do not decode: rewrite those examples, or index without --verify "
            "and let data.skip_bad_samples replace them in training)"
            if verify
            else ""
        )
        raise DatasetFormatError(
            f"{folder}: {total} problem(s) in the shards, listed below; nothing was indexed"
            f"{undecodable}\n" + listing(problems, total=total)
        )
    values = [v for s in scans for labels in s.labels for v in labels]
    if classes_file is not None:
        classes = [c.strip() for c in Path(classes_file).read_text().splitlines() if c.strip()]
    elif all(isinstance(v, int) for v in values):
        classes = [str(i) for i in range(max(values) + 1)]
    elif all(isinstance(v, str) for v in values):
        classes = sorted(set(values))
    else:
        raise ShardingError(
            f"{folder}: labels mix class indices and class names; give --classes FILE (one "
            "class name per line, line i = class index i)"
        )
    if not classes:
        raise ShardingError(f"{folder}: no class found (empty --classes file?)")
    known = set(classes)
    for name, scan in zip(shards, scans, strict=True):
        for labels in scan.labels:
            for v in labels:
                bad = (isinstance(v, int) and not 0 <= v < len(classes)) or (
                    isinstance(v, str) and v not in known
                )
                if bad:
                    raise DatasetFormatError(
                        f"shard {folder / name}: label {v!r} is outside the class list "
                        f"({len(classes)} classes{' from ' + str(classes_file) if classes_file else ''})"
                    )
    splits: dict[str, list[Shard]] = {}
    for name, scan in zip(shards, scans, strict=True):
        splits.setdefault(split_of[name], []).append(Shard(name, scan.nsamples, scan.filesize))
    multilabel = any(len(labels) > 1 for s in scans for labels in s.labels)
    _warn_if_sorted(
        [s for n, s in zip(shards, scans, strict=True) if split_of[n] == "train"], len(classes)
    )
    return write_index(
        folder,
        classes=classes,
        splits=splits,
        multilabel=multilabel,
        crop=True,
        source=f"indexed by vitscale data index ({INDEX_FILE} of {folder})",
    )
