"""What can be known about a dataset without reading it, and without torch: the size of
its train split (the synthetic family, the registry's official sizes, a sharded set's
index) and what would stop a run on it before it starts. The grid validates every cell
with these, so ``vitscale grid`` on the synthetic sets never imports torch itself."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..kinds import kind_of
from .embedded import EMBEDDED
from .registry import LABEL_FILE, SOURCES, DatasetNotFoundError, default_root, parse_name
from .subsets import SubsetSpec, subset_size


def known_size(name: str) -> int | None:
    """Size of the train split when known without reading the data (synthetic tasks and
    the registry's official sizes); ``None`` for folder sources."""
    source, _ = parse_name(name)
    if source in EMBEDDED:
        return EMBEDDED[source].split_size("train")
    if source == "shards":
        from .shards.index import load_index, parse_location, split_shards

        try:
            folder, pattern = parse_location(name)
            shards = split_shards(name, load_index(name, folder), "train", pattern)
        except ValueError:  # no index here (yet): unknown, like a folder source
            return None
        return sum(s.nsamples for s in shards)
    return SOURCES[source].size("train")


def known_classes(name: str) -> int | None:
    """Classes of ``name`` when known without reading its files (the embedded worlds, the
    public sets, a sharded set's index); ``None`` for a folder set (read by the plan)."""
    try:
        source, _ = parse_name(name)
        if source in EMBEDDED:
            return EMBEDDED[source].num_classes
        if source == "shards":
            from .shards.index import load_index, parse_location

            return load_index(name, parse_location(name)[0]).num_classes
    except ValueError:  # an unknown name, no index (yet): unknown here
        return None
    return SOURCES[source].num_classes


def check_available(
    name: str, *, root: str | Path | None = None, subset: SubsetSpec = None, download: bool = False
) -> list[str]:
    """Problems that would stop a run on ``name`` before it starts, one message each:
    an unknown name, a dataset missing from ``root``, a subset larger than the split.
    Opens no image, so it is cheap enough to call for every cell of a grid."""
    try:
        source, path = parse_name(name)
    except ValueError as e:
        return [str(e)]
    if source == "shards":
        return _check_shards(name, subset)
    problems = []
    if source not in EMBEDDED and not download:
        where = (
            path if path is not None else Path(root).expanduser() if root else default_root(source)
        )
        try:
            from .sources.files import check_layout

            check_layout(name, source, where)
        except DatasetNotFoundError as e:
            problems.append(str(e))
    size = known_size(name)
    if size is not None and subset is not None:
        try:
            subset_size(size, subset)
        except ValueError as e:
            problems.append(f"{name}: {e}")
    return problems


_CHECKED: set[tuple[str, str]] = set()  # (name, index digest): shards stat-ed once per process


def _check_shards(name: str, subset: SubsetSpec) -> list[str]:
    """:func:`check_available` for a sharded set: the index, the pattern, the subset, and
    every train and test shard there with its indexed size (one ``stat`` each, once)."""
    from .shards.index import check_shards, load_index, parse_location, split_shards

    try:
        folder, pattern = parse_location(name)
        index = load_index(name, folder)
        train = split_shards(name, index, "train", pattern)
        if subset is not None:
            subset_size(sum(s.nsamples for s in train), subset)
        if (name, index.sha256) not in _CHECKED:
            test = split_shards(name, index, "test", None) if index.test_split() else ()
            check_shards(name, index, train + test)
            _CHECKED.add((name, index.sha256))
    except ValueError as e:
        return [str(e)]
    return []


# (name, its split and class folders' times): a set is walked once while no file is added
# or removed (which changes its class folder's time)
_FINGERPRINTS: dict[tuple, str] = {}


def fingerprint(name: str) -> str | None:
    """What a cell's id holds of an own dataset's content, so that a changed set makes new
    cells instead of passing for the old one: a sharded set's ``index.json`` (its SHA-256),
    a folder set's every file path with its size (``labels.tsv`` by its content), hashed;
    ``None`` for the embedded worlds (versioned by their code), the public sets (fixed
    releases) and a set that cannot be read here (:func:`vitscale.plan.plan` says so).
    File times are left out: a copy keeps its cells."""
    if kind_of(name).folder is None:
        return None
    try:
        source, path = parse_name(name)
        if source == "shards":
            from .shards.index import load_index, parse_location

            return load_index(name, parse_location(name)[0]).sha256[:16]
        tops = [p for p in sorted(path.iterdir()) if p.is_dir()]  # train/, test/: classes
        key = (name, *(d.lstat().st_mtime_ns for t in tops for d in (t, *sorted(t.iterdir()))))
        if key not in _FINGERPRINTS:
            _FINGERPRINTS[key] = _walk(path)
        return _FINGERPRINTS[key]
    except (OSError, ValueError):  # not there, not readable, a file gone mid-walk
        return None


def _walk(root: Path) -> str:
    """Every file under ``root`` (symlinked folders followed) by path and size."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root, followlinks=True, onerror=_raise):
        dirs.sort()
        for file in sorted(files):
            path = Path(folder, file)
            if not path.exists():  # a broken link (or a file gone): there, and unreadable
                said: object = "missing"
            else:
                said = path.read_bytes() if file == LABEL_FILE else path.stat().st_size
            digest.update(f"{path.relative_to(root).as_posix()}\t{said}\n".encode())
    return digest.hexdigest()[:16]


def _raise(error: OSError) -> None:
    raise error
