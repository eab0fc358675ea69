"""Datasets on disk as the tests write them: every real source's own format, image trees,
WebDataset shards, and shards damaged after indexing.

Images are flat colours per example index (:func:`colour`), far enough apart to survive
JPEG, so a test can tell which example it got from its pixels.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import numpy as np
import scipy.io
import torch
from PIL import Image
from webdataset import TarWriter

from vitscale.data.shards.index import Shard, write_index
from vitscale.data.shards.write import index_shards

SIZE = 32  # output resolution in these tests

# ----------------------------------------------------------------------------- writers


def colour(i: int) -> tuple[int, int, int]:
    """A flat colour per example index, far enough apart to survive JPEG."""
    return (16 + 37 * i % 224, 16 + 53 * i % 224, 16 + 71 * i % 224)


def expected_pixels(i: int) -> torch.Tensor:
    return torch.tensor(colour(i), dtype=torch.float32) / 127.5 - 1.0


def write_jpeg(path: Path, i: int, size: tuple[int, int] = (12, 10)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour(i)).save(path, format="JPEG", quality=95)


def cifar_rows(indices: list[int]) -> np.ndarray:
    """(N, 3072) uint8 rows, channel-major like the real batches."""
    rows = np.empty((len(indices), 3, 32, 32), dtype=np.uint8)
    for r, i in enumerate(indices):
        rows[r] = np.asarray(colour(i), dtype=np.uint8)[:, None, None]
    return rows.reshape(len(indices), 3072)


def dump_pickle(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)  # the real files come from Python 2's cPickle


def write_cifar10(root: Path, per_batch: int = 4, test: int = 10) -> Path:
    """cifar-10-batches-py/ with data_batch_1..5, test_batch, batches.meta.
    Train example ``i`` has label ``i % 10``; test example ``j`` label ``j % 10``."""
    base = root / "cifar-10-batches-py"
    for b in range(5):
        idx = list(range(b * per_batch, (b + 1) * per_batch))
        dump_pickle(
            base / f"data_batch_{b + 1}",
            {
                "batch_label": f"training batch {b + 1} of 5",
                "labels": [i % 10 for i in idx],
                "data": cifar_rows(idx),
                "filenames": [f"img_{i}.png" for i in idx],
            },
        )
    idx = list(range(test))
    dump_pickle(
        base / "test_batch",
        {
            "batch_label": "testing batch 1 of 1",
            "labels": [i % 10 for i in idx],
            "data": cifar_rows([1000 + i for i in idx]),
            "filenames": [f"test_{i}.png" for i in idx],
        },
    )
    names = ["airplane", "automobile", "bird", "cat", "deer"]
    names += ["dog", "frog", "horse", "ship", "truck"]
    dump_pickle(
        base / "batches.meta",
        {"num_cases_per_batch": per_batch, "label_names": names, "num_vis": 3072},
    )
    return root


def write_cifar100(root: Path, train: int = 200, test: int = 100) -> Path:
    """cifar-100-python/ with train, test, meta (fine and coarse labels)."""
    base = root / "cifar-100-python"
    for split, n, offset in (("train", train, 0), ("test", test, 1000)):
        idx = list(range(n))
        dump_pickle(
            base / split,
            {
                "filenames": [f"{split}_{i}.png" for i in idx],
                "batch_label": f"{split} batch",
                "fine_labels": [i % 100 for i in idx],
                "coarse_labels": [i % 20 for i in idx],
                "data": cifar_rows([offset + i for i in idx]),
            },
        )
    dump_pickle(
        base / "meta",
        {
            "fine_label_names": [f"fine_{c}" for c in range(100)],
            "coarse_label_names": [f"coarse_{c}" for c in range(20)],
        },
    )
    return root


# The 37 breeds of Oxford-IIIT Pets in class-id order: cats capitalised, dogs lower case.
PET_BREEDS = [
    "Abyssinian",
    "american_bulldog",
    "american_pit_bull_terrier",
    "basset_hound",
    "beagle",
    "Bengal",
    "Birman",
    "Bombay",
    "boxer",
    "British_Shorthair",
    "chihuahua",
    "Egyptian_Mau",
    "english_cocker_spaniel",
    "english_setter",
    "german_shorthaired",
    "great_pyrenees",
    "havanese",
    "japanese_chin",
    "keeshond",
    "leonberger",
    "Maine_Coon",
    "miniature_pinscher",
    "newfoundland",
    "Persian",
    "pomeranian",
    "pug",
    "Ragdoll",
    "Russian_Blue",
    "saint_bernard",
    "samoyed",
    "scottish_terrier",
    "shiba_inu",
    "Siamese",
    "Sphynx",
    "staffordshire_bull_terrier",
    "wheaten_terrier",
    "yorkshire_terrier",
]


def write_pets(root: Path, trainval: int = 2, test: int = 1) -> Path:
    """oxford-iiit-pet/images/<Breed>_<n>.jpg and annotations/{trainval,test}.txt with
    lines '<image id> <class id 1-37> <species 1=cat 2=dog> <breed id>'."""
    base = root / "oxford-iiit-pet"
    (base / "annotations").mkdir(parents=True, exist_ok=True)
    counter = 0
    for split, per_class in (("trainval", trainval), ("test", test)):
        lines = []
        for n in range(per_class):
            for c, breed in enumerate(PET_BREEDS):
                image_id = f"{breed}_{100 * (split == 'test') + n + 1}"
                write_jpeg(base / "images" / f"{image_id}.jpg", counter)
                species = 1 if breed[0].isupper() else 2
                lines.append(f"{image_id} {c + 1} {species} {c // 2 + 1}")
                counter += 1
        (base / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


FLOWER_CLASSES = (1, 2, 7, 50, 101, 102)  # 1-based, as in imagelabels.mat


def write_flowers(root: Path, per_class: tuple[int, int, int] = (2, 1, 1)) -> Path:
    """flowers-102/jpg/image_00001.jpg..., imagelabels.mat {'labels': 1-102 per image},
    setid.mat {'trnid', 'valid', 'tstid': 1-based image ids}. No 102flowers.tgz: a copy
    extracted by hand must load as well as torchvision's own download."""
    base = root / "flowers-102"
    labels, split_ids = [], {"trnid": [], "valid": [], "tstid": []}
    image_id = 0
    for key, n in zip(split_ids, per_class, strict=True):
        for _ in range(n):
            for c in FLOWER_CLASSES:
                image_id += 1
                labels.append(c)
                split_ids[key].append(image_id)
                write_jpeg(base / "jpg" / f"image_{image_id:05d}.jpg", image_id)
    scipy.io.savemat(base / "imagelabels.mat", {"labels": np.asarray([labels], dtype=np.uint8)})
    scipy.io.savemat(
        base / "setid.mat", {k: np.asarray([v], dtype=np.uint16) for k, v in split_ids.items()}
    )
    return root


