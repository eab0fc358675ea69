"""Dataset names -> what each source is: classes, splits, held-out fraction, where it lives.

One table for every fact about a source, torch-free, so the CLI's ``data list``, grid
validation and error messages read the same numbers the loaders use.

Names: ``synthetic`` and ``scenes`` (upstream) with their ``synthetic-<task>`` and
``scenes-<task>`` transfer tasks, the embedded procedural worlds
(:mod:`vitscale.data.embedded`, nothing on disk), and the
sources of :data:`SOURCES`, each with what it expects on disk. ``imagenet``'s ``test`` split
is the official validation set, on which the paper reports ImageNet; ``multilabel:`` is
the JFT / ImageNet-21k shape (multi-hot targets for the sigmoid loss); ``shards:`` is the
format for pre-training at the paper's scale (:mod:`vitscale.data.shards.index`).

Splits, for every source: ``train``; ``val``, a fixed held-out slice of train for
choosing fine-tuning learning rates (:attr:`SourceInfo.val_fraction`, paper App. B.1.1;
the synthetic tasks have a separate val stream instead); ``minitrain``, train without it;
``test``, the official test split, for final scores only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..kinds import FOLDER_KINDS
from .embedded import EMBEDDED

SPLITS = ("train", "minitrain", "val", "test")
LABEL_FILE = "labels.tsv"
ROOT_ENV = "VITSCALE_DATA"


class DatasetNotFoundError(ValueError):
    """A dataset is not where the config says: names the path, what belongs there, and how
    to get it."""


class DatasetFormatError(ValueError):
    """A dataset is there but a file in it is not in the expected format."""


def decode_reason(error: BaseException) -> str:
    """Why a decoder (torchvision's or PIL's) refused an image, alone: the first line of its
    message without torchvision's C++ source location, its advice on AVIF and HEIC (which
    misleads about a damaged JPEG), and PIL's name of the file (the error names it)."""
    text = (str(error).splitlines() or [type(error).__name__])[0]
    text = re.sub(r"^.*\.cpp:\d+, ", "", text)
    text = re.sub(r"\s*For avif and heic format.*$", "", text)
    return re.sub(r" (<_io\.\w+ [^>]*>|'[^']*')$", "", text)


@dataclass(frozen=True)
class SourceInfo:
    """A dataset the paper evaluates on (or its stand-in), as the loaders see it."""

    name: str
    title: str
    num_classes: int | None
    sizes: tuple[tuple[str, int], ...]  # official split sizes; () when read from disk
    val_fraction: float
    expected: str  # what must be under root
    how_to_get: str
    downloadable: bool = False
    # Fine-tuning recipe (paper App. B.1.1, Table 4): steps and the learning-rate grid.
    finetune_steps: int = 500
    finetune_lrs: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03)

    def size(self, split: str) -> int | None:
        return dict(self.sizes).get(split)


_TORCHVISION = "set `download: true` (data.download in the config) to fetch it with torchvision"

SOURCES: dict[str, SourceInfo] = {
    s.name: s
    for s in (
        SourceInfo(
            name="cifar10",
            title="CIFAR-10",
            num_classes=10,
            sizes=(("train", 50_000), ("test", 10_000)),
            val_fraction=0.02,
            expected="cifar-10-batches-py/ with data_batch_1..5, test_batch, batches.meta "
            "(the python pickled batches)",
            how_to_get=_TORCHVISION,
            downloadable=True,
            finetune_steps=10_000,
        ),
        SourceInfo(
            name="cifar100",
            title="CIFAR-100",
            num_classes=100,
            sizes=(("train", 50_000), ("test", 10_000)),
            val_fraction=0.02,
            expected="cifar-100-python/ with train, test, meta (the python pickled batches)",
            how_to_get=_TORCHVISION,
            downloadable=True,
            finetune_steps=10_000,
        ),
        SourceInfo(
            name="pets",
            title="Oxford-IIIT Pets",
            num_classes=37,
            sizes=(("train", 3_680), ("test", 3_669)),
            val_fraction=0.1,
            expected="oxford-iiit-pet/images/*.jpg and oxford-iiit-pet/annotations/"
            "{trainval,test}.txt",
            how_to_get=_TORCHVISION,
            downloadable=True,
        ),
        SourceInfo(
            name="flowers102",
            title="Oxford Flowers-102",
            num_classes=102,
            sizes=(("train", 1_020), ("test", 6_149)),
            val_fraction=0.1,
            expected="flowers-102/jpg/image_*.jpg, flowers-102/imagelabels.mat and "
            "flowers-102/setid.mat",
            how_to_get=_TORCHVISION,
            downloadable=True,
        ),
        SourceInfo(
            name="imagenet",
            title="ImageNet (ILSVRC-2012)",
            num_classes=1000,
            sizes=(("train", 1_281_167), ("test", 50_000)),
            val_fraction=0.01,
            expected="train/<wnid>/*.JPEG and val/<wnid>/*.JPEG (ILSVRC-2012 in folder layout, "
            "the same class folders in both)",
            how_to_get="download ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar from "
            "image-net.org, untar train per class, and sort val into class folders "
            "(e.g. with the widely used valprep.sh)",
            finetune_steps=20_000,
            finetune_lrs=(0.003, 0.01, 0.03, 0.06),
        ),
        SourceInfo(
            name="imagefolder",
            title="ImageFolder tree",
            num_classes=None,
            sizes=(),
            val_fraction=0.1,
            expected="train/<class>/<image> and test/<class>/<image> (or val/ for test; "
            "without either, a part of train, data.holdout, is held out)",
            how_to_get="arrange the images in one folder per class",
        ),
        SourceInfo(
            name="multilabel",
            title="multi-label ImageFolder tree",
            num_classes=None,
            sizes=(),
            val_fraction=0.1,
            expected=f"train/<class>/<image>, test/<class>/<image> (or val/; without either, "
            f"a part of train, data.holdout, is held out) and {LABEL_FILE} with "
            "lines '<split>/<class>/<image><TAB><label>,<label>,...' listing each image's "
            "further labels (class folder names)",
            how_to_get="export the images one folder per primary label and write the other "
            f"labels to {LABEL_FILE}",
        ),
        SourceInfo(
            name="shards",
            title="WebDataset tar shards (pre-training at scale)",
            num_classes=None,
            sizes=(),
            val_fraction=0.1,
            expected="<split>-NNNNNN.tar shards (<key>.jpg + <key>.cls or <key>.json) and "
            "index.json; the name may end in a shard pattern (train-{000000..001023}.tar)",
            how_to_get="`vitscale data shard SRC DEST --shard-size N` converts any source above; "
            "`vitscale data index DIR` indexes WebDataset shards made elsewhere",
        ),
    )
}


