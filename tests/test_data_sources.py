"""Every real loader on small files in the real on-disk formats (written by
:mod:`tests.helpers.datasets`).

CIFAR-10/100 as python pickled batches, Oxford-IIIT Pets as JPEGs plus
``annotations/{trainval,test}.txt``, Flowers-102 as JPEGs plus ``imagelabels.mat`` and
``setid.mat`` (written with ``scipy.io.savemat``), ImageNet in ILSVRC folder layout, a
plain ImageFolder tree and a multi-label tree with ``labels.tsv``. Every image is one
flat colour that encodes its index, so a loaded example can be matched to the file it
came from through the real decoding and the evaluation transform. Then the failures: a
missing dataset, a missing file, a malformed file, and that nothing is downloaded unless
asked.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
from PIL import Image
from torchvision import datasets

from vitscale.data import DatasetFormatError, DatasetNotFoundError, build_dataset
from vitscale.data.registry import SOURCES
from vitscale.data.transforms import EVAL_RESIZE_RATIO, eval_transform, train_transform

from .helpers.datasets import (
    FLOWER_CLASSES,
    SIZE,
    cifar_rows,
    dump_pickle,
    expected_pixels,
    write_cifar10,
    write_cifar100,
    write_flowers,
    write_image_tree,
    write_jpeg,
    write_multilabel,
    write_pets,
)

WNIDS = ["n01440764", "n01443537", "n01484850"]


@pytest.fixture
def pristine_downloads(monkeypatch):
    """Every torchvision downloader replaced by one that records the call and fails."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args[0] if args else kwargs)
        raise RuntimeError("download attempted")

    from torchvision.datasets import cifar, flowers102, oxford_iiit_pet, utils

    for module, attr in (
        (cifar, "download_and_extract_archive"),
        (oxford_iiit_pet, "download_and_extract_archive"),
        (flowers102, "download_and_extract_archive"),
        (flowers102, "download_url"),
        (utils, "download_url"),
        (utils, "download_and_extract_archive"),
    ):
        monkeypatch.setattr(module, attr, refuse)
    return calls


def assert_names(message: str, *parts: str) -> None:
    for part in parts:
        assert part in message, f"{part!r} not in: {message}"


def check_examples(ds, expected: dict[int, tuple[int, int]]) -> None:
    """``expected[position] = (colour index, label)``; pixels within JPEG error."""
    for position, (i, label) in expected.items():
        image, target = ds[position]
        assert image.shape == (3, SIZE, SIZE) and image.dtype == torch.float32
        assert int(target) == label
        assert torch.allclose(image.mean(dim=(1, 2)), expected_pixels(i), atol=0.04), position


# ----------------------------------------------------------------------------- CIFAR


def test_cifar10_pickled_batches(tmp_path):
    root = write_cifar10(tmp_path)
    train = build_dataset("cifar10", "train", root=root, image_size=SIZE, augment=False)
    test = build_dataset("cifar10", "test", root=root, image_size=SIZE)
    assert (len(train), len(test), train.num_classes) == (20, 10, 10)
    assert train.classes[3] == "cat" and not train.multilabel
    check_examples(train, {0: (0, 0), 7: (7, 7), 19: (19, 9)})
    check_examples(test, {4: (1004, 4)})
    np.testing.assert_array_equal(train.targets_of(np.arange(20)), np.arange(20) % 10)
    # the held-out slice is 2% of train (at least one example), minitrain the rest
    val = build_dataset("cifar10", "val", root=root, image_size=SIZE)
    minitrain = build_dataset("cifar10", "minitrain", root=root, image_size=SIZE)
    assert (len(val), len(minitrain)) == (1, 19)
    assert SOURCES["cifar10"].val_fraction == SOURCES["cifar100"].val_fraction == 0.02


