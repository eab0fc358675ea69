"""``build_dataset`` and ``build_fewshot``: a dataset name and a split -> a torch ``Dataset``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from ..config.schema import DataConfig
from .embedded import EMBEDDED, open_task
from .indexed import IndexedDataset
from .registry import SOURCES, SPLITS, default_root, parse_name
from .subsets import SeededPermutation, SubsetSpec, fewshot_indices, holdout_split, subset_size
from .subsets import balanced_order as _balanced_order


def _base(
    name: str,
    split: str,
    *,
    root: str | Path | None,
    image_size: int,
    augment: bool | None,
    download: bool,
    val_fraction: float | None = None,
    holdout: float | None = None,
) -> Dataset:
    """The whole ``split``, before any subset. ``val_fraction`` overrides the source's
    held-out fraction (real sources; the synthetic tasks have a separate val stream);
    ``holdout`` is ``data.holdout`` (a folder set without a test folder)."""
    if split not in SPLITS:
        raise ValueError(f"{name}: unknown split {split!r}; valid: {', '.join(SPLITS)}")
    source, path = parse_name(name)
    if source == "shards":
        from .shards.dataset import load_shards

        return load_shards(name, split, image_size=image_size, augment=augment)
    if source in EMBEDDED:
        if augment:
            raise ValueError(
                f"{name}: the synthetic set draws its own nuisances (position, scale, colour, "
                "clutter) and takes no augmentation; leave augment unset"
            )
        # Synthetic tasks have a separate val stream, so minitrain is all of train.
        return open_task(source, "train" if split == "minitrain" else split, image_size)
    if augment is None:
        augment = split in ("train", "minitrain")
    # torchvision loads here, for real sources only: a synthetic run starts ~2 s sooner.
    from .sources.load import load_source
    from .transforms import eval_transform, train_transform

    transform = train_transform(image_size) if augment else eval_transform(image_size)
    where = path if path is not None else Path(root).expanduser() if root else default_root(source)
    official = "test" if split == "test" else "train"
    ds = load_source(
        name,
        source,
        official,
        root=where,
        transform=transform,
        download=download,
        holdout=holdout,
    )
    if split in ("train", "test"):
        return ds
    fraction = SOURCES[source].val_fraction if val_fraction is None else val_fraction
    minitrain, val = holdout_split(len(ds), fraction)
    return IndexedDataset(ds, minitrain if split == "minitrain" else val)


@contextlib.contextmanager
def rank0_downloads_first(accelerator, *, download: bool) -> Iterator[None]:
    """Where a run's processes build datasets. With ``download`` (``data.download``), rank
    0 builds first and fetches what is missing while the others wait; then each other
    node's first process, while the rest of its node waits (a root on the node's own disk
    is still empty; a shared one holds rank 0's files); then the rest, from their files:
    several processes fetching one archive into one folder at once would write over each
    other. Without, all at once."""
    if not (download and accelerator.num_processes > 1):
        yield
        return
    with accelerator.main_process_first(), accelerator.local_main_process_first():
        yield


def build_dataset(
    name: str,
    split: str,
    *,
    root: str | Path | None = None,
    image_size: int,
    subset: SubsetSpec = None,
    seed: int = 0,
    class_balanced: bool = False,
    augment: bool | None = None,
    download: bool = False,
    shuffle_shards: int | None = None,
    skip_bad_samples: int = 0,
    holdout: float | None = None,
) -> Dataset:
    """One split of a dataset as a torch ``Dataset`` of (image, target).

    Images are float32 ``(3, image_size, image_size)`` in [-1, 1]; targets are int64 class
    indices, or float multi-hot vectors when ``dataset.multilabel``. The dataset also has
    ``name``, ``classes``, ``num_classes``, ``multilabel`` and ``targets_of(indices)``.

    ``name`` and ``split`` are the registry's (:mod:`vitscale.data.registry`); ``root``,
    ``subset``, ``class_balanced``, ``download``, ``shuffle_shards``,
    ``skip_bad_samples`` and ``holdout`` mean what the ``data.*`` config keys of those names do
    (docs/config.md). ``augment``: Inception crop + flip instead of the evaluation resize +
    centre crop; default: on for train and minitrain of real sources.
    """
    if parse_name(name)[0] == "shards":
        from .shards.dataset import load_shards

        return load_shards(
            name,
            split,
            image_size=image_size,
            subset=subset,
            seed=seed,
            augment=augment,
            class_balanced=class_balanced,
            shuffle_shards=shuffle_shards,
            skip_bad_samples=skip_bad_samples,
        )
    ds = _base(
        name,
        split,
        root=root,
        image_size=image_size,
        augment=augment,
        download=download,
        holdout=holdout,
    )
    if subset is None:
        return ds
    n = len(ds)
    m = subset_size(n, subset)
    if class_balanced:
        if parse_name(name)[0] in EMBEDDED:
            raise ValueError(
                f"{name}: balanced subsets need stored labels; the embedded classes cycle "
                "with the index, so plain subsets are already balanced to within sampling noise"
            )
        return IndexedDataset(ds, _balanced_order(all_targets(ds), seed=seed)[:m])
    return IndexedDataset(ds, SeededPermutation(n, seed), length=m)


def build_fewshot(
    name: str,
    *,
    shots: int,
    seed: int = 0,
    root: str | Path | None = None,
    image_size: int,
    download: bool = False,
) -> Dataset:
    """``shots`` train images per class, preprocessed for evaluation (paper Sec. 4.1): a
    larger k with the same seed contains the smaller one. Score on
    ``build_dataset(name, "test")``."""
    train = _base(name, "train", root=root, image_size=image_size, augment=False, download=download)
    return IndexedDataset(train, fewshot_indices(all_targets(train), shots, seed=seed))


def finetune_splits(
    name: str,
    *,
    val_fraction: float | None = None,
    root: str | Path | None = None,
    image_size: int,
    download: bool = False,
    seed: int = 0,
    holdout: float | None = None,
) -> tuple[Dataset, Dataset]:
    """``(minitrain, val)``: where fine-tuning learning rates are chosen (paper App. B.1.1):
    a fixed held-out slice of train (the source's default fraction unless ``val_fraction``
    is given) and the rest. The slice never depends on ``seed`` (accepted for a uniform
    signature), so every run holds out the same images."""
    del seed
    kw = dict(
        root=root,
        image_size=image_size,
        download=download,
        val_fraction=val_fraction,
        holdout=holdout,
    )
    return (
        _base(name, "minitrain", augment=None, **kw),
        _base(name, "val", augment=False, **kw),
    )


def all_targets(ds: Dataset) -> np.ndarray:
    """Every example's (primary) class, without decoding images."""
    return ds.targets_of(np.arange(len(ds)))


