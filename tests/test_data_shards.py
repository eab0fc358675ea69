"""Sharded sets on real tar files: conversion, indexing, subsets, the stream,
and every bad input a user's shards have shown.

Shards are written two ways (:mod:`tests.helpers.datasets`): by ``vitscale data shard``
from the real on-disk formats (an ImageFolder tree, a multi-label tree, CIFAR's pickled
batches, the synthetic set), and directly with WebDataset's ``TarWriter`` (as img2dataset
or a user's own script would) and then indexed by ``vitscale data index``. Images are
JPEGs of one flat colour per example (``colour(i)``), so a decoded example names the
file it came from through the real decoder and transforms.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from vitscale.cli import main
from vitscale.data import (
    Batch,
    DatasetFormatError,
    DatasetNotFoundError,
    build_dataset,
    build_loader,
)
from vitscale.data.shards.index import Shard, ShardIndex, select
from vitscale.data.shards.order import WindowedOrder
from vitscale.data.shards.write import index_shards, shard_dataset

from .helpers.datasets import (
    bad_set,
    jpeg_bytes,
    sample,
    write_cifar10,
    write_image_tree,
    write_jpeg_shards,
    write_multilabel,
    write_tar,
)

PROPS = settings(max_examples=40, deadline=None)


def key_of(ds, i: int) -> str:
    path, inner = ds.where(i)
    return ds._reader.sample(path, ds._nsamples[ds._locate(i)[0]], inner, only=())["__key__"]


# ----------------------------------------------------------------------------- data shard


def test_shard_an_imagefolder_copies_jpegs_in_a_random_order(tmp_path):
    tree = write_image_tree(tmp_path / "tree", ["a", "b", "c"], {"train": 30, "test": 7})
    index = shard_dataset(f"imagefolder:{tree}", tmp_path / "sh", shard_size=8, progress=False)
    meta = json.loads(index.read_text())
    assert [s["nsamples"] for s in meta["splits"]["train"]] == [8, 8, 8, 6]
    assert [s["nsamples"] for s in meta["splits"]["test"]] == [7]
    assert meta["classes"] == ["a", "b", "c"] and not meta["multilabel"] and meta["crop"]
    seen = {}
    for shard in meta["splits"]["train"]:
        with tarfile.open(tmp_path / "sh" / shard["url"]) as tf:
            names = tf.getnames()
            assert [n.rsplit(".", 1)[1] for n in names[:2]] == ["cls", "jpg"]  # one key
            assert names[0].rsplit(".", 1)[0] == names[1].rsplit(".", 1)[0]
            for m in tf:
                if m.name.endswith(".jpg"):
                    key = m.name[: -len(".jpg")]  # train/<class>/<file>_jpg
                    rel = key.rsplit("_", 1)[0] + ".jpg"
                    assert tf.extractfile(m).read() == (tree / rel).read_bytes()  # byte for byte
                    seen[rel] = key
                else:
                    label = int(tf.extractfile(m).read())
                    assert ["a", "b", "c"][label] == m.name.split("/")[1]
    assert len(seen) == 30
    classes_in_order = [k.split("/")[1] for k in seen.values()]
    assert classes_in_order != sorted(classes_in_order)  # not the tree's class-by-class order
    ds = build_dataset(f"shards:{tmp_path / 'sh'}", "test", image_size=16)
    assert len(ds) == 7 and ds.num_classes == 3 and ds[0][0].shape == (3, 16, 16)
    # stored pre-resized: the shorter side 8 (the tree's JPEGs are 12 x 10)
    shard_dataset(
        f"imagefolder:{tree}", tmp_path / "small", shard_size=40, shorter_side=8, progress=False
    )
    small = build_dataset(f"shards:{tmp_path / 'small'}", "train", image_size=16)
    from vitscale.data.shards.read import decode

    path, inner = small.where(0)
    raw = small._reader.sample(path, 30, inner)
    assert tuple(decode(raw[".jpg"]).shape) == (3, 8, 10)


def test_shard_cifar_is_lossless_and_multilabel_keeps_every_label(tmp_path):
    root = write_cifar10(tmp_path / "cifar")
    from vitscale.data.shards.read import decode

    shard_dataset("cifar10", tmp_path / "c", shard_size=7, root=str(root), progress=False)
    shards = build_dataset(f"shards:{tmp_path / 'c'}", "test", image_size=32)
    original = build_dataset("cifar10", "test", root=root, image_size=32)
    assert len(shards) == len(original) == 10
    for i in range(len(shards)):
        path, inner = shards.where(i)
        raw = shards._reader.sample(path, shards._nsamples[shards._locate(i)[0]], inner)
        j = int(raw["__key__"].rsplit("-", 1)[1])
        pixels = torch.from_numpy(original.images.data[j]).permute(2, 0, 1)
        assert torch.equal(decode(raw[".png"]), pixels)  # PNG: lossless
        assert shards[i][1] == original[j][1]
    tree = write_multilabel(tmp_path / "ml")
    shard_dataset(f"multilabel:{tree}", tmp_path / "m", shard_size=3, progress=False)
    ml = build_dataset(f"shards:{tmp_path / 'm'}", "train", image_size=16, augment=False)
    source = build_dataset(f"multilabel:{tree}", "train", image_size=16, augment=False)
    files = {Path(f).relative_to(tree).as_posix(): n for n, f in enumerate(source.files)}
    assert ml.multilabel and ml.num_classes == 4 and len(ml) == 8
    for i in range(len(ml)):
        rel = key_of(ml, i).rsplit("_", 1)[0] + ".jpg"
        assert ml[i][1].tolist() == source[files[rel]][1].tolist()


def test_shard_the_synthetic_set_framed_and_quantised(tmp_path):
    shard_dataset(
        "synthetic-textures", tmp_path / "s", shard_size=25, max_examples=60, progress=False
    )
    ds = build_dataset(f"shards:{tmp_path / 's'}", "train", image_size=32)
    rendered = build_dataset("synthetic-textures", "train", image_size=32)
    assert len(ds) == 60 and not ds.augment  # framed: no crop, no augmentation
    for i in (0, 31, 59):
        j = int(key_of(ds, i).rsplit("-", 1)[1])
        image, label = ds[i]
        assert (image - rendered[j][0]).abs().max() <= 1 / 127.5 + 1e-6  # 8-bit PNG
        assert label == rendered[j][1]
    with pytest.raises(ValueError, match="no augmentation"):
        build_dataset(f"shards:{tmp_path / 's'}", "train", image_size=32, augment=True)


def test_interrupted_conversion_resumes_to_the_same_bytes(tmp_path, monkeypatch, capsys):
    from vitscale.data.shards import write as shard_write

    tree = write_image_tree(tmp_path / "tree", ["a", "b"], {"train": 20, "test": 4})
    args = ["data", "shard", f"imagefolder:{tree}", "--shard-size", "3"]
    assert main([*args, str(tmp_path / "whole"), "--workers", "2"]) == 0  # in parallel
    real, written = shard_write._write_shard, []

    def interrupt_at_the_fourth(job):
        if len(written) == 3:
            raise KeyboardInterrupt
        written.append(job)
        return real(job)

    monkeypatch.setattr(shard_write, "_write_shard", interrupt_at_the_fourth)
    part = tmp_path / "part"
    assert main([*args, str(part)]) == 130
    assert "run the same command again to resume" in capsys.readouterr().err
    assert len(list(part.glob("*.tar"))) == 3 and not (part / "index.json").exists()
    (part / ".train-000004.tar.tmp-1").write_bytes(b"a killed run's half shard")
    monkeypatch.setattr(shard_write, "_write_shard", real)
    assert main([*args, str(part)]) == 0
    whole = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert sorted(p.name for p in part.iterdir()) == whole  # the stale temporary is gone
    for name in whole:  # resumed, one process == uninterrupted, two: the same bytes
        assert (part / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    # other settings into the same folder, or a folder with other files: refused
    assert main(["data", "shard", f"imagefolder:{tree}", str(part), "--shard-size", "4"]) == 2
    assert "shard_size differ" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main([*args, str(tmp_path / "busy")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_a_full_disk_keeps_finished_shards_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    import errno

    from vitscale.data.shards import write as shard_write

    tree = write_image_tree(tmp_path / "tree", ["a", "b"], {"train": 9, "test": 2})
    real, calls = shard_write._write_shard, []

    def no_space(self, obj):
        raise OSError(errno.ENOSPC, "No space left on device")

    def disk_full_on_the_second(job):
        calls.append(job)
        if len(calls) == 2:
            import webdataset

            monkeypatch.setattr(webdataset.TarWriter, "write", no_space)
        return real(job)

    monkeypatch.setattr(shard_write, "_write_shard", disk_full_on_the_second)
    dest = tmp_path / "d"
    args = ["data", "shard", f"imagefolder:{tree}", str(dest), "--shard-size", "4"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert err.startswith("error: cannot write") and "No space left on device" in err
    assert "run the same command again" in err
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == [
        "train-000000.tar"
    ]
    assert not list(dest.glob(".*.tmp-*"))  # the half-written shard was removed
    monkeypatch.undo()
    assert main(args) == 0 and (dest / "index.json").is_file()


# ----------------------------------------------------------------------------- data index


def test_index_shards_made_elsewhere(tmp_path):
    root = tmp_path / "web"
    write_tar(root / "00000.tar", [sample(i, label=[i % 3, 4]) for i in range(5)])
    write_tar(root / "00001.tar", [sample(i, label=[2]) for i in range(5, 8)])
    write_tar(root / "val-00000.tar", [sample(i, label=[1, 0]) for i in range(8, 10)])
    meta = json.loads(index_shards(root, progress=False).read_text())
    assert meta["classes"] == ["0", "1", "2", "3", "4"] and meta["multilabel"]
    assert [(s["url"], s["nsamples"]) for s in meta["splits"]["train"]] == [
        ("00000.tar", 5),
        ("00001.tar", 3),
    ]
    assert meta["splits"]["test"][0]["url"] == "val-00000.tar"
    ds = build_dataset(f"shards:{root}", "train", image_size=16, augment=False)
    assert ds[1][1].tolist() == [0, 1, 0, 0, 1] and ds.targets_of(np.arange(8)).tolist() == [
        0,
        1,
        2,
        0,
        1,
        2,
        2,
        2,
    ]
    # class names in the labels, and a class file giving their order
    named = tmp_path / "named"
    write_tar(named / "a.tar", [sample(i, label=["dog", "cat"][i % 2]) for i in range(4)])
    (tmp_path / "classes.txt").write_text("dog\ncat\nbird\n")
    assert json.loads(index_shards(named, progress=False).read_text())["classes"] == ["cat", "dog"]
    index_shards(named, classes_file=tmp_path / "classes.txt", progress=False)
    ds = build_dataset(f"shards:{named}", "train", image_size=16)
    assert ds.classes == ["dog", "cat", "bird"] and ds.targets_of([0, 1]).tolist() == [0, 1]


def test_index_warns_about_class_sorted_shards(tmp_path, capsys):
    for s in range(4):  # one class per shard: the worst order for a shuffle window
        write_tar(tmp_path / "sorted" / f"{s}.tar", [sample(i, label=s) for i in range(8)])
        write_tar(tmp_path / "mixed" / f"{s}.tar", [sample(i) for i in range(8)])
    index_shards(tmp_path / "sorted", progress=False)
    assert "look written class by class" in capsys.readouterr().err
    index_shards(tmp_path / "mixed", progress=False)
    assert "warning" not in capsys.readouterr().err


def _index_error(root: Path, *, main_args=None, capsys=None) -> str:
    assert main(["data", "index", str(root), *(main_args or [])]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    err = err[err.index("error: ") :]  # after the progress bar
    assert not (root / "index.json").exists()
    return err


def test_index_rejects_bad_shards_naming_shard_and_key(tmp_path, capsys):
    good = [sample(i) for i in range(4)]
    # a truncated tar: cut inside a member, and cut exactly at a member boundary
    for cut in ("inside", "boundary"):
        root = tmp_path / cut
        write_tar(root / "train-0.tar", good)
        data = (root / "train-0.tar").read_bytes()
        with tarfile.open(root / "train-0.tar") as tf:
            last = tf.getmembers()[-1]
        end = last.offset_data + (-(-last.size // 512) * 512)
        (root / "train-0.tar").write_bytes(data[: end - 100 if cut == "inside" else end])
        err = _index_error(root, capsys=capsys)
        assert "train-0.tar" in err and "truncated" in err
    root = tmp_path / "nolabel"
    write_tar(root / "train-0.tar", [*good, sample(9, label=None)])
    err = _index_error(root, capsys=capsys)
    assert "img00009" in err and "no label" in err
    root = tmp_path / "noimage"
    write_tar(root / "train-0.tar", [*good, {"__key__": "img00077", "cls": b"1"}])
    err = _index_error(root, capsys=capsys)
    assert "img00077" in err and "no image" in err
    root = tmp_path / "outside"
    write_tar(root / "train-0.tar", [*good, sample(5, label="7")])
    (tmp_path / "four.txt").write_text("a\nb\nc\nd\n")
    err = _index_error(root, main_args=["--classes", str(tmp_path / "four.txt")], capsys=capsys)
    assert "train-0.tar" in err and "label 7 is outside the class list (4 classes" in err


def test_verify_names_every_image_that_does_not_decode(tmp_path, capsys):
    tree = write_image_tree(tmp_path / "tree", ["a", "b"], {"train": 12})  # no test/
    for rel in ("a/0002.jpg", "b/0005.jpg"):
        (tree / "train" / rel).write_bytes(b"not an image")
    src = f"imagefolder:{tree}"
    # shard --verify: every bad file named, the reason alone; no index
    assert main(["data", "shard", src, str(tmp_path / "v"), "--shard-size", "4", "--verify"]) == 2
    err = capsys.readouterr().err
    assert "cannot decode 2 image file(s)" in err and "Traceback" not in err
    assert f"{tree}/train/a/0002.jpg: " in err and f"{tree}/train/b/0005.jpg: " in err
    assert "avif" not in err and not (tmp_path / "v" / "index.json").exists()
    # without it the files are copied as they are, and it says so
    assert main(["data", "shard", src, str(tmp_path / "u"), "--shard-size", "4"]) == 0
    assert "copied without decoding them" in capsys.readouterr().err
    meta = json.loads((tmp_path / "u" / "index.json").read_text())
    held_out = sum(s["nsamples"] for s in meta["splits"]["test"])
    assert held_out == 2 and sum(s["nsamples"] for s in meta["splits"]["train"]) == 10
    # index --verify decodes them and names both examples; without it, they are indexed
    copied = tmp_path / "copied"
    copied.mkdir()
    for tar in (tmp_path / "u").glob("*.tar"):
        (copied / tar.name).write_bytes(tar.read_bytes())
    err = _index_error(copied, main_args=["--verify"], capsys=capsys)
    assert "2 problem(s)" in err and "avif" not in err
    assert "'train/a/0002_jpg': cannot decode the image" in err and "'train/b/0005_jpg'" in err
    assert main(["data", "index", str(copied)]) == 0


# ----------------------------------------------------------------------------- subsets


def _index(counts: list[int]) -> ShardIndex:
    shards = tuple(Shard(f"train-{i:06d}.tar", n, 1000 * n) for i, n in enumerate(counts))
    return ShardIndex(
        folder=Path("/nowhere"),
        classes=("a",),
        multilabel=False,
        crop=True,
        splits={"train": shards},
        source="test",
        sha256="0" * 64,
    )


def _examples(sel) -> set[tuple[str, int]]:
    return {(s.url, k) for s, t in zip(sel.shards, sel.takes, strict=True) for k in range(t)}


@PROPS
@given(
    counts=st.lists(st.integers(1, 50), min_size=1, max_size=40),
    fractions=st.lists(st.floats(0.001, 1.0), min_size=2, max_size=4),
    seed=st.integers(0, 2**40),
)
def test_sharded_subsets_are_exact_and_nested(counts, fractions, seed):
    index = _index(counts)
    total = sum(counts)
    sizes = sorted({max(1, int(f * total)) for f in fractions})
    picks = [
        select(index, index.splits["train"], split="train", subset=m, seed=seed) for m in sizes
    ]
    for m, sel in zip(sizes, picks, strict=True):
        assert sel.num_examples == m == sel.record["examples"]  # exact count
        assert (sel.takes[:-1] == [s.nsamples for s in sel.shards[:-1]]).all()  # whole shards
        assert 1 <= sel.takes[-1] <= sel.shards[-1].nsamples
        again = select(index, index.splits["train"], split="train", subset=m, seed=seed)
        assert again.record == sel.record  # identical wherever it is computed
    for small, large in zip(picks, picks[1:], strict=False):
        assert _examples(small) <= _examples(large)  # 9M inside 30M inside 90M
        assert [s.url for s in small.shards[:-1]] == [
            s.url for s in large.shards[: len(small.shards) - 1]
        ]
    with pytest.raises(ValueError, match="only"):
        select(index, index.splits["train"], split="train", subset=total + 1, seed=seed)


def test_the_record_names_the_exact_examples():
    index = _index([10] * 20)
    a = select(index, index.splits["train"], split="train", subset="95", seed=3)
    b = select(index, index.splits["train"], split="train", subset=95, seed=4)
    assert a.record["shards"] == 10 and a.record["last_shard"]["take"] == 5
    assert a.record["sha256"] != b.record["sha256"]  # another seed, other shards
    whole = select(index, index.splits["train"], split="train", subset=None, seed=3)
    assert [s.url for s in whole.shards] == [s.url for s in index.splits["train"]]


# ----------------------------------------------------------------------------- the stream


@PROPS
@given(
    takes=st.lists(st.integers(1, 30), min_size=1, max_size=25),
    window=st.integers(1, 8),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 5),
)
def test_every_epoch_is_a_permutation_read_window_by_window(takes, window, seed, epoch):
    order = WindowedOrder(takes=np.asarray(takes), seed=seed, window=window)
    n = sum(takes)
    positions = np.arange(epoch * n, (epoch + 1) * n)
    examples = order(positions)
    assert sorted(examples.tolist()) == list(range(n))  # no duplicates, no gaps
    piece_of = np.repeat(np.arange(len(takes)), takes)
    windows = order.by_epoch(  # (epoch, window) of each position, as one int
        positions, lambda e, offsets: e * len(takes) + order.epoch(e).window(offsets)
    )
    # windows are consecutive runs of positions; each reads at most `window` shards
    assert (np.diff(windows) >= 0).all()
    for w in np.unique(windows):
        assert len(np.unique(piece_of[examples[windows == w]])) <= window
    assert (order(positions[::7]) == examples[::7]).all()  # any position, computed alone


def test_shuffle_label_autocorrelation():
    """Shards of one class each (the worst order a user's shards can have): the stream's
    label autocorrelation is the window's closed form, and nil for randomly written shards."""

    def autocorrelation(labels: np.ndarray, lag: int) -> float:
        p = np.bincount(labels) / len(labels)
        chance = (p**2).sum()
        return ((labels[:-lag] == labels[lag:]).mean() - chance) / (1 - chance)

    classes, per_shard = 64, 200
    takes = np.full(classes, per_shard)
    stream = np.arange(0, 2 * classes * per_shard)
    for window in (1, 4, 16):
        labels = WindowedOrder(takes=takes, seed=0, window=window)(stream) // per_shard
        chance = 1 / classes
        expected = (1 / window - chance) / (1 - chance)  # same class within a window
        assert autocorrelation(labels, 1) == pytest.approx(expected, abs=0.03)
    shuffled = np.random.default_rng(0).integers(0, classes, classes * per_shard)
    labels = shuffled[WindowedOrder(takes=takes, seed=0, window=4)(stream)]
    assert abs(autocorrelation(labels, 1)) < 0.01


def test_loader_ranks_workers_and_restarts_read_the_same_examples(tmp_path):
    """Augmentation on: 1 process == 2 processes (slice by slice), with or without a
    DataLoader worker, and a restart at step 2 == continuing, bit for bit."""
    root = write_jpeg_shards(tmp_path / "sh", shards=5, per_shard=7)
    ds = build_dataset(f"shards:{root}", "train", image_size=16, subset=31, seed=2)
    assert ds.augment and len(ds) == 31
    whole = iter(build_loader(ds, batch_size=12, seed=5))
    ranks = [
        iter(build_loader(ds, batch_size=6, seed=5, num_replicas=2, rank=r, num_workers=r))
        for r in range(2)
    ]
    batches = [next(whole) for _ in range(4)]  # 48 examples: past the first epoch
    for step in range(4):
        parts = [next(it) for it in ranks]
        assert torch.equal(torch.cat([p.images for p in parts]), batches[step].images)
        assert torch.equal(torch.cat([p.targets for p in parts]), batches[step].targets)
    resumed = next(iter(build_loader(ds, batch_size=12, seed=5, start_step=2)))
    assert torch.equal(resumed.images, batches[2].images)
    assert not torch.equal(batches[0].images, batches[1].images)
    # the first epoch holds every selected example once (the evaluation view shows which)
    plain = build_dataset(
        f"shards:{root}", "train", image_size=16, subset=31, seed=2, augment=False
    )
    order = WindowedOrder(takes=plain.takes, seed=5, window=plain.window)
    first_epoch = order(np.arange(31))
    assert sorted(first_epoch.tolist()) == list(range(31))
    targets = torch.cat([b.targets for b in batches])[:31]
    assert targets.tolist() == plain.targets_of(first_epoch).tolist()


def test_eval_view_is_a_batch_of_the_selected_examples(tmp_path):
    root = write_jpeg_shards(tmp_path / "sh", shards=2, per_shard=3)
    test = build_dataset(f"shards:{root}", "test", image_size=16)
    assert not test.augment
    batch = test.__getitems__([0, 1, 2])
    assert isinstance(batch, Batch) and batch.images.shape == (3, 3, 16, 16)
    assert batch.targets.tolist() == [6 % 4, 7 % 4, 8 % 4]  # examples 6-8 (after train's)
    assert torch.equal(batch.images[1], test[1][0])  # deterministic evaluation view


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "bad, reason",
    [
        ({"jpg": b"\xff\xd8 not a jpeg at all", "cls": b"1"}, "cannot decode the image"),
        ({"jpg": jpeg_bytes(1)[:60], "cls": b"1"}, "cannot decode the image"),
        ({"jpg": jpeg_bytes(1)}, "no label"),
        (
            {"jpg": jpeg_bytes(1), "cls": b"9"},
            "label 9 is outside the class list (0..3, 4 classes)",
        ),
        (
            {"jpg": jpeg_bytes(1), "json": b'{"labels": ["zebra"]}'},
            "'zebra' is not in the class list",
        ),
    ],
)
def test_a_bad_example_names_shard_and_key(tmp_path, bad, reason):
    root = bad_set(tmp_path / "sh", bad)
    ds = build_dataset(f"shards:{root}", "train", image_size=16)
    ds[0]  # a good one
    with pytest.raises(DatasetFormatError) as e:
        ds[6]
    assert "train-000001.tar" in str(e.value) and "'img00099'" in str(e.value)
    assert reason in str(e.value)
    workers = 1 if "decode" in reason else 0  # a worker's error comes back as it is
    loader = build_loader(ds, batch_size=8, seed=0, num_workers=workers)  # a whole epoch
    with pytest.raises(DatasetFormatError) as e:  # raised here, not wrapped by the worker
        next(iter(loader))
    assert "'img00099'" in str(e.value) and "data.skip_bad_samples" in str(e.value)


