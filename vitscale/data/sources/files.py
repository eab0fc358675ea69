"""Which files each real source reads, checked for presence (nothing is opened, so grid
validation can check ImageNet's layout for every cell; torchvision's per-file MD5 checks,
which reject re-packed copies, are not used), and the errors naming what is missing (the
path, what belongs there, how to get it) or malformed (the file, how to get a good copy).
"""

from __future__ import annotations

from pathlib import Path

from torchvision import datasets

from ..registry import LABEL_FILE, SOURCES, DatasetFormatError, DatasetNotFoundError

CIFAR_CLASSES = {"cifar10": datasets.CIFAR10, "cifar100": datasets.CIFAR100}
PETS_SPLIT = {"train": "trainval", "test": "test"}


def _how(name: str, *, broken: bool = False) -> str:
    info = SOURCES[name.partition(":")[0]]
    # A download skips files that are present, so a broken copy must go first.
    get = "To get a good copy: remove the broken files, then " if broken else "To get it: "
    return f"expected {info.expected}. {get}{info.how_to_get}."


def missing(name: str, root: Path, detail: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(f"{name}: {detail} under {root.absolute()}; {_how(name)}")


def malformed(name: str, where: Path | str, detail: str) -> DatasetFormatError:
    return DatasetFormatError(f"{name}: {where}: {detail}; {_how(name, broken=True)}")


def require(name: str, root: Path, paths: list[str]) -> None:
    absent = [p for p in paths if not (root / p).exists()]
    if absent:
        raise missing(name, root, f"missing {', '.join(absent)}")


def required_paths(source: str, split: str) -> list[str]:
    """Files and folders (relative to root) that the ``split`` of ``source`` reads.

    CIFAR's torchvision class checks both splits' files whichever it reads, so both are
    listed for either split.
    """
    if source in CIFAR_CLASSES:
        cls = CIFAR_CLASSES[source]
        files = [f for f, _ in cls.train_list + cls.test_list]
        return [f"{cls.base_folder}/{f}" for f in [*files, cls.meta["filename"]]]
    if source == "pets":
        return ["oxford-iiit-pet/images", f"oxford-iiit-pet/annotations/{PETS_SPLIT[split]}.txt"]
    if source == "flowers102":
        return ["flowers-102/jpg", "flowers-102/imagelabels.mat", "flowers-102/setid.mat"]
    if source == "imagenet":
        return ["train", "val"]
    return ["train"] + ([LABEL_FILE] if source == "multilabel" else [])


def check_layout(name: str, source: str, root: Path) -> None:
    """Raise :class:`DatasetNotFoundError` unless both splits' files are under ``root``
    (cheap: nothing is opened, so grid validation can call it for ImageNet); a folder set
    without a test folder holds one out of train/."""
    if not root.exists():
        raise missing(name, root, "nothing")
    paths = {p for split in ("train", "test") for p in required_paths(source, split)}
    require(name, root, sorted(paths))