def describe_dataset(
    name: str,
    *,
    root: str | Path | None = None,
    holdout: float | None = None,
    val_fraction: float | None = None,
) -> dict:
    """``vitscale data list NAME`` for a set that is not sharded: its classes, each split's
    size, and where the two held-out parts come from, in one vocabulary: ``test`` (a
    test or val folder, the official test split, or ``data.holdout`` of train/) and ``val``
    (``eval.finetune.val_fraction`` of train, where fine-tuning chooses its learning rate;
    train without it is ``minitrain``)."""
    source, path = parse_name(name)
    kw = dict(root=root, image_size=32, augment=False, download=False, holdout=holdout)
    train = _base(name, "train", **kw)
    if source in EMBEDDED:
        sizes = {s: len(_base(name, s, **kw)) for s in SPLITS[1:]}
        test, val = "its own test stream", "its own val stream (minitrain is all of train)"
    else:
        from .sources.load import test_dir

        folder = test_dir(source, path) if path is not None else None
        fraction = DataConfig().holdout if holdout is None else holdout
        test = (
            f"the {folder}/ folder"
            if folder
            else f"held out of train/: data.holdout {fraction:g} per class"
            if path is not None
            else "the official test split"
        )
        share = SOURCES[source].val_fraction if val_fraction is None else val_fraction
        val = f"held out of train: eval.finetune.val_fraction {share:g} (fine-tuning's lr choice)"
        minitrain, held = holdout_split(len(train), share)  # as _base slices train, unread
        test_size = len(_base(name, "test", **kw))
        sizes = {"minitrain": len(minitrain), "val": len(held), "test": test_size}
    counts = np.bincount(all_targets(train), minlength=train.num_classes)
    return dict(
        name=name,
        num_classes=train.num_classes,
        classes=list(train.classes),
        smallest_class=int(counts.min()),  # the most shots a few-shot evaluation can take
        multilabel=bool(getattr(train, "multilabel", False)),
        splits={"train": len(train), **sizes},
        test_from=test,
        val_from=val,
    )


def format_dataset(row: dict) -> str:
    """:func:`describe_dataset`'s row as ``vitscale data list NAME`` prints it."""
    kind = "multi-label" if row["multilabel"] else "single-label"
    s = row["splits"]
    return "\n".join(
        [
            row["name"],
            f"    {row['num_classes']:,} classes ({kind}; the smallest has "
            f"{row['smallest_class']:,} train examples): {', '.join(map(str, row['classes']))}",
            f"    train: {s['train']:,} examples (minitrain {s['minitrain']:,}"
            + (f" + val {s['val']:,})" if s["minitrain"] + s["val"] == s["train"] else ")"),
            f"    val: {s['val']:,} examples, {row['val_from']}",
            f"    test: {s['test']:,} examples, {row['test_from']}",
        ]
    )


def verify_dataset(name: str, *, root: str | Path | None = None) -> list[str]:
    """Every image of a set on disk decoded as training decodes it (``vitscale grid
    --verify``): one message naming all that do not (a folder set), or each shard's
    (a sharded set, :func:`~vitscale.data.shards.read.scan_shard`); none for the embedded
    worlds (drawn, not read) and the public sets (checked by their own loaders)."""
    source, path = parse_name(name)
    if source == "shards":
        from .shards.index import load_index, parse_location
        from .shards.read import scan_shard

        index = load_index(name, parse_location(name)[0])
        shards = [index.path(s) for split in index.splits.values() for s in split]
        return [p for shard in shards for p in scan_shard(shard, verify=True).problems]
    if path is None:
        return []
    from .sources.load import bad_files_error, undecodable

    kw = dict(root=root, image_size=32, augment=False, download=False)
    files = {str(f): None for split in ("train", "test") for f in _base(name, split, **kw).scanned}
    bad, _ = undecodable(list(files))
    return [bad_files_error(name, bad)] if bad else []