def test_cifar100_pickled_batches(tmp_path):
    root = write_cifar100(tmp_path)
    train = build_dataset("cifar100", "train", root=root, image_size=SIZE, augment=False)
    test = build_dataset("cifar100", "test", root=root, image_size=SIZE)
    assert (len(train), len(test), train.num_classes) == (200, 100, 100)
    assert train.classes[42] == "fine_42"
    check_examples(train, {142: (142, 42)})
    check_examples(test, {99: (1099, 99)})
    assert len(build_dataset("cifar100", "val", root=root, image_size=SIZE)) == 4  # 2% of 200


def test_cifar_missing_and_malformed(tmp_path, pristine_downloads):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("cifar10", "train", root=tmp_path / "nowhere", image_size=SIZE)
    assert_names(str(e.value), str(tmp_path / "nowhere"), "cifar-10-batches-py/", "download: true")

    root = write_cifar10(tmp_path / "a")
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DatasetNotFoundError) as e:  # the split read is complete, test is not
        build_dataset("cifar10", "train", root=root, image_size=SIZE)
    assert_names(str(e.value), "missing cifar-10-batches-py/test_batch", str(root), "download")

    root = write_cifar10(tmp_path / "b")
    (root / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"\x00not a pickle at all")
    with pytest.raises(DatasetFormatError) as e:
        build_dataset("cifar10", "train", root=root, image_size=SIZE)
    assert_names(
        str(e.value),
        str(root / "cifar-10-batches-py" / "data_batch_3"),
        "'data'",
        "'labels'",
        "remove the broken files, then set `download: true`",
    )

    root = write_cifar100(tmp_path / "c", train=20, test=10)
    dump_pickle(root / "cifar-100-python" / "train", {"data": cifar_rows(list(range(20)))})
    with pytest.raises(DatasetFormatError, match="cifar-100-python/train: .*fine_labels"):
        build_dataset("cifar100", "train", root=root, image_size=SIZE)

    root = write_cifar10(tmp_path / "d")
    batch = root / "cifar-10-batches-py" / "data_batch_2"
    dump_pickle(batch, {"labels": [3, 12, 0, 1], "data": cifar_rows([0, 1, 2, 3])})
    with pytest.raises(DatasetFormatError, match="label 12 is outside 0..9"):
        build_dataset("cifar10", "train", root=root, image_size=SIZE)
    dump_pickle(batch, {"labels": [3, 1], "data": cifar_rows([0, 1, 2, 3])})
    with pytest.raises(DatasetFormatError, match="20 images but 18 labels"):
        build_dataset("cifar10", "train", root=root, image_size=SIZE)

    root = write_cifar10(tmp_path / "e")
    dump_pickle(root / "cifar-10-batches-py" / "batches.meta", {"label_names": ["cat", "dog"]})
    with pytest.raises(DatasetFormatError, match="2 class names under 'label_names', expected 10"):
        build_dataset("cifar10", "train", root=root, image_size=SIZE)
    assert pristine_downloads == []


# ----------------------------------------------------------------------------- Pets


def test_pets_images_and_annotations(tmp_path):
    root = write_pets(tmp_path)
    train = build_dataset("pets", "train", root=root, image_size=SIZE, augment=False)
    test = build_dataset("pets", "test", root=root, image_size=SIZE)
    assert (len(train), len(test), train.num_classes, test.num_classes) == (74, 37, 37, 37)
    assert train.classes[0] == "Abyssinian" and train.classes[36] == "Yorkshire Terrier"
    assert train.classes == test.classes
    check_examples(train, {0: (0, 0), 40: (40, 3)})
    check_examples(test, {36: (74 + 36, 36)})
    assert len(build_dataset("pets", "val", root=root, image_size=SIZE)) == 7  # 10% of 74
    assert SOURCES["pets"].val_fraction == SOURCES["flowers102"].val_fraction == 0.1


def test_pets_split_missing_a_class_keeps_the_37_class_indices(tmp_path):
    """torchvision names only the classes present in a split; a split without class 1
    must not shift the names (or the class count) of the others."""
    root = write_pets(tmp_path)
    ann = root / "oxford-iiit-pet" / "annotations" / "test.txt"
    ann.write_text("".join(line + "\n" for line in ann.read_text().splitlines()[1:]))
    test = build_dataset("pets", "test", root=root, image_size=SIZE)
    assert test.num_classes == 37 and len(test) == 36
    assert test.classes[1] == "American Bulldog" and test.classes[0] == "class 1"