def write_image_tree(
    root: Path, classes: list[str], counts: dict[str, int], *, ext: str = "jpg"
) -> Path:
    """``root/<split>/<class>/<i>.<ext>`` for every split in ``counts``; image ``i`` of
    split s is the flat colour of index ``i`` (offset per split)."""
    offset = 0
    for split, n in counts.items():
        for i in range(n):
            write_jpeg(root / split / classes[i % len(classes)] / f"{i:04d}.{ext}", offset + i)
        offset += 500
    return root


def write_multilabel(root: Path) -> Path:
    classes = ["cat", "dog", "grass", "sky"]
    write_image_tree(root, classes, {"train": 8, "test": 4})
    lines = [
        "train/cat/0000.jpg\tgrass,sky",
        "train/dog/0001.jpg\tgrass",
        "",
        "test/cat/0000.jpg\tsky , dog",
    ]
    (root / "labels.tsv").write_text("\n".join(lines) + "\n")
    return root


# ----------------------------------------------------------------------------- shards


def jpeg_bytes(i: int, size: tuple[int, int] = (20, 16)) -> bytes:
    """A JPEG of example ``i``: its flat colour plus a gradient (crops and flips show)."""
    x = np.linspace(0, 60, size[0], dtype=np.float32)[None, :, None]
    pixels = np.clip(np.asarray(colour(i), np.float32)[None, None] * 0.7 + x, 0, 255)
    pixels = np.broadcast_to(pixels, (size[1], size[0], 3)).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=95)
    return out.getvalue()


