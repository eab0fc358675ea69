"""Sharded datasets on disk: the shard index, the ``shards:`` name, and nested subsets.

A sharded set is a folder of WebDataset tar shards (``<key>.jpg`` + ``<key>.cls`` or
``<key>.json`` per example, consecutive in the tar) and one ``index.json`` beside them::

    {"format": "vitscale-shards", "version": 1,
     "classes": ["n00004475", ...], "multilabel": true, "crop": true,
     "source": "multilabel:/data/in21k-tree",
     "splits": {"train": [{"url": "train-000000.tar", "nsamples": 5000, "filesize": 571392000}, ...],
                "test":  [...]}}

Each split's list has the fields of an indexed-WebDataset (``wids``) shard list, ``url``
relative to the folder. ``vitscale data shard`` writes it while converting;
``vitscale data index`` writes it for shards made elsewhere. The counts are what makes a
pre-training subset exact: paper Fig. 4's nested 9M/30M/90M subsets need to know how many
examples each shard holds without opening 30,000 tar files, and an epoch must have
exactly the examples the index promises (a shard whose size differs from the index is an
error before training, never a silently shorter epoch).

Names (``shards:DIR``, or a brace pattern or glob of its train shards) and subsets
(:func:`select`: whole shards in a seeded order, then a count from the next one) are as
docs/datasets.md's "Sharded datasets" says; a pattern is matched against the index, so the shard
directory is never listed.

numpy only, no torch: grid validation reads indexes without it.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...kinds import kind_of
from ...record.folder import write_text_atomic
from ..registry import DatasetFormatError, DatasetNotFoundError
from ..subsets import SeededPermutation, SubsetSpec, subset_size

INDEX_FILE = "index.json"
FORMAT = "vitscale-shards"
VERSION = 1
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp")
LABEL_EXTS = (".cls", ".json")
_GLOB = re.compile(r"[*?\[]")
_HOW = (
    "make one with `vitscale data shard SRC DEST --shard-size N` (from any supported source) "
    "or, for WebDataset shards made elsewhere, `vitscale data index DIR`"
)


@dataclass(frozen=True)
class Shard:
    """One tar file: ``url`` relative to the index's folder (or absolute)."""

    url: str
    nsamples: int
    filesize: int

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "nsamples": self.nsamples, "filesize": self.filesize}


@dataclass(frozen=True)
class ShardIndex:
    """The parsed ``index.json`` of one folder."""

    folder: Path
    classes: tuple[str, ...]
    multilabel: bool
    crop: bool  # the paper's crops (photos); False: framed images, only resized (synthetic)
    splits: dict[str, tuple[Shard, ...]]
    source: str
    sha256: str

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def path(self, shard: Shard) -> Path:
        return self.folder / shard.url

    def test_split(self) -> str | None:
        """The split evaluated as ``test``: ``test``, else ``val``, else none."""
        return next((s for s in ("test", "val") if self.splits.get(s)), None)


def parse_location(name: str) -> tuple[Path, str | None]:
    """``(folder, pattern)`` of a ``shards:`` name: the folder holding ``index.json`` and,
    when the name ends in a shard pattern, that pattern (a basename with braces or globs,
    or one ``.tar`` file)."""
    text = name.partition(":")[2]
    if not text:
        raise ValueError(f"dataset {name!r}: give the folder, e.g. 'shards:/data/in21k'")
    if re.match(r"^[a-z][a-z0-9+.-]*://", text):
        raise ValueError(
            f"dataset {name!r}: shards are read from a file system path (a cluster file "
            "system, or an object store mounted with e.g. s3fs or rclone), not a URL"
        )
    path = Path(text).expanduser()
    if "{" in path.name or _GLOB.search(path.name) or path.name.endswith(".tar"):
        return path.parent, path.name
    return path, None