def test_pets_missing_and_malformed(tmp_path, pristine_downloads):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("pets", "train", root=tmp_path, image_size=SIZE)
    assert_names(
        str(e.value), "oxford-iiit-pet/annotations/trainval.txt", str(tmp_path), "download"
    )

    root = write_pets(tmp_path / "a")
    ann = root / "oxford-iiit-pet" / "annotations" / "trainval.txt"
    ann.write_text("Abyssinian_1 1 1 1\nthis line is broken\n")
    with pytest.raises(DatasetFormatError) as e:
        build_dataset("pets", "train", root=root, image_size=SIZE)
    assert_names(str(e.value), str(ann), "<image id> <class 1-37>")
    ann.write_text("Abyssinian_1 38 1 1\n")
    with pytest.raises(DatasetFormatError, match="label 38 is outside 1..37"):
        build_dataset("pets", "train", root=root, image_size=SIZE)
    ann.write_text("Abyssinian_1 1 1 1\nAbyssinian_999 1 1 1\n")
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("pets", "train", root=root, image_size=SIZE)
    assert_names(str(e.value), "1 of the 2 listed images are missing", "Abyssinian_999.jpg")
    assert pristine_downloads == []


# ----------------------------------------------------------------------------- Flowers


def test_flowers_jpg_and_mat_files(tmp_path):
    root = write_flowers(tmp_path)
    assert not (root / "flowers-102" / "102flowers.tgz").exists()
    train = build_dataset("flowers102", "train", root=root, image_size=SIZE, augment=False)
    test = build_dataset("flowers102", "test", root=root, image_size=SIZE)
    assert (len(train), len(test), train.num_classes) == (12, 6, 102)
    assert train.classes[0] == "pink primrose"
    # ids 1..12 are train (two rounds over the classes), 13..18 validation, 19..24 test
    check_examples(train, {0: (1, 0), 5: (6, 101), 9: (10, 49)})
    check_examples(test, {2: (21, 6)})
    np.testing.assert_array_equal(test.targets_of(np.arange(6)), np.asarray(FLOWER_CLASSES) - 1)


def test_flowers_missing_and_malformed(tmp_path, pristine_downloads):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("flowers102", "test", root=tmp_path, image_size=SIZE)
    assert_names(str(e.value), "flowers-102/jpg", "imagelabels.mat", "setid.mat", "download")

    root = write_flowers(tmp_path / "a")
    setid = root / "flowers-102" / "setid.mat"
    setid.write_bytes(b"MATLAB? no, garbage" * 20)
    with pytest.raises(DatasetFormatError) as e:
        build_dataset("flowers102", "train", root=root, image_size=SIZE)
    assert_names(str(e.value), str(root / "flowers-102"), "'trnid'", "download")
    setid.write_bytes(b"")
    with pytest.raises(DatasetFormatError):
        build_dataset("flowers102", "train", root=root, image_size=SIZE)
    scipy.io.savemat(setid, {"train_ids": np.arange(1, 5)})
    with pytest.raises(DatasetFormatError, match="trnid"):
        build_dataset("flowers102", "train", root=root, image_size=SIZE)

    root = write_flowers(tmp_path / "b")
    scipy.io.savemat(root / "flowers-102" / "imagelabels.mat", {"labels": np.full((1, 24), 103)})
    with pytest.raises(DatasetFormatError, match="label 103 is outside 1..102"):
        build_dataset("flowers102", "train", root=root, image_size=SIZE)

    root = write_flowers(tmp_path / "c")
    (root / "flowers-102" / "jpg" / "image_00003.jpg").unlink()
    with pytest.raises(DatasetNotFoundError, match="image_00003.jpg"):
        build_dataset("flowers102", "train", root=root, image_size=SIZE)
    assert pristine_downloads == []


# ----------------------------------------------------------------------------- folders


