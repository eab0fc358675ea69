"""Real datasets through torchvision's own loaders, checked before they are read.

Each loader turns one official split ("train" or "test") of a source in
:data:`~vitscale.data.registry.SOURCES` into an :class:`ImageSource`: torchvision's
dataset (or ImageFolder) with the paper transforms, plus the labels as one array so
subsets and few-shot samples never decode an image. Before torchvision runs, the layout is
checked, so a missing dataset is a :class:`DatasetNotFoundError` naming the path, what
belongs there and how to get it, and a broken file is a :class:`DatasetFormatError` naming
the file. Nothing is downloaded unless ``download=True``.

Files are checked for presence, not checksums (torchvision's CIFAR and Flowers loaders
compare MD5 sums of the extracted files, which rejects re-packed copies); a download still
verifies the archive's checksum.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset
from torchvision import datasets

from .registry import LABEL_FILE, SOURCES, DatasetFormatError, DatasetNotFoundError

__all__ = ["ImageSource", "load_source", "required_paths", "check_layout"]

Transform = Callable[[object], Tensor]


class ImageSource(Dataset):
    """One split of a real dataset: (image tensor, target) pairs.

    ``targets_of(indices)`` returns the (primary) class of examples without loading them.
    Multi-label sources return float multi-hot targets over ``classes``: the image's
    folder class plus its further labels from the label file.
    """

    def __init__(
        self,
        *,
        name: str,
        images: Dataset,
        labels: np.ndarray,
        classes: list[str],
        extra_labels: list[tuple[int, ...]] | None = None,
    ) -> None:
        self.name = name
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        self.classes = list(classes)
        self.extra_labels = extra_labels
        self.multilabel = extra_labels is not None

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.labels)

    def targets_of(self, indices: np.ndarray) -> np.ndarray:
        return self.labels[np.asarray(indices, dtype=np.int64)]

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        image, label = self.images[index]
        if not self.multilabel:
            return image, torch.tensor(label, dtype=torch.int64)
        target = torch.zeros(self.num_classes)
        target[[label, *self.extra_labels[index]]] = 1.0
        return image, target

    def __repr__(self) -> str:
        return f"ImageSource({self.name!r}, n={len(self)}, classes={self.num_classes})"


def _missing(name: str, root: Path, detail: str) -> DatasetNotFoundError:
    info = SOURCES[name.partition(":")[0]]
    return DatasetNotFoundError(
        f"{name}: {detail} under {root}; expected {info.expected} there. To get it: "
        f"{info.how_to_get}."
    )


def _require(name: str, root: Path, paths: list[str]) -> None:
    absent = [p for p in paths if not (root / p).exists()]
    if absent:
        raise _missing(name, root, f"missing {', '.join(absent)}")


def required_paths(source: str, split: str) -> list[str]:
    """Files and folders (relative to root) that the ``split`` of ``source`` reads."""
    if source in _CIFAR:
        cls = _CIFAR[source]
        files = [f for f, _ in (cls.train_list if split == "train" else cls.test_list)]
        return [f"{cls.base_folder}/{f}" for f in [*files, cls.meta["filename"]]]
    if source == "pets":
        return ["oxford-iiit-pet/images", f"oxford-iiit-pet/annotations/{_PETS_SPLIT[split]}.txt"]
    if source == "flowers102":
        return ["flowers-102/jpg", "flowers-102/imagelabels.mat", "flowers-102/setid.mat"]
    if source == "imagenet":
        return ["train", "val"]
    return ["train"] + ([LABEL_FILE] if source == "multilabel" else [])


def check_layout(name: str, source: str, root: Path) -> None:
    """Raise :class:`DatasetNotFoundError` unless both splits' files are under ``root``
    (cheap: nothing is opened, so grid validation can call it for ImageNet)."""
    if not root.exists():
        raise _missing(name, root, "nothing")
    _require(name, root, sorted({p for split in ("train", "test") for p in required_paths(source, split)}))


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


_CIFAR = {"cifar10": _presence_only(datasets.CIFAR10), "cifar100": _presence_only(datasets.CIFAR100)}


def _cifar(name: str, split: str, root: Path, transform: Transform, download: bool) -> ImageSource:
    cls = _CIFAR[name]
    if not download:
        _require(name, root, required_paths(name, split))
    try:
        ds = cls(str(root), train=split == "train", transform=transform, download=download)
    except (pickle.UnpicklingError, KeyError, ValueError, EOFError) as e:
        raise DatasetFormatError(
            f"{name}: cannot read the pickled batches in {root / cls.base_folder}: {e!r}; "
            f"expected {SOURCES[name].expected}"
        ) from e
    return ImageSource(name=name, images=ds, labels=np.asarray(ds.targets), classes=ds.classes)


# --------------------------------------------------------------------------- Pets, Flowers

_PETS_SPLIT = {"train": "trainval", "test": "test"}


def _pets(name: str, split: str, root: Path, transform: Transform, download: bool) -> ImageSource:
    ann = required_paths(name, split)[1]
    if not download:
        _require(name, root, required_paths(name, split))
    try:
        ds = datasets.OxfordIIITPet(
            str(root),
            split=_PETS_SPLIT[split],
            target_types="category",
            transform=transform,
            download=download,
        )
    except ValueError as e:
        raise DatasetFormatError(
            f"{name}: cannot parse {root / ann}: {e}; expected lines "
            "'<image id> <class 1-37> <species 1-2> <breed id>'"
        ) from e
    return ImageSource(name=name, images=ds, labels=np.asarray(ds._labels), classes=ds.classes)


class _Flowers102(datasets.Flowers102):
    def _check_integrity(self) -> bool:
        return all((self._base_folder / f).exists() for f, _ in self._file_dict.values())


def _flowers(name: str, split: str, root: Path, transform: Transform, download: bool) -> ImageSource:
    if not download:
        _require(name, root, required_paths(name, split))
    try:
        ds = _Flowers102(str(root), split=split, transform=transform, download=download)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise DatasetFormatError(
            f"{name}: cannot read {root / 'flowers-102'}/{{imagelabels,setid}}.mat: {e!r}; "
            "expected MATLAB files with 'labels' (1-102 per image) and 'trnid'/'valid'/'tstid'"
        ) from e
    return ImageSource(name=name, images=ds, labels=np.asarray(ds._labels), classes=ds.classes)


# --------------------------------------------------------------------------- folders


def _folder(name: str, root: Path, split_dir: str, transform: Transform) -> datasets.ImageFolder:
    train, folder = root / "train", root / split_dir
    if not folder.is_dir():
        raise _missing(name, root, f"no {split_dir}/ folder")
    try:
        ds = datasets.ImageFolder(str(folder), transform=transform)
    except FileNotFoundError as e:
        raise _missing(name, root, f"no images in {folder} ({e})") from e
    if split_dir != "train":
        if not train.is_dir():
            raise _missing(name, root, "no train/ folder")
        train_classes = sorted(p.name for p in train.iterdir() if p.is_dir())
        if ds.classes != train_classes:
            odd = sorted(set(ds.classes) ^ set(train_classes))
            raise DatasetFormatError(
                f"{name}: {folder} and {train} must have the same class folders; "
                f"these are in only one of them: {', '.join(odd[:10])}"
            )
    return ds


def _test_dir(name: str, root: Path) -> str:
    if name == "imagenet" or not (root / "test").is_dir():
        return "val"
    return "test"


def _imagefolder(name: str, split: str, root: Path, transform: Transform) -> ImageSource:
    ds = _folder(name, root, "train" if split == "train" else _test_dir(name, root), transform)
    return ImageSource(name=name, images=ds, labels=np.asarray(ds.targets), classes=ds.classes)


def _multilabel(name: str, split: str, root: Path, transform: Transform) -> ImageSource:
    split_dir = "train" if split == "train" else _test_dir(name, root)
    ds = _folder(name, root, split_dir, transform)
    label_file = root / LABEL_FILE
    if not label_file.is_file():
        raise _missing(name, root, f"no {LABEL_FILE}")
    position = {Path(p).relative_to(root).as_posix(): i for i, (p, _) in enumerate(ds.samples)}
    extra: list[tuple[int, ...]] = [()] * len(ds)
    for lineno, line in enumerate(label_file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        path, tab, labels = line.partition("\t")
        where = f"{label_file}:{lineno}"
        if not tab:
            raise DatasetFormatError(f"{name}: {where}: expected '<path><TAB><label>,...'")
        if Path(path).parts[:1] != (split_dir,):
            continue
        if path not in position:
            raise DatasetFormatError(f"{name}: {where}: no image {root / path}")
        names = [x.strip() for x in labels.split(",") if x.strip()]
        unknown = [x for x in names if x not in ds.class_to_idx]
        if unknown:
            raise DatasetFormatError(
                f"{name}: {where}: unknown label {unknown[0]!r}; labels are the class folder "
                f"names of {root / 'train'}"
            )
        extra[position[path]] = tuple(ds.class_to_idx[x] for x in names)
    return ImageSource(
        name=name,
        images=ds,
        labels=np.asarray(ds.targets),
        classes=ds.classes,
        extra_labels=extra,
    )


def load_source(
    name: str, source: str, split: str, *, root: Path, transform: Transform, download: bool
) -> ImageSource:
    """The official ``split`` ("train" or "test") of a real ``source`` found under ``root``."""
    if download and not SOURCES[source].downloadable:
        raise ValueError(
            f"{name}: cannot be downloaded automatically; {SOURCES[source].how_to_get}"
        )
    if not root.exists() and not download:
        raise _missing(name, root, "nothing")
    if source in _CIFAR:
        return _cifar(source, split, root, transform, download)
    if source == "pets":
        return _pets(source, split, root, transform, download)
    if source == "flowers102":
        return _flowers(source, split, root, transform, download)
    if source == "multilabel":
        return _multilabel(name, split, root, transform)
    return _imagefolder(name, split, root, transform)