def expand_pattern(pattern: str) -> list[str]:
    """Brace-expand ``pattern`` (``train-{000000..001023}.tar``) with the ``braceexpand``
    package WebDataset uses for the same notation."""
    from braceexpand import braceexpand

    return list(braceexpand(pattern))


def _shards(entries: Any, where: str) -> tuple[Shard, ...]:
    if not isinstance(entries, list):
        raise ValueError(f"{where} must be a list of shards")
    out = []
    for i, e in enumerate(entries):
        try:
            shard = Shard(str(e["url"]), int(e["nsamples"]), int(e["filesize"]))
        except (TypeError, KeyError, ValueError):
            raise ValueError(
                f"{where}[{i}] must be {{'url': str, 'nsamples': int, 'filesize': int}}, got {e!r}"
            ) from None
        if shard.nsamples < 1:
            raise ValueError(f"{where}[{i}] ({shard.url}) holds no examples")
        out.append(shard)
    return tuple(out)


@functools.lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int) -> ShardIndex:
    del mtime_ns, size  # cache keys: a rewritten index is read again
    file = Path(path)
    blob = file.read_bytes()
    try:
        data = json.loads(blob)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f'not a {FORMAT} index (no "format": "{FORMAT}")')
        if data.get("version") != VERSION:
            raise ValueError(
                f"index version {data.get('version')!r}; this vitscale reads {VERSION}"
            )
        classes = data["classes"]
        if (
            not isinstance(classes, list)
            or not classes
            or not all(isinstance(c, str) for c in classes)
        ):
            raise ValueError("'classes' must be a non-empty list of class names")
        if len(set(classes)) != len(classes):
            raise ValueError("'classes' names a class twice")
        splits = data["splits"]
        if not isinstance(splits, dict) or not splits:
            raise ValueError("'splits' must map split names to shard lists")
        parsed = {s: _shards(v, f"splits.{s}") for s, v in splits.items()}
        return ShardIndex(
            folder=file.parent,
            classes=tuple(classes),
            multilabel=bool(data.get("multilabel", False)),
            crop=bool(data.get("crop", True)),
            splits=parsed,
            source=str(data.get("source", "")),
            sha256=hashlib.sha256(blob).hexdigest(),
        )
    except (json.JSONDecodeError, KeyError, ValueError) as e:
        detail = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        raise DatasetFormatError(f"{file}: cannot read the shard index: {detail}; {_HOW}") from e


def load_index(name: str, folder: Path) -> ShardIndex:
    """The index of ``folder`` (cached while the file is unchanged)."""
    file = folder / INDEX_FILE
    try:
        st = file.stat()
    except FileNotFoundError:
        what = "nothing" if not folder.exists() else f"no {INDEX_FILE}"
        raise DatasetNotFoundError(
            f"{name}: {what} under {folder.absolute()}; expected WebDataset tar shards and "
            f"{INDEX_FILE} (their shard index); {_HOW}"
        ) from None
    return _load(str(file.absolute()), st.st_mtime_ns, st.st_size)


def split_shards(
    name: str, index: ShardIndex, split: str, pattern: str | None
) -> tuple[Shard, ...]:
    """The shards of ``split`` (``train`` or ``test``), narrowed to ``pattern`` for train."""
    if split not in ("train", "test"):
        raise ValueError(
            f"{name}: sharded sets have a train and a test split; {split!r} is not one "
            "(held-out slices for fine-tuning come from small transfer sets)"
        )
    if split == "test":
        which = index.test_split()
        if which is None:
            raise DatasetNotFoundError(
                f"{name}: the index at {index.folder} has no test (or val) split; upstream "
                "evaluation reads it: shard a held-out set too, or set eval.upstream.examples: 0"
            )
        return index.splits[which]
    train = index.splits.get("train")
    if not train:
        raise DatasetNotFoundError(f"{name}: the index at {index.folder} has no train split")
    if pattern is None:
        return train
    by_url = {s.url: s for s in train}
    if _GLOB.search(pattern):
        names = expand_pattern(pattern)
        matched = [s for s in train if any(fnmatch.fnmatchcase(s.url, p) for p in names)]
        if not matched:
            raise DatasetNotFoundError(
                f"{name}: no train shard in {index.folder / INDEX_FILE} matches {pattern!r}"
            )
        return tuple(matched)
    urls = expand_pattern(pattern)
    unknown = [u for u in urls if u not in by_url]
    if unknown:
        raise DatasetNotFoundError(
            f"{name}: {len(unknown)} of the {len(urls)} shards the pattern names are not in the "
            f"train split of {index.folder / INDEX_FILE} (first: {unknown[0]}); "
            f"the index lists {len(train)} train shards ({train[0].url} ... {train[-1].url})"
        )
    if len(set(urls)) != len(urls):
        raise ValueError(f"{name}: the pattern names a shard twice")
    return tuple(by_url[u] for u in urls)