def test_imagenet_folder_layout(tmp_path):
    root = write_image_tree(tmp_path / "imagenet", WNIDS, {"train": 9, "val": 6}, ext="JPEG")
    train = build_dataset("imagenet", "train", root=root, image_size=SIZE, augment=False)
    test = build_dataset("imagenet", "test", root=root, image_size=SIZE)  # the official val
    assert (len(train), len(test), train.classes) == (9, 6, WNIDS)
    # ImageFolder lists class by class: n01440764 holds images 0, 3, 6 of train
    check_examples(train, {0: (0, 0), 1: (3, 0), 3: (1, 1)})
    check_examples(test, {5: (500 + 5, 2)})
    assert SOURCES["imagenet"].val_fraction == 0.01
    assert len(build_dataset("imagenet", "val", root=root, image_size=SIZE)) == 1


def test_imagenet_missing_and_malformed(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("imagenet", "train", root=tmp_path / "none", image_size=SIZE)
    assert_names(str(e.value), str(tmp_path / "none"), "train/<wnid>/*.JPEG", "image-net.org")

    root = write_image_tree(tmp_path / "flat", WNIDS, {"train": 6})
    (root / "val").mkdir()
    write_jpeg(root / "val" / "ILSVRC2012_val_00000001.JPEG", 0)
    with pytest.raises(DatasetNotFoundError) as e:  # the val tar as shipped: not sorted
        build_dataset("imagenet", "test", root=root, image_size=SIZE)
    assert_names(str(e.value), "holds files but no class folders", "valprep.sh")

    root = write_image_tree(tmp_path / "odd", WNIDS, {"train": 6})
    write_image_tree(root, [*WNIDS[:2], "n99999999"], {"val": 3})
    with pytest.raises(DatasetFormatError) as e:
        build_dataset("imagenet", "test", root=root, image_size=SIZE)
    assert_names(str(e.value), "n01484850", "n99999999", "same class folders")
    with pytest.raises(ValueError, match="cannot be downloaded automatically"):
        build_dataset("imagenet", "train", root=root, image_size=SIZE, download=True)


def test_imagefolder_tree(tmp_path):
    classes = ["apple", "banana", "cherry"]
    root = write_image_tree(tmp_path / "fruit", classes, {"train": 30, "test": 9})
    train = build_dataset(f"imagefolder:{root}", "train", image_size=SIZE, augment=False)
    test = build_dataset(f"imagefolder:{root}", "test", image_size=SIZE)
    assert (len(train), len(test), train.classes) == (30, 9, classes)
    check_examples(train, {0: (0, 0), 10: (1, 1)})
    check_examples(test, {8: (500 + 8, 2)})
    val = build_dataset(f"imagefolder:{root}", "val", image_size=SIZE)
    assert len(val) == 3  # 10% of train
    # no test/: val/ is the test split
    other = write_image_tree(tmp_path / "other", classes, {"train": 6, "val": 3})
    assert len(build_dataset(f"imagefolder:{other}", "test", image_size=SIZE)) == 3


def test_imagefolder_missing_and_broken(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset(f"imagefolder:{tmp_path / 'none'}", "train", image_size=SIZE)
    assert_names(
        str(e.value), str(tmp_path / "none"), "train/<class>/<image>", "one folder per class"
    )
    root = tmp_path / "empty"
    (root / "train" / "cat").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError, match="no images in"):
        build_dataset(f"imagefolder:{root}", "train", image_size=SIZE)
    root = write_image_tree(tmp_path / "t", ["a", "b"], {"train": 4, "test": 2})
    bad = root / "train" / "b" / "0001.jpg"
    bad.write_bytes(b"\xff\xd8 truncated jpeg")
    ds = build_dataset(f"imagefolder:{root}", "train", image_size=SIZE)
    ds[0]  # a good one
    with pytest.raises(DatasetFormatError) as e:
        ds[2]
    assert_names(str(e.value), str(bad), "cannot decode")


def test_imagefolder_without_test_holds_out_a_fixed_part_of_train(tmp_path, capsys):
    root = write_image_tree(tmp_path / "t", ["a", "b", "c"], {"train": 30})  # no test/
    write_jpeg(root / "train" / "d" / "0000.jpg", 900)  # a class of one: never held out
    name = f"imagefolder:{root}"
    train = build_dataset(name, "train", image_size=SIZE, augment=False)
    test = build_dataset(name, "test", image_size=SIZE)

    def files(ds, under=root) -> set[str]:
        return {Path(f).relative_to(under).as_posix() for f in ds.files}

    assert (len(train), len(test)) == (25, 6)  # per class round(0.2 x 10)
    assert not files(train) & files(test) and len(files(train) | files(test)) == 31
    assert np.bincount(test.targets_of(np.arange(6)), minlength=4).tolist() == [2, 2, 2, 0]
    train[0], test[0]  # both read the images
    err = capsys.readouterr().err
    assert err.count("no test/ or val/ folder") == 1  # said once
    assert "its test split is 6 of its 31 train/ images (data.holdout: 0.2" in err
    # the same images wherever the tree lives (a hash of the path under train/)
    moved = shutil.copytree(root, tmp_path / "elsewhere")
    again = build_dataset(f"imagefolder:{moved}", "test", image_size=SIZE)
    assert files(again, moved) == files(test)
    # a larger fraction holds out those and more; minitrain and val come from the rest
    half = build_dataset(name, "test", image_size=SIZE, holdout=0.5)
    assert len(half) == 15 and files(test) < files(half)
    val = build_dataset(name, "val", image_size=SIZE)
    minitrain = build_dataset(name, "minitrain", image_size=SIZE)
    assert len(val) + len(minitrain) == 25


def test_every_undecodable_file_is_named_with_the_reason_alone(tmp_path, monkeypatch):
    root = write_image_tree(tmp_path / "t", ["a", "b"], {"train": 10})  # no test/
    bad = [root / "train" / "a" / "0002.jpg", root / "train" / "b" / "0005.jpg"]
    bad[0].write_bytes(bad[0].read_bytes()[:60])  # truncated
    bad[1].write_bytes(b"not an image")
    ds = build_dataset(f"imagefolder:{root}", "train", image_size=SIZE)
    with pytest.raises(DatasetFormatError) as e:
        [ds[i] for i in range(len(ds))]
    message = str(e.value)
    # both named in one error, though one of them is in the held-out test split
    assert "cannot decode 2 image file(s)" in message and "replace them" in message
    assert all(f"  {f}: " in message for f in bad)
    assert "avif" not in message and "_io." not in message and "0002.jpg'" not in message
    # a long list is bounded
    from vitscale import errors

    monkeypatch.setattr(errors, "LISTED", 1)
    with pytest.raises(DatasetFormatError, match=r"\n  \.\.\. and 1 more$"):
        [ds[i] for i in range(len(ds))]


def test_multilabel_tree(tmp_path):
    root = write_multilabel(tmp_path / "ml")
    train = build_dataset(f"multilabel:{root}", "train", image_size=SIZE, augment=False)
    test = build_dataset(f"multilabel:{root}", "test", image_size=SIZE)
    assert train.multilabel and train.num_classes == 4 and len(train) == 8
    image, target = train[0]  # train/cat/0000.jpg
    assert target.dtype == torch.float32 and target.tolist() == [1, 0, 1, 1]
    assert train[2][1].tolist() == [0, 1, 1, 0]  # train/dog/0001.jpg
    assert train[1][1].tolist() == [1, 0, 0, 0]  # train/cat/0004.jpg: no further labels
    assert test[0][1].tolist() == [1, 1, 0, 1]
    np.testing.assert_array_equal(train.targets_of(np.arange(8)), [0, 0, 1, 1, 2, 2, 3, 3])


def test_multilabel_malformed(tmp_path):
    root = write_multilabel(tmp_path / "ml")
    labels = root / "labels.tsv"
    name = f"multilabel:{root}"
    labels.unlink()
    with pytest.raises(DatasetNotFoundError, match="no labels.tsv"):
        build_dataset(name, "train", image_size=SIZE)
    labels.write_text("train/cat/0000.jpg grass\n")
    with pytest.raises(DatasetFormatError) as e:
        build_dataset(name, "train", image_size=SIZE)
    assert_names(str(e.value), f"{labels}:1", "<TAB>")
    labels.write_text("train/cat/0000.jpg\tgrass\ntrain/cat/0000.jpg\tunicorn\n")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{labels}:2: unknown label 'unicorn'")):
        build_dataset(name, "train", image_size=SIZE)
    labels.write_text("train/cat/9999.jpg\tgrass\n")
    with pytest.raises(DatasetFormatError, match="no image .*9999.jpg"):
        build_dataset(name, "train", image_size=SIZE)


# ----------------------------------------------------------------------------- downloads


def test_nothing_downloaded_unless_asked(tmp_path, pristine_downloads):
    for name in ("cifar10", "cifar100", "pets", "flowers102"):
        with pytest.raises(DatasetNotFoundError, match="download"):
            build_dataset(name, "train", root=tmp_path, image_size=SIZE)
    assert pristine_downloads == []
    # present data is not fetched again when download is on (presence, not MD5s, decides)
    write_cifar10(tmp_path)
    write_pets(tmp_path, trainval=1, test=1)
    write_flowers(tmp_path)
    for name in ("cifar10", "pets", "flowers102"):
        build_dataset(name, "train", root=tmp_path, image_size=SIZE, download=True)
    assert pristine_downloads == []
    # download=True on missing data goes to torchvision's downloader
    with pytest.raises(DatasetNotFoundError):
        build_dataset("cifar100", "train", root=tmp_path / "fresh", image_size=SIZE, download=True)
    assert len(pristine_downloads) == 1 and "cifar-100-python.tar.gz" in str(pristine_downloads[0])


def test_torchvision_classes_still_check_what_we_rely_on():
    """The MD5-free CIFAR subclasses keep torchvision's file lists."""
    from vitscale.data.sources.load import _CIFAR

    assert [f for f, _ in _CIFAR["cifar10"].train_list] == [
        f for f, _ in datasets.CIFAR10.train_list
    ]
    assert _CIFAR["cifar100"].meta["key"] == "fine_label_names"


# ----------------------------------------------------------------------------- transforms


def test_eval_transform_resizes_by_256_over_224_and_centre_crops():
    # 56 px: resize the shorter side to 64, crop the centre 56
    pattern = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    out = eval_transform(56)(Image.fromarray(pattern))
    expected = torch.from_numpy(pattern[4:60, 4:60]).permute(2, 0, 1).float() / 127.5 - 1.0
    assert out.shape == (3, 56, 56)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    for size in (32, 224, 384):
        t = eval_transform(size)
        assert t.transforms[0].size == [round(size * EVAL_RESIZE_RATIO)]  # 256 at 224, 439 at 384
        assert t(Image.new("RGB", (500, 300), (255, 0, 128))).shape == (3, size, size)


def test_train_transform_inception_crop_flip_signed_range():
    t = train_transform(48)
    crop, flip = t.transforms[0], t.transforms[1]
    assert crop.scale == (0.08, 1.0) and crop.ratio == pytest.approx((3 / 4, 4 / 3))
    assert flip.p == 0.5
    gradient = np.tile(np.arange(0, 256, 2, dtype=np.uint8), (96, 1))
    image = Image.fromarray(np.stack([gradient] * 3, axis=-1))  # dark left, bright right
    torch.manual_seed(0)
    outs = torch.stack([t(image) for _ in range(64)])
    assert outs.shape == (64, 3, 48, 48) and outs.min() >= -1.0 and outs.max() <= 1.0
    increasing = (outs[:, 0, 0, -1] > outs[:, 0, 0, 0]).float().mean()
    assert 0.2 < increasing < 0.8  # flipped about half the time
    assert len({round(float(o.std()), 4) for o in outs}) > 32  # random crops
    assert train_transform(32)(Image.new("RGB", (8, 8), (255, 255, 255))).eq(1.0).all()
    assert eval_transform(32)(Image.new("RGB", (8, 8), (0, 0, 0))).eq(-1.0).all()