def dataset_names() -> list[str]:
    """Every valid name (folder sources with their ``:/path`` placeholder)."""
    synthetic = list(EMBEDDED)
    real = [n for n in SOURCES if n not in FOLDER_KINDS]
    return synthetic + real + [f"{k}:/path" for k in FOLDER_KINDS]


def parse_name(name: str) -> tuple[str, Path | None]:
    """``(source, path)``: the registry key and, for folder sources, the folder."""
    if not isinstance(name, str):
        raise ValueError(f"dataset name must be a string, got {name!r}")
    kind, sep, path = name.partition(":")
    if sep and kind in FOLDER_KINDS:
        if not path:
            raise ValueError(f"dataset {name!r}: give the folder, e.g. '{kind}:/data/my_set'")
        return kind, Path(path).expanduser()
    if name in EMBEDDED or (name in SOURCES and name not in FOLDER_KINDS):
        return name, None
    raise ValueError(f"unknown dataset {name!r}; valid: {', '.join(dataset_names())}")


# The synthetic transfer tasks are Pets/Flowers-sized: their small-set recipe.
SYNTHETIC_FINETUNE = (500, (0.001, 0.003, 0.01, 0.03))


def finetune_recipe(name: str) -> tuple[int, tuple[float, ...]]:
    """``(steps, learning-rate grid)`` the paper fine-tunes ``name`` with (App. B.1.1)."""
    source, _ = parse_name(name)
    if source in EMBEDDED:
        return SYNTHETIC_FINETUNE
    info = SOURCES[source]
    return info.finetune_steps, info.finetune_lrs


def finetune_sweep(
    name: str, *, steps: int | None = None, lrs: list[float] | None = None
) -> tuple[int, list[float], int]:
    """``(steps, learning rates, fine-tunes)`` of fine-tuning on ``name``: the config's
    steps and learning rates, else the paper's (:func:`finetune_recipe`); one fine-tune per
    learning rate on the held-out slice, then the best one again on all of train (one
    learning rate: that one alone). The trainer runs it; the grid's budget counts it."""
    paper_steps, paper_lrs = finetune_recipe(name)
    lrs = list(lrs or paper_lrs)
    return steps or paper_steps, lrs, len(lrs) + 1 if len(lrs) > 1 else 1


def default_root(source: str) -> Path:
    """Where a torchvision set or ImageNet lives when the config gives no ``root``:
    ``$VITSCALE_DATA`` (or ``./data``), plus ``imagenet/`` for ImageNet."""
    base = Path(os.environ.get(ROOT_ENV, "data")).expanduser()
    return base / "imagenet" if source == "imagenet" else base


def describe_datasets() -> list[dict]:
    """One row per dataset for ``vitscale data list``: name, what it is, its classes,
    split sizes (``None`` where read from disk), the held-out fraction of train, and where
    it comes from."""
    rows = []
    for task in EMBEDDED.values():
        rows.append(
            dict(
                name=task.name,
                description=task.description,
                num_classes=task.num_classes,
                splits=dict(task.splits),
                val_fraction=None,
                source="embedded (rendered on the fly, nothing on disk)",
            )
        )
    for info in SOURCES.values():
        folder = info.name in FOLDER_KINDS
        rows.append(
            dict(
                name=f"{info.name}:/path" if folder else info.name,
                description=info.title,
                num_classes=info.num_classes,
                splits=dict(info.sizes) if info.sizes else None,
                val_fraction=info.val_fraction,
                source=("under /path: " if folder else "under root: ") + info.expected,
            )
        )
    return rows
