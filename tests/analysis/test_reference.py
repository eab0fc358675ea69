"""The JFT learning curves (analysis.reference.jft): shipped as package data beside their
source and license, read into the frames our runs give, and their ImageNet crossover."""

from __future__ import annotations

import hashlib
import re
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import reference
from analysis.crossover import crossovers
from analysis.figures import training_curves
from analysis.reference import jft
from vitscale import flops
from vitscale.catalog import model_columns
from vitscale.record.cells import HISTORY_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
# The file as released (google-research/google-research, revisiting_neural_scaling_laws/
# data/benchmark.vision.csv, commit 9853680c): 993,655 bytes.
SHA256 = "23b00692d71e58aa5a2a941e831d57688e0977fdcf5f5125ff7b64283b5d9e83"


def test_data_is_the_released_file_with_its_source_and_license_beside_it():
    data = files("analysis.reference").joinpath(jft.FILE).read_bytes()
    assert len(data) == 993_655 and hashlib.sha256(data).hexdigest() == SHA256
    notice = files("analysis.reference").joinpath("README.md").read_text()
    for fact in ("google-research/google-research", "9853680c", "Apache License 2.0", SHA256):
        assert fact in notice
    assert "Apache License" in files("analysis.reference").joinpath("LICENSE-2.0.txt").read_text()
    declared = re.search(
        r'^"analysis.reference" = \[(.*)\]$', (ROOT / "pyproject.toml").read_text(), re.M
    )
    patterns = re.findall(r'"([^"]+)"', declared.group(1))  # [tool.setuptools.package-data]
    folder = ROOT / "analysis" / "reference"
    shipped = {p.name for pattern in patterns for p in folder.glob(pattern)}
    assert {jft.FILE, "README.md", "LICENSE-2.0.txt"} <= shipped


def test_measurements_in_our_names_and_units():
    m = jft.measurements()
    assert list(m.columns) == list(jft.MEASUREMENT_COLUMNS)
    assert len(m) == 18_883 and m.groupby(["model", "metric"]).ngroups == 72
    assert m["training"].sum() == 3_902 and (~m["training"]).sum() == 14_981
    assert set(m["shots"]) == {5, 10, 25}
    assert set(m["dataset"]) == {"imagenet", "cifar100", "birds", "caltech101"}
    assert m["error"].between(0, 1, inclusive="right").all()
    for model, family in (("ViT-S/16", "ViT"), ("BiT-R101x3", "ResNet"), ("Mixer-L/16", "Mixer")):
        row = m[m["model"] == model].iloc[0]
        assert (family, row["size"]) == model_columns(model)[:2] == (row["family"], row["size"])
    # each published split is a prefix: every fitted point precedes every held-out one
    for _, curve in m.groupby(["model", "metric"]):
        assert curve.loc[curve["training"], "examples_seen"].max() < (
            curve.loc[~curve["training"], "examples_seen"].min()
        )


def test_compute_is_vitscales_count_at_224_px_for_every_model():
    m = jft.measurements()
    row = m[m["model"] == "ViT-B/16"].iloc[-1]
    per_image = flops.count("ViT-B/16", 224).train_flops_per_example  # 3 x 2 x MACs
    assert row["compute/exaflops"] == pytest.approx(per_image * row["examples_seen"] / 1e18)
    # paper Table 6: ViT-B/16, 7 epochs of 303M images = 224 exaFLOPs
    assert per_image * 7 * 303e6 / 1e18 == pytest.approx(224, rel=0.01)
    assert m["compute/exaflops"].gt(0).all()
    mixer = m[m["model"] == "Mixer-L/16"].iloc[-1]
    per_image = flops.count("Mixer-L/16", 224).train_flops_per_example
    assert mixer["compute/exaflops"] == pytest.approx(per_image * mixer["examples_seen"] / 1e18)


def test_history_has_the_shape_of_our_runs_curves():
    h = jft.history()
    assert list(h.columns[: len(HISTORY_COLUMNS)]) == list(HISTORY_COLUMNS)
    m = jft.measurements()
    one = m[(m["model"] == "BiT-R50x1") & (m["metric"] == "fewshot/cifar100/10shot")].iloc[7]
    row = h[(h["model"] == "BiT-R50x1") & (h["examples_seen"] == one["examples_seen"])]
    assert row["fewshot/cifar100/10shot"].item() == pytest.approx(100 * (1 - one["error"]))
    assert h.groupby("model")["fewshot/imagenet/5shot"].count().sum() == (
        (m["metric"] == "fewshot/imagenet/5shot").sum()
    )
    # the curve figure of our runs draws it unchanged
    fig = training_curves.figure(h, metric="fewshot/imagenet/5shot")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert len(ax.lines) == 6


def test_splits_and_their_filters():
    every = jft.splits()
    assert len(every) == 72 and sum(len(s.y_held) for s in every) == 14_981
    (one,) = jft.splits(models=["ViT-B/16"], metrics=["fewshot/imagenet/5shot"])
    assert (one.name, one.family, len(one.x_fit), len(one.x_held)) == ("ViT-B/16", "ViT", 68, 361)
    assert one.x_fit.max() < one.x_held.min()
    cut = jft.splits(models=["ViT-B/16"], metrics=["fewshot/imagenet/5shot"], fraction=0.2)[0]
    lx = np.log(np.concatenate([cut.x_fit, cut.x_held]))
    assert np.log(cut.x_held.min()) > lx.min() + 0.8 * (lx.max() - lx.min())
    with pytest.raises(ValueError, match="unknown model.*ViT-B/32.*valid: BiT-R101x3"):
        jft.splits(models=["ViT-B/32"])
    with pytest.raises(ValueError, match="unknown reference 'jft'; valid: jft-curves"):
        reference.check_name("jft")


def test_vit_b16_overtakes_bit_r50x1_on_imagenet_5shot_at_2e8_examples():
    m = jft.measurements()
    m = m[m["metric"] == "fewshot/imagenet/5shot"]
    vit, bit = (m[m["model"] == name] for name in ("ViT-B/16", "BiT-R50x1"))
    (c,) = crossovers(vit["examples_seen"], vit["error"], bit["examples_seen"], bit["error"])
    assert c.leader == "a" and 1.94e8 <= c.x <= 2.06e8
    assert (c.x_before, c.x_after) == pytest.approx((1.94e8, 2.06e8), rel=0.01)
    # observed, independently: behind at the point before, ahead at the one after
    b = bit.sort_values("examples_seen")
    for x, sign in ((c.x_before, 1), (c.x_after, -1)):
        v = vit.loc[np.isclose(vit["examples_seen"], x, rtol=1e-9), "error"].item()
        gap = np.log(v) - np.interp(np.log(x), np.log(b["examples_seen"]), np.log(b["error"]))
        assert np.sign(gap) == sign


def test_crossovers_ignore_noise_and_find_a_real_overtaking():
    x = np.geomspace(1e6, 1e9, 200)
    rng = np.random.default_rng(0)
    level = 0.5 * (x / 1e6) ** -0.2
    a = pd.Series(level * np.exp(0.005 * rng.standard_normal(200)))  # level with b, noisy
    b = pd.Series(level * np.exp(0.005 * rng.standard_normal(200)))
    assert crossovers(x, a, x, b) == []
    steeper = 0.6 * (x / 1e6) ** -0.25  # starts behind, ends ahead
    (c,) = crossovers(x, steeper, x, level)
    assert c.leader == "a" and c.x == pytest.approx(1e6 * 1.2 ** (1 / 0.05), rel=0.01)