def test_skipped_examples_are_replaced_and_reported(tmp_path):
    root = bad_set(tmp_path / "sh", {"jpg": b"broken", "cls": b"1"})
    ds = build_dataset(f"shards:{root}", "train", image_size=16, skip_bad_samples=1)
    batch = next(iter(build_loader(ds, batch_size=8, seed=0)))
    assert batch.images.shape == (8, 3, 16, 16)  # never a shorter batch
    (skip,) = batch.skipped
    assert "train-000001.tar" in skip and "img00099" in skip and "cannot decode" in skip


def test_missing_or_truncated_shards_stop_before_training(tmp_path):
    root = write_jpeg_shards(tmp_path / "sh", shards=3, per_shard=4)
    name = f"shards:{root}"
    shard = root / "train-000001.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFormatError, match=r"train-000001\.tar is .* bytes but the index"):
        build_dataset(name, "train", image_size=16)
    shard.unlink()
    with pytest.raises(DatasetNotFoundError, match=r"1 of the 3 shards are missing.*train-000001"):
        build_dataset(name, "train", image_size=16)
    from vitscale.data import check_available

    (message,) = check_available(name)
    assert "train-000001.tar" in message
    with pytest.raises(DatasetNotFoundError, match="not in the train split"):
        build_dataset(f"shards:{root}/train-{{000000..000003}}.tar", "train", image_size=16)
    with pytest.raises(DatasetNotFoundError, match="no index.json"):
        build_dataset(f"shards:{tmp_path}", "train", image_size=16)
    with pytest.raises(ValueError, match="asks for 13 examples but the split has only 12"):
        build_dataset(name, "train", image_size=16, subset=13)
    with pytest.raises(ValueError, match="not a URL"):
        build_dataset("shards:s3://bucket/train-{0..9}.tar", "train", image_size=16)