def check_shards(name: str, index: ShardIndex, shards: tuple[Shard, ...]) -> None:
    """Every shard is there with the size the index recorded (one ``stat`` each, nothing
    read): a missing shard and a truncated or rewritten one are errors naming the shard,
    before any training step."""
    missing, resized = [], []
    for shard in shards:
        try:
            size = os.stat(index.path(shard)).st_size
        except FileNotFoundError:
            missing.append(shard)
            continue
        if size != shard.filesize:
            resized.append((shard, size))
    if missing:
        raise DatasetNotFoundError(
            f"{name}: {len(missing)} of the {len(shards)} shards are missing (first: "
            f"{index.path(missing[0])}); restore them, or re-index the folder without them "
            "(`vitscale data index`) to train on what is there"
        )
    if resized:
        shard, size = resized[0]
        raise DatasetFormatError(
            f"{name}: shard {index.path(shard)} is {size:,} bytes but the index recorded "
            f"{shard.filesize:,} ({len(resized)} shard(s) differ): truncated, or rewritten "
            "since it was indexed; restore it, or re-index with `vitscale data index`"
        )


@dataclass(frozen=True)
class Selection:
    """The examples of a split or subset: the first ``takes[j]`` examples of ``shards[j]``,
    in this order; ``record`` describes it exactly for ``config.json``."""

    shards: tuple[Shard, ...]
    takes: np.ndarray
    record: dict[str, Any]

    @property
    def num_examples(self) -> int:
        return int(self.takes.sum())


def _digest(shards: tuple[Shard, ...], takes: np.ndarray) -> str:
    lines = "".join(f"{s.url}\t{t}\n" for s, t in zip(shards, takes.tolist(), strict=True))
    return hashlib.sha256(lines.encode()).hexdigest()


def select(
    index: ShardIndex,
    shards: tuple[Shard, ...],
    *,
    split: str,
    subset: SubsetSpec,
    seed: int,
    pattern: str | None = None,
) -> Selection:
    """The examples ``subset`` selects from ``shards`` (module docstring: whole shards in
    a seeded order, then a count from the next one). ``None``: every shard, index order."""
    counts = np.asarray([s.nsamples for s in shards], dtype=np.int64)
    total = int(counts.sum())
    if subset is None:
        order = np.arange(len(shards))
        takes = counts.copy()
        rule = "every shard, in index order"
    else:
        m = subset_size(total, subset)
        order = SeededPermutation(len(shards), seed)(np.arange(len(shards)))
        ends = np.cumsum(counts[order])
        used = int(np.searchsorted(ends, m, side="left")) + 1  # shards needed to reach m
        order = order[:used]
        takes = counts[order].copy()
        takes[-1] -= int(ends[used - 1]) - m
        rule = (
            "train shards in the order of SeededPermutation(num_shards, seed), whole shards "
            "while they fit, then the first examples (tar order) of the next one"
        )
    chosen = tuple(shards[i] for i in order.tolist())
    last = chosen[-1]
    record = {
        "index": str((index.folder / INDEX_FILE).absolute()),
        "index_sha256": index.sha256,
        "split": split,
        "pattern": pattern,
        "rule": rule,
        "seed": seed if subset is not None else None,
        "shards": len(chosen),
        "of_shards": len(shards),
        "examples": int(takes.sum()),
        "of_examples": total,
        "last_shard": {"url": last.url, "take": int(takes[-1]), "nsamples": last.nsamples},
        "sha256": _digest(chosen, takes),
    }
    return Selection(chosen, takes, record)