def write_tar(path: Path, samples: list[dict]) -> None:
    """One WebDataset shard, written by WebDataset's own writer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with TarWriter(str(path), encoder=False) as w:
        for s in samples:
            w.write(s)


def sample(i: int, label: int | str | list | None = "auto", classes: int = 4) -> dict:
    out = {"__key__": f"img{i:05d}", "jpg": jpeg_bytes(i)}
    if label == "auto":
        label = i % classes
    if isinstance(label, list):
        out["json"] = json.dumps({"labels": label}).encode()
    elif label is not None:
        out["cls"] = str(label).encode()
    return out


def write_jpeg_shards(
    root: Path, *, shards: int = 4, per_shard: int = 6, test: int = 1, classes: int = 4
) -> Path:
    """``train-*.tar`` and ``test-*.tar`` of JPEGs, indexed by ``vitscale data index``."""
    i = 0
    for split, count in (("train", shards), ("test", test)):
        for s in range(count):
            write_tar(
                root / f"{split}-{s:06d}.tar",
                [sample(i + k, classes=classes) for k in range(per_shard)],
            )
            i += per_shard
    index_shards(root, progress=False)
    return root


def bad_set(root: Path, bad: dict) -> Path:
    """Shards with one bad example (key img00099) at position 2 of shard 1, indexed as
    if it were fine: what a shard damaged after indexing looks like."""
    shards = []
    for s in range(2):
        samples = [sample(s * 4 + k) for k in range(4)]
        if s == 1:
            samples[2] = {"__key__": "img00099", **bad}
        write_tar(root / f"train-{s:06d}.tar", samples)
        shards.append(Shard(f"train-{s:06d}.tar", 4, (root / f"train-{s:06d}.tar").stat().st_size))
    write_index(
        root,
        classes=["a", "b", "c", "d"],
        splits={"train": shards},
        multilabel=False,
        crop=True,
        source="test",
    )
    return root


def image_kinds(size: tuple[int, int] = (40, 30)) -> dict[str, bytes]:
    """One image of each kind a crawl holds and the workers decode: baseline and progressive
    JPEGs, grayscale and CMYK JPEGs (nvJPEG decodes no CMYK; ImageNet-1k has about 22),
    8-bit RGBA, palette and 16-bit PNGs, and a WebP."""
    w, h = size
    rng = np.random.default_rng(0)
    rgb = Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8))
    deep = Image.fromarray((rng.random((h, w)) * 65535).astype(np.uint16))

    def encoded(image: Image.Image, fmt: str, **options) -> bytes:
        out = io.BytesIO()
        image.save(out, format=fmt, **options)
        return out.getvalue()

    return {
        "jpeg": encoded(rgb, "JPEG", quality=95),
        "progressive": encoded(rgb, "JPEG", progressive=True),
        "grayscale": encoded(rgb.convert("L"), "JPEG"),
        "cmyk": encoded(rgb.convert("CMYK"), "JPEG"),
        "rgba": encoded(rgb.convert("RGBA"), "PNG"),
        "palette": encoded(rgb.convert("P"), "PNG"),
        "png16": encoded(deep, "PNG"),
        "webp": encoded(rgb, "WEBP"),
    }