def test_a_pattern_selects_shards_of_the_index(tmp_path):
    root = write_jpeg_shards(tmp_path / "sh", shards=4, per_shard=3)
    ds = build_dataset(f"shards:{root}/train-{{000001..000002}}.tar", "train", image_size=16)
    assert len(ds) == 6 and ds.selection["pattern"] == "train-{000001..000002}.tar"
    glob = build_dataset(f"shards:{root}/train-00000[0-2].tar", "train", image_size=16)
    assert len(glob) == 9
    from vitscale.data import known_size

    assert known_size(f"shards:{root}") == 12 and known_size(f"shards:{tmp_path}/nothing") is None


# ----------------------------------------------------------------------------- CLI


def test_data_list_and_preview_on_shards(tmp_path, capsys):
    root = write_jpeg_shards(tmp_path / "sh", shards=4, per_shard=5)
    name = f"shards:{root}"
    assert main(["data", "list", name, "--subset", "12", "--seed", "1", "--shards"]) == 0
    out = capsys.readouterr().out
    assert "4 classes (single-label)" in out and "train: 20 examples in 4 shards" in out
    assert "subset 12 (seed 1): 12 examples from 3 of 4 shards" in out
    assert main(["data", "list", name, "--subset", "12", "--seed", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    ds = build_dataset(name, "train", image_size=16, subset=12, seed=1)
    assert row["selection"] == ds.selection and row["splits"]["test"]["examples"] == 5
    out = tmp_path / "p.png"
    assert main(["data", "preview", name, "--out", str(out), "--rows", "2", "--cols", "3"]) == 0
    assert Image.open(out).format == "PNG"
    assert main(["data", "list", f"shards:{tmp_path}/none"]) == 2
    assert main(["data", "list", name, "--subset", "21"]) == 2
    err = capsys.readouterr().err
    assert "only 20" in err and "Traceback" not in err


def test_torchvision_and_pil_decode_the_same_pixels():
    """The loader decodes with torchvision.io (faster) and falls back to PIL where a
    torchvision no longer decodes images: both are libjpeg-turbo, the pixels must agree."""
    from matplotlib.cbook import get_sample_data

    from vitscale.data.shards.read import decode_pil, decode_torchvision

    photo = Image.open(get_sample_data("grace_hopper.jpg", asfileobj=False))  # a real photo
    for i, (quality, subsampling) in enumerate([(95, 0), (90, 2), (75, 1)]):
        for image in (photo.resize((97 + 13 * i, 61 + 7 * i)), photo.convert("L")):
            out = io.BytesIO()
            image.save(out, format="JPEG", quality=quality, subsampling=subsampling)
            assert torch.equal(decode_torchvision(out.getvalue()), decode_pil(out.getvalue()))
    out = io.BytesIO()
    photo.resize((33, 21)).save(out, format="PNG")
    assert torch.equal(decode_torchvision(out.getvalue()), decode_pil(out.getvalue()))
    for broken in (b"", b"\xff\xd8 not a jpeg", jpeg_bytes(3)[:80]):
        for fn in (decode_pil, decode_torchvision):
            with pytest.raises(ValueError, match="cannot decode the image"):
                fn(broken)