def write_index(
    folder: Path,
    *,
    classes: list[str],
    splits: dict[str, list[Shard]],
    multilabel: bool,
    crop: bool,
    source: str,
) -> Path:
    """Write ``folder/index.json`` atomically (a reader never sees half of it)."""
    head = {
        "format": FORMAT,
        "version": VERSION,
        "source": source,
        "multilabel": multilabel,
        "crop": crop,
        "classes": list(classes),
    }
    # One line per key and per shard: readable, and diffable when a shard changes.
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    blocks = [
        f"  {json.dumps(split)}: [\n"
        + ",\n".join(f"   {json.dumps(x.as_dict())}" for x in shards)
        + "\n  ]"
        for split, shards in splits.items()
    ]
    text = "{\n" + "\n".join(lines) + '\n "splits": {\n' + ",\n".join(blocks) + "\n }\n}\n"
    write_text_atomic(folder / INDEX_FILE, text)
    return folder / INDEX_FILE


def describe(
    name: str, *, subset: SubsetSpec = None, seed: int = 0, shards: bool = False
) -> dict[str, Any]:
    """``vitscale data list shards:...``: the index's splits and classes, and the
    selection ``subset`` makes with ``seed`` (with ``shards``, its (shard, count) list)."""
    if kind_of(name).folder != "shards":
        raise ValueError(
            f"data list NAME describes a sharded set (shards:/path); {name!r} is not one "
            "(vitscale data list shows every dataset)"
        )
    folder, pattern = parse_location(name)
    index = load_index(name, folder)
    train = split_shards(name, index, "train", pattern)
    chosen = select(index, train, split="train", subset=subset, seed=seed, pattern=pattern)
    row = {
        "name": name,
        "index": str(folder / INDEX_FILE),
        "source": index.source,
        "num_classes": index.num_classes,
        "multilabel": index.multilabel,
        "crop": index.crop,
        "splits": {
            s: {
                "shards": len(v),
                "examples": sum(x.nsamples for x in v),
                "bytes": sum(x.filesize for x in v),
            }
            for s, v in index.splits.items()
        },
        "subset": subset,
        "seed": seed,
        "selection": chosen.record,
    }
    if shards:
        row["selected"] = [
            {"url": s.url, "take": int(t)} for s, t in zip(chosen.shards, chosen.takes, strict=True)
        ]
    return row


def format_description(row: dict[str, Any]) -> str:
    kind = "multi-label" if row["multilabel"] else "single-label"
    lines = [row["name"], f"    {row['num_classes']:,} classes ({kind}); from {row['source']}"]
    for s, v in row["splits"].items():
        lines.append(
            f"    {s}: {v['examples']:,} examples in {v['shards']:,} shards "
            f"({v['bytes'] / 1e9:.2f} GB)"
        )
    r = row["selection"]
    what = f"subset {row['subset']} (seed {row['seed']})" if row["subset"] else "train (whole)"
    lines.append(
        f"    {what}: {r['examples']:,} examples from {r['shards']:,} of {r['of_shards']:,} "
        f"shards, the last ({r['last_shard']['url']}) taking {r['last_shard']['take']:,} of "
        f"{r['last_shard']['nsamples']:,}; sha256 {r['sha256'][:16]}"
    )
    lines += [f"      {s['url']}\t{s['take']}" for s in row.get("selected", [])]
    return "\n".join(lines)
