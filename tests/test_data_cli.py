"""``vitscale data list`` and ``vitscale data preview``."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from vitscale.cli import main
from vitscale.data.preview import pick_examples, sample_grid
from vitscale.data.registry import dataset_names
from vitscale.data.synthetic.render import SyntheticImages

from .helpers.datasets import write_image_tree


def test_data_list(capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name in dataset_names():
        assert f"\n{name}\n" in f"\n{out}"
    assert "classes: 256; splits: train 1,000,000,000, val 10,000, test 10,000" in out
    assert (
        "classes: 37; splits: train 3,680, test 3,669; val 10% of train "
        "(eval.finetune.val_fraction)" in out
    )
    assert main(["data", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(dataset_names())


def test_data_list_names_an_own_sets_classes_splits_and_held_out_parts(tmp_path, capsys):
    mine = write_image_tree(tmp_path / "mine", ["ant", "bee", "cow"], {"train": 30})
    assert main(["data", "list", f"imagefolder:{mine}"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1:] == [
        "    3 classes (single-label; the smallest has 8 train examples): ant, bee, cow",
        "    train: 24 examples (minitrain 22 + val 2)",
        "    val: 2 examples, held out of train: eval.finetune.val_fraction 0.1 (fine-tuning's "
        "lr choice)",
        "    test: 6 examples, held out of train/: data.holdout 0.2 per class",
    ]
    assert "no test/ or val/ folder" in captured.err  # the loader's own note, once
    tree = write_image_tree(tmp_path / "tree", ["ant", "bee"], {"train": 8, "val": 4})
    assert main(["data", "list", f"imagefolder:{tree}", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["splits"] == {"train": 8, "minitrain": 7, "val": 1, "test": 4}
    assert row["test_from"] == "the val/ folder" and row["classes"] == ["ant", "bee"]
    assert main(["data", "list", f"imagefolder:{tmp_path / 'none'}"]) == 2
    assert "nothing under" in capsys.readouterr().err


def test_data_preview_synthetic(tmp_path, capsys):
    out = tmp_path / "sub" / "synth.png"
    args = ["data", "preview", "synthetic", "--out", str(out), "--rows", "3", "--cols", "4"]
    assert main([*args, "--image-size", "48"]) == 0
    assert str(out) in capsys.readouterr().out
    image = Image.open(out)
    assert image.format == "PNG"
    tile = 96  # 48 px shown at 2x
    assert image.height > 3 * tile and image.width >= 4 * tile
    pixels = np.asarray(image.convert("RGB"))
    assert pixels.std() > 30  # images, not a blank canvas


def test_preview_rows_are_classes_and_captions_name_them():
    ds = SyntheticImages("synthetic-textures", split="test", image_size=32)
    classes, indices = pick_examples(ds, rows=4, cols=5)
    assert classes == [0, 3, 6, 9] and all(len(row) == 5 for row in indices)
    for c, row in zip(classes, indices, strict=True):
        assert (ds.targets_of(np.asarray(row)) == c).all()
    captions, images = sample_grid(ds, rows=4, cols=5)
    assert captions[1] == "3: falling diagonal stripes"
    assert images[0].shape == (5, 3, 32, 32)
    up = SyntheticImages("synthetic", split="train", image_size=32)
    classes, indices = pick_examples(up, rows=8, cols=2)  # stops after one scan block
    assert classes[-1] == 255 and indices[-1] == [255, 511]


def test_data_preview_real_source_and_errors(tmp_path, capsys):
    root = write_image_tree(tmp_path / "fruit", ["apple", "pear"], {"train": 6, "test": 2})
    out = tmp_path / "fruit.png"
    assert (
        main(["data", "preview", f"imagefolder:{root}", "--out", str(out), "--image-size", "32"])
        == 0
    )
    assert Image.open(out).size[1] > 2 * 96
    capsys.readouterr()
    assert main(["data", "preview", "nonsense", "--out", str(out)]) == 2
    assert "valid: synthetic" in capsys.readouterr().err
    assert main(["data", "preview", "cifar10", "--root", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "none") in err and "download" in err
    assert main(["data", "preview", "synthetic", "--image-size", "500"]) == 2
