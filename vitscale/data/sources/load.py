"""Real datasets through torchvision's own loaders, checked (:mod:`.files`) before they
are read. Each loader turns one official split ("train" or "test") of a source into an
:class:`ImageSource`: torchvision's dataset (or ImageFolder) with the paper transforms,
plus the labels as one array so subsets and few-shot samples never decode an image. A
file that is there but unreadable (a broken pickle, MATLAB file or annotation line, labels
out of range, an image listed but absent or undecodable) is an error naming it; an image
that does not decode is named with every other one of its split that does not either.
Nothing is downloaded unless ``download=True``.

A folder set (``imagefolder:``, ``multilabel:``) without ``test/`` or ``val/`` holds out a
fixed part of ``train/`` as its test split (``data.holdout``, :func:`held_out`).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import UnidentifiedImageError
from scipy.io.matlab import MatReadError
from torch import Tensor
from torch.utils.data import Dataset, Subset
from torchvision import datasets

from ...config.schema import DataConfig
from ...errors import listing
from ..registry import LABEL_FILE, SOURCES, DatasetFormatError, decode_reason
from .files import CIFAR_CLASSES, PETS_SPLIT, malformed, missing, require, required_paths

Transform = Callable[[object], Tensor]

# What torchvision's readers raise on a file that is there but is not what they expect.
_UNREADABLE = (
    pickle.UnpicklingError,
    EOFError,
    KeyError,
    IndexError,
    ValueError,
    TypeError,
    AttributeError,
    MatReadError,
)
# How long a split's files are decoded, once one did not, to name every other one that
# does not either (a small set whole; a large one in part, saying how far it got).
BAD_FILE_SCAN_S = 60.0


class ImageSource(Dataset):
    """One split of a real dataset: (image tensor, target) pairs.

    ``targets_of(indices)`` returns the (primary) class of examples without loading them.
    Multi-label sources return float multi-hot targets over ``classes``: the image's
    folder class plus its further labels from the label file. ``files[i]``, when the
    source reads one file per image, names it in the error if the image does not decode,
    with every other file of ``scanned`` (default ``files``; a held-out split: all of
    train/) that does not either.
    """

    selection = None  # only a sharded set records which examples it selected

    def __init__(
        self,
        *,
        name: str,
        images: Dataset,
        labels: np.ndarray,
        classes: list[str],
        extra_labels: list[tuple[int, ...]] | None = None,
        files: Sequence[str | Path] | None = None,
        scanned: Sequence[str | Path] | None = None,
    ) -> None:
        self.name = name
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        self.classes = list(classes)
        self.extra_labels = extra_labels
        self.multilabel = extra_labels is not None
        self.files = files
        self.scanned = files if scanned is None else scanned

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.labels)

    def targets_of(self, indices: np.ndarray) -> np.ndarray:
        return self.labels[np.asarray(indices, dtype=np.int64)]

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        try:
            image, label = self.images[index]
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            raise DatasetFormatError(self._undecodable(index, e)) from e
        if not self.multilabel:
            return image, torch.tensor(label, dtype=torch.int64)
        target = torch.zeros(self.num_classes)
        target[[label, *self.extra_labels[index]]] = 1.0
        return image, target

    def __repr__(self) -> str:
        return f"ImageSource({self.name!r}, n={len(self)}, classes={self.num_classes})"

    def _undecodable(self, index: int, error: BaseException) -> str:
        """The error for an image that does not decode: it and every other file of
        ``scanned`` that does not either (decoded as the loader does, for at most
        :data:`BAD_FILE_SCAN_S`), each with the reason alone, so one failed run names
        them all."""
        if self.files is None:
            return f"{self.name}: cannot decode image {index}: {decode_reason(error)}"
        known = {str(self.files[index]): decode_reason(error)}
        bad, checked = undecodable(self.scanned, known=known, seconds=BAD_FILE_SCAN_S)
        partly = (
            f" (in the {checked:,} of {len(self.scanned):,} files checked in "
            f"{BAD_FILE_SCAN_S:.0f} s; `vitscale data shard {self.name} DEST --verify` checks "
            "them all)"
            if checked < len(self.scanned)
            else ""
        )
        return bad_files_error(self.name, bad, partly)


def undecodable(
    files: Sequence[str | Path],
    *,
    known: dict[str, str] | None = None,
    seconds: float | None = None,
) -> tuple[dict[str, str], int]:
    """``({file: why it does not decode}, files checked)``: each file decoded as the loader
    decodes it (PIL, to RGB), for at most ``seconds``; ``known`` are already found."""
    from PIL import Image

    bad, checked = dict(known or {}), 0
    deadline = None if seconds is None else time.monotonic() + seconds
    for file in map(str, files):
        if deadline is not None and time.monotonic() > deadline:
            break
        checked += 1
        try:
            if file not in bad:
                with Image.open(file) as im:
                    im.convert("RGB")
        except (OSError, SyntaxError, ValueError) as e:
            bad[file] = decode_reason(e)
    return bad, checked


def bad_files_error(name: str, bad: dict[str, str], partly: str = "") -> str:
    """The one message naming every image of ``name`` that does not decode."""
    return (
        f"{name}: cannot decode {len(bad)} image file(s){partly}, listed below; "
        "replace them from the original archive, or remove them\n"
        + listing([f"{f}: {reason}" for f, reason in sorted(bad.items())])
    )


def _require_files(name: str, folder: Path, files: Sequence[Path]) -> None:
    """Every image an annotation file lists must be there (one stat each, no decoding)."""
    absent = [f for f in files if not f.is_file()]
    if absent:
        raise missing(
            name,
            folder,
            f"{len(absent)} of the {len(files)} listed images are missing "
            f"(first: {absent[0].name})",
        )


def _check_labels(name: str, where: Path, labels: np.ndarray, num_classes: int, base: int) -> None:
    """Labels must be class indices ``0 .. num_classes - 1`` (``base`` is the file's
    numbering, for the message)."""
    labels = np.asarray(labels)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)][0]
        raise malformed(
            name,
            where,
            f"label {bad + base} is outside {base}..{num_classes - 1 + base} "
            f"({num_classes} classes)",
        )


# --------------------------------------------------------------------------- CIFAR


def _presence_only(cls: type[datasets.CIFAR10]) -> type[datasets.CIFAR10]:
    """The torchvision class with per-file MD5s dropped (the archive's MD5 stays)."""
    return type(
        cls.__name__,
        (cls,),
        {
            "train_list": [[f, None] for f, _ in cls.train_list],
            "test_list": [[f, None] for f, _ in cls.test_list],
            "meta": {**cls.meta, "md5": None},
        },
    )


_CIFAR = {name: _presence_only(cls) for name, cls in CIFAR_CLASSES.items()}


def _pickle_has(path: Path, keys: tuple[str, ...]) -> bool:
    """Whether ``path`` unpickles (as the CIFAR loader does) to a dict with ``keys``."""
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
    except Exception:  # anything at all: this only picks the file to name in an error
        return False
    return isinstance(entry, dict) and all(k in entry for k in keys)


def _cifar(name: str, split: str, root: Path, transform: Transform, download: bool) -> ImageSource:
    cls = _CIFAR[name]
    folder = root / cls.base_folder
    if not download:
        require(name, root, required_paths(name, split))
    labels_key = "labels" if name == "cifar10" else "fine_labels"
    try:
        ds = cls(str(root), train=split == "train", transform=transform, download=download)
    except _UNREADABLE as e:
        files = [f for f, _ in (cls.train_list if split == "train" else cls.test_list)]
        keys = {f: ("data", labels_key) for f in files} | {cls.meta["filename"]: (cls.meta["key"],)}
        bad = next((f for f, k in keys.items() if not _pickle_has(folder / f, k)), None)
        raise malformed(
            name,
            folder / bad if bad else folder,
            f"cannot read the pickled batches ({e!r}): each must be a dict with 'data' "
            f"(N x 3072 uint8) and '{labels_key}', and {cls.meta['filename']} must hold "
            f"'{cls.meta['key']}'",
        ) from e
    num_classes = SOURCES[name].num_classes
    if len(ds.data) != len(ds.targets):
        raise malformed(
            name,
            folder,
            f"{len(ds.data)} images but {len(ds.targets)} labels in the {split} batches",
        )
    if len(ds.classes) != num_classes:
        raise malformed(
            name,
            folder / cls.meta["filename"],
            f"{len(ds.classes)} class names under '{cls.meta['key']}', expected {num_classes}",
        )
    _check_labels(name, folder, np.asarray(ds.targets), num_classes, base=0)
    return ImageSource(name=name, images=ds, labels=np.asarray(ds.targets), classes=ds.classes)


# --------------------------------------------------------------------------- Pets, Flowers


def _pets(name: str, split: str, root: Path, transform: Transform, download: bool) -> ImageSource:
    ann = root / required_paths(name, split)[1]
    if not download:
        require(name, root, required_paths(name, split))
    try:
        ds = datasets.OxfordIIITPet(
            str(root),
            split=PETS_SPLIT[split],
            target_types="category",
            transform=transform,
            download=download,
        )
    except ValueError as e:
        raise malformed(
            name,
            ann,
            f"cannot parse ({e}); expected lines '<image id> <class 1-37> <species 1-2> <breed id>'",
        ) from e
    num_classes = SOURCES[name].num_classes
    labels = np.asarray(ds._labels, dtype=np.int64)
    _check_labels(name, ann, labels, num_classes, base=1)
    _require_files(name, root / "oxford-iiit-pet" / "images", ds._images)
    # torchvision names only the classes that occur in this split, so a split missing a
    # class would shift every later name; name the 37 classes by index instead.
    by_label: dict[int, str] = {}
    for image, label in zip(ds._images, labels.tolist(), strict=True):
        by_label.setdefault(
            label, " ".join(p.title() for p in image.stem.rsplit("_", 1)[0].split("_"))
        )
    classes = [by_label.get(i, f"class {i + 1}") for i in range(num_classes)]
    return ImageSource(name=name, images=ds, labels=labels, classes=classes, files=ds._images)


class _Flowers102(datasets.Flowers102):
    """torchvision's Flowers-102 with presence instead of MD5 checks of the extracted
    files (the images folder and both MATLAB files; the archive need not be kept)."""

    def _check_integrity(self) -> bool:
        return self._images_folder.is_dir() and all(
            (self._base_folder / self._file_dict[k][0]).is_file() for k in ("label", "setid")
        )


def _flowers(
    name: str, split: str, root: Path, transform: Transform, download: bool
) -> ImageSource:
    folder = root / "flowers-102"
    if not download:
        require(name, root, required_paths(name, split))
    try:
        ds = _Flowers102(str(root), split=split, transform=transform, download=download)
    except _UNREADABLE as e:
        raise malformed(
            name,
            f"{folder}/{{imagelabels,setid}}.mat",
            f"cannot read ({e!r}); expected MATLAB files with 'labels' (a class 1-102 per "
            "image) and 'trnid'/'valid'/'tstid' (1-based image ids)",
        ) from e
    labels = np.asarray(ds._labels, dtype=np.int64)
    _check_labels(name, folder / "imagelabels.mat", labels, SOURCES[name].num_classes, base=1)
    _require_files(name, folder / "jpg", ds._image_files)
    return ImageSource(
        name=name, images=ds, labels=labels, classes=ds.classes, files=ds._image_files
    )


# --------------------------------------------------------------------------- folders


def _folder(name: str, root: Path, split_dir: str, transform: Transform) -> datasets.ImageFolder:
    train, folder = root / "train", root / split_dir
    if not folder.is_dir():
        raise missing(name, root, f"no {split_dir}/ folder")
    try:
        ds = datasets.ImageFolder(str(folder), transform=transform)
    except FileNotFoundError as e:
        if not any(p.is_dir() for p in folder.iterdir()) and any(folder.iterdir()):
            detail = f"{folder} holds files but no class folders (sort the images into one folder per class)"
        else:
            detail = f"no images in {folder} ({e})"
        raise missing(name, root, detail) from e
    if split_dir != "train":
        if not train.is_dir():
            raise missing(name, root, "no train/ folder")
        train_classes = sorted(p.name for p in train.iterdir() if p.is_dir())
        if ds.classes != train_classes:
            odd = sorted(set(ds.classes) ^ set(train_classes))
            raise malformed(
                name,
                folder,
                f"must have the same class folders as {train}; these are in only one of "
                f"them: {', '.join(odd[:10])}",
            )
    return ds


def test_dir(name: str, root: Path) -> str | None:
    """The folder of the test split: ``test/``, else ``val/`` (ImageNet: always ``val/``),
    else None (held out of ``train/``)."""
    if name == "imagenet":
        return "val"
    return next((d for d in ("test", "val") if (root / d).is_dir()), None)


def held_out(
    files: Sequence[str], labels: np.ndarray, *, train: Path, fraction: float
) -> np.ndarray:
    """The sorted indices of the examples a folder set without a test split holds out as
    one: in each class with 2 or more, ``round(fraction * n)`` of its files (at least 1,
    at most n - 1: every such class is in both splits), those first in the order of the
    SHA-256 of their path under ``train`` (the same choice on every machine, whatever
    order its file system lists them in)."""
    digest = [
        hashlib.sha256(Path(f).relative_to(train).as_posix().encode()).digest() for f in files
    ]
    order = sorted(range(len(files)), key=lambda i: (labels[i], digest[i]))
    held: list[int] = []
    for _, group in itertools.groupby(order, key=labels.__getitem__):
        rows = list(group)
        if len(rows) >= 2:
            held += rows[: min(len(rows) - 1, max(1, round(fraction * len(rows))))]
    return np.sort(np.asarray(held, dtype=np.int64))


_SAID: set[str] = set()  # notes this process has printed


def _split(
    name: str, split: str, root: Path, transform: Transform, holdout: float | None
) -> tuple[datasets.ImageFolder, str, np.ndarray | None]:
    """``(the ImageFolder a split reads, its folder, the rows of it that are the split or
    None for all)``. Without a test folder the held-out part of train/ is said once;
    ``holdout`` None: data.holdout's default."""
    folder = test_dir(name, root)
    if folder is not None:
        split_dir = "train" if split == "train" else folder
        return _folder(name, root, split_dir, transform), split_dir, None
    ds = _folder(name, root, "train", transform)
    fraction = DataConfig().holdout if holdout is None else holdout
    test = held_out(_files(ds), np.asarray(ds.targets), train=root / "train", fraction=fraction)
    note = (
        f"note: {name} has no test/ or val/ folder: its test split is {len(test):,} of its "
        f"{len(ds):,} train/ images (data.holdout: {fraction:g} per class), chosen by a hash "
        "of each path: the same on every machine"
    )
    if note not in _SAID and os.environ.get("RANK", "0") == "0":  # once, by the first process
        print(note, file=sys.stderr)
    _SAID.add(note)
    rows = np.zeros(len(ds), dtype=bool)
    rows[test] = True
    return ds, "train", np.flatnonzero(rows if split == "test" else ~rows)


def _files(ds: datasets.ImageFolder) -> list[str]:
    return [p for p, _ in ds.samples]


def _source(
    name: str,
    ds: datasets.ImageFolder,
    rows: np.ndarray | None,
    extra: list[tuple[int, ...]] | None = None,
) -> ImageSource:
    """An ImageFolder (its ``rows``; None: all) as an :class:`ImageSource`."""
    classes, files, labels = ds.classes, _files(ds), np.asarray(ds.targets, dtype=np.int64)
    scanned = files
    if rows is not None:
        ds, files, labels = Subset(ds, rows.tolist()), [files[i] for i in rows], labels[rows]
        extra = None if extra is None else [extra[i] for i in rows]
    return ImageSource(
        name=name,
        images=ds,
        labels=labels,
        classes=classes,
        extra_labels=extra,
        files=files,
        scanned=scanned,
    )


def _imagefolder(
    name: str, split: str, root: Path, transform: Transform, holdout: float | None
) -> ImageSource:
    ds, _, rows = _split(name, split, root, transform, holdout)
    return _source(name, ds, rows)


def _multilabel(
    name: str, split: str, root: Path, transform: Transform, holdout: float | None
) -> ImageSource:
    ds, split_dir, rows = _split(name, split, root, transform, holdout)
    label_file = root / LABEL_FILE
    if not label_file.is_file():
        raise missing(name, root, f"no {LABEL_FILE}")
    position = {Path(p).relative_to(root).as_posix(): i for i, (p, _) in enumerate(ds.samples)}
    extra: list[tuple[int, ...]] = [()] * len(ds)
    for lineno, line in enumerate(label_file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        path, tab, labels = line.partition("\t")
        where = f"{label_file}:{lineno}"
        if not tab:
            raise malformed(name, where, "expected '<path><TAB><label>,<label>,...'")
        if Path(path).parts[:1] != (split_dir,):
            continue
        if path not in position:
            raise malformed(name, where, f"no image {root / path}")
        names = [x.strip() for x in labels.split(",") if x.strip()]
        unknown = [x for x in names if x not in ds.class_to_idx]
        if unknown:
            raise malformed(
                name,
                where,
                f"unknown label {unknown[0]!r}; labels are the class folder names of "
                f"{root / 'train'}",
            )
        extra[position[path]] = tuple(ds.class_to_idx[x] for x in names)
    return _source(name, ds, rows, extra)


def load_source(
    name: str,
    source: str,
    split: str,
    *,
    root: Path,
    transform: Transform,
    download: bool,
    holdout: float | None = None,
) -> ImageSource:
    """The official ``split`` ("train" or "test") of a real ``source`` found under ``root``;
    ``holdout``: ``data.holdout`` (a folder set without a test folder)."""
    if download and not SOURCES[source].downloadable:
        raise ValueError(
            f"{name}: cannot be downloaded automatically; {SOURCES[source].how_to_get}"
        )
    if not root.exists() and not download:
        raise missing(name, root, "nothing")
    try:
        if source in CIFAR_CLASSES:
            return _cifar(source, split, root, transform, download)
        if source == "pets":
            return _pets(source, split, root, transform, download)
        if source == "flowers102":
            return _flowers(source, split, root, transform, download)
    except RuntimeError as e:  # torchvision's own "Dataset not found or corrupted"
        raise missing(source, root, f"torchvision cannot find it ({e})") from e
    if source == "multilabel":
        return _multilabel(name, split, root, transform, holdout)
    return _imagefolder(name, split, root, transform, holdout)
