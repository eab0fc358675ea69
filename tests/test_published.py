"""Published checkpoints as cells: ``model.pretrained`` + ``train.steps: 0``, evaluated
with our protocol, their compute from their recipe, marked on Fig. 5."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from analysis.figures import fig5
from vitscale import flops
from vitscale import record as rf
from vitscale.config import ConfigError, resolve
from vitscale.paper import JFT_IMAGES, table6
from vitscale.published import DATASETS, published_compute
from vitscale.record.cells import load_runs
from vitscale.train import train

from .helpers.configs import tiny_config
from .helpers.models import fill_, jax_vit, vit_kwargs

timm = pytest.importorskip("timm")


def test_paper_models_take_table6_as_printed():
    for row in table6():
        p = published_compute(row["model"], "jft300m", float(row["pretrain_epochs"]))
        assert p.exaflops == float(row["pretrain_exaflops"]) and p.source == "paper Table 6"
        assert p.examples == int(row["pretrain_epochs"]) * JFT_IMAGES


def test_other_recipes_are_counted_with_our_convention():
    p = published_compute("ViT-B/16", "imagenet21k")  # documented: 90 epochs
    per_example = flops.count("ViT-B/16", 224, num_classes=21_843, head="pretrain")
    assert p.epochs == 90 and p.examples == 90 * DATASETS["imagenet21k"].images
    assert p.exaflops == pytest.approx(per_example.train_flops_per_example * p.examples / 1e18)
    assert published_compute("ViT-B/16", "imagenet21k", 300).exaflops == pytest.approx(
        p.exaflops * 300 / 90
    )
    # a JFT recipe the paper did not print is counted too (within 1% of Table 6's own rows)
    assert published_compute("ViT-B/16", "jft300m", 14).exaflops == pytest.approx(448, rel=0.01)
    with pytest.raises(ValueError, match="valid: 'jft300m', 'imagenet21k', 'imagenet'"):
        published_compute("ViT-B/16", "laion")


@pytest.mark.parametrize(
    "model, match",
    [
        ({}, r"train.steps must be positive, got 0 \(0 only with model.pretrained"),
        ({"pretrained": "x.npz"}, "model.pretrained_dataset: give the checkpoint's"),
        ({"pretrained": "x.npz", "pretrained_dataset": "laion"}, "valid: 'jft300m'"),
        (
            {"pretrained": "x.npz", "pretrained_dataset": "imagenet", "pretrained_epochs": -1},
            "must be positive",
        ),
        ({"pretrained_dataset": "imagenet"}, "need model.pretrained"),
    ],
)
def test_published_cell_config_errors(model, match):
    with pytest.raises(ConfigError, match=match):
        resolve({"model": {"name": "ViT-Pico/4", **model}, "train": {"steps": 0}})


def test_new_keys_leave_existing_cell_ids_alone():
    """Adding model.pretrained* to the schema did not change any existing cell's id: unset,
    they are left out of the hash; set, they are part of it."""
    from vitscale.config import cell_id

    cfg = resolve(tiny_config())
    before = cfg.to_dict()
    for key in ("pretrained", "pretrained_dataset", "pretrained_epochs"):
        del before["model"][key]  # the config as it was before these keys existed
    assert cell_id(cfg) == cell_id(before)
    published = resolve(
        tiny_config(
            model={"pretrained": "a.npz", "pretrained_dataset": "imagenet"}, train={"steps": 0}
        )
    )
    other = resolve(
        tiny_config(
            model={"pretrained": "b.npz", "pretrained_dataset": "imagenet"}, train={"steps": 0}
        )
    )
    assert len({cell_id(cfg), cell_id(published), cell_id(other)}) == 3


@pytest.fixture(scope="module")
def checkpoint_npz(tmp_path_factory):
    """A "published" ViT-Pico/4 in the official vision_transformer .npz layout."""
    kw = vit_kwargs("ViT-Pico/4", 32) | dict(num_classes=21, act_layer="gelu_tanh")
    with torch.device("meta"):
        ref = timm.models.vision_transformer.VisionTransformer(**kw)
    ref = fill_(ref.to_empty(device="cpu"))
    path = tmp_path_factory.mktemp("published") / "ViT-Pico_4.npz"
    np.savez(path, **jax_vit(ref.state_dict(), heads=2))
    return path


def _published_config(path, **model):
    return tiny_config(
        model={
            "name": "ViT-Pico/4",
            "pretrained": str(path),
            "pretrained_dataset": "imagenet21k",
            "dropout": 0.0,
        }
        | model,
        train={"steps": 0},
        eval={
            "batch_size": 64,
            "fewshot": {
                "datasets": ["synthetic-textures"],
                "shots": [1, 2],
                "seeds": 2,
                "test_examples": 40,
            },
            "upstream": {"examples": 0},
            "finetune": {
                "datasets": ["synthetic-textures"],
                "steps": 3,
                "lrs": [0.01],
                "batch_size": 16,
                "test_examples": 40,
            },
        },
    )


def test_published_cell_is_evaluated_and_lands_on_fig5(tmp_path, checkpoint_npz):
    run = tmp_path / "runs" / "published" / "cell"
    result = train(_published_config(checkpoint_npz), run)
    expected = published_compute("ViT-Pico/4", "imagenet21k")
    assert result.status == "done" and result.steps == 0 and result.examples_seen == 0
    assert result.pretrain_exaflops == pytest.approx(expected.exaflops)
    assert result.published == expected.as_dict()
    assert set(result.finetune) == {"synthetic-textures"}
    # Nothing pre-trained, no pre-training state: only fine-tuning's record of its scores.
    from vitscale.train import checkpoint

    assert checkpoint.latest(run / rf.CHECKPOINTS) is None
    assert [p.name for p in (run / rf.CHECKPOINTS).iterdir()] == ["finetune"]
    (row,) = [json.loads(line) for line in (run / rf.METRICS).read_text().splitlines()]
    assert row[rf.STEP] == 0 and row[rf.EXAFLOPS] == pytest.approx(expected.exaflops)
    assert rf.fewshot_key("synthetic-textures", 2) in row

    cells, problems = load_runs(tmp_path / "runs")
    assert not problems and cells["published"].tolist() == [True]
    assert cells["exaflops"].iloc[0] == pytest.approx(expected.exaflops)
    metric = rf.finetune_key("synthetic-textures")
    fig = fig5.figure([fig5.Panel(cells, metric, "textures")])
    ax = fig.axes[0]
    assert [c.get_gid() for c in ax.collections] == ["published"]  # ringed, not our points
    assert not [ln for ln in ax.lines if ln.get_gid() == "frontier"]
    assert "published checkpoint" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_published_cell_with_a_wrong_checkpoint_is_a_config_error(tmp_path, checkpoint_npz, capsys):
    """A checkpoint that does not fit the model is the user's input: one line, exit 2."""
    from vitscale.cli import main

    with pytest.raises(
        ConfigError,
        match=r"model.pretrained: .*'embedding/kernel' \(our 'patch_embed.weight'\) has shape \(64, 3, 4, 4\)",
    ):
        train(_published_config(checkpoint_npz, name="ViT-Pico/8"), tmp_path / "run")
    config = tmp_path / "cell.json"
    config.write_text(json.dumps(_published_config(tmp_path / "missing.npz")))
    assert main(["train", str(config), "--workdir", str(tmp_path / "run2")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: model.pretrained: pretrained weights not found")
        and "Traceback" not in err
    )
