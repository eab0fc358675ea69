"""``vitscale export``: a run folder's checkpoint -> a timm model folder, and back.

The oracle is timm itself: ``timm.create_model("local-dir:OUT", pretrained=True)`` must
rebuild the model from our config.json and load our weights file, and compute what our
model computes (timm patched to the official numerics where its ports depart, as in
test_pretrained.py); ``load_pretrained`` must read the export back bit for bit.
"""

from __future__ import annotations

import json

import pytest
import torch

from vitscale import record as rf
from vitscale.catalog import parse
from vitscale.cli import main
from vitscale.config import cell_id, resolve
from vitscale.models import create_model, load_pretrained
from vitscale.train import checkpoint

from .helpers.models import fill_, official, rel
from .helpers.runs import ALONE

timm = pytest.importorskip("timm")


def _run_folder(tmp_path, name: str, *, image_size: int, head: str, num_classes: int = 5):
    """A run folder as the trainer leaves it: resolved config.json and a checkpoint
    written by the trainer's own checkpoint writer."""
    cfg = resolve(
        {
            "model": {"name": name},
            "data": {"image_size": image_size},
            "train": {"steps": 3},
            "optim": {"warmup_steps": 1},
        }
    )
    resolved = cfg.to_dict() | {"cell_id": cell_id(cfg)}
    run = tmp_path / "runs" / "g" / resolved["cell_id"]
    run.mkdir(parents=True)
    rf.write_json_atomic(run / rf.CONFIG, resolved)
    model = fill_(create_model(name, num_classes=num_classes, image_size=image_size, head=head))
    state = {"model": model.state_dict(), "progress": {"step": 3}}
    checkpoint.save(run / rf.CHECKPOINTS, step=3, state=state, accelerator=ALONE)
    return run, model.eval()


@pytest.mark.parametrize("fmt", ["safetensors", "timm"])
def test_vit_pretraining_cell_into_timm_and_back(tmp_path, fmt, capsys):
    run, ours = _run_folder(tmp_path, "ViT-Pico/4", image_size=32, head="pretrain")
    out = tmp_path / "exported"
    assert main(["export", str(run), "--format", fmt, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tanh pre-logits" in printed  # what timm cannot hold is said
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["vitscale"]["model"] == "ViT-Pico/4" and cfg["num_classes"] == 0
    model = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert rel(ours.forward_features(x)[:, 0], model(x)) <= 1e-5
    back = load_pretrained("ViT-Pico/4", out, head="drop", num_classes=5)
    for key, value in back.state_dict().items():
        if not key.startswith("head."):
            assert torch.equal(value, ours.state_dict()[key]), key


@pytest.mark.parametrize(
    "name, image_size", [("BiT-R50x1", 64), ("R50x1+ViT-S/16", 32)], ids=["bit", "hybrid"]
)
def test_resnet_and_hybrid_cells_keep_their_head(tmp_path, name, image_size):
    run, ours = _run_folder(tmp_path, name, image_size=image_size, head="finetune")
    done = main(["export", str(run)])
    assert done == 0
    out = run / "export-safetensors"
    model = official(timm.create_model(f"local-dir:{out}", pretrained=True), parse(name).family)
    x = torch.randn(2, 3, image_size, image_size)
    with torch.no_grad():
        assert rel(ours(x), model.eval()(x)) <= 1e-5
    back = load_pretrained(name, out).state_dict()
    assert back.keys() == ours.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())


def test_export_refusals_are_one_line(tmp_path, capsys):
    run, _ = _run_folder(tmp_path, "BiT-R11x0.5", image_size=32, head="pretrain")
    assert main(["export", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: timm has no architecture that builds BiT-R11x0.5")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (run / "export-safetensors").exists() and not list(run.glob(".export*"))

    run, _ = _run_folder(tmp_path / "b", "ViT-Pico/4", image_size=32, head="pretrain")
    assert main(["export", str(run)]) == 0
    assert main(["export", str(run)]) == 2
    assert "exists; give --force" in capsys.readouterr().err
    assert main(["export", str(run), "--force"]) == 0

    empty = tmp_path / "c"
    empty.mkdir()
    rf.write_json_atomic(empty / rf.CONFIG, json.loads((run / rf.CONFIG).read_text()))
    assert main(["export", str(empty)]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nowhere")]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_a_failed_export_leaves_no_folder(tmp_path, monkeypatch):
    """A full disk (or Ctrl-C) while writing: neither the target nor the staging folder
    stays; a staging folder left by a killed export is cleared by the next one."""
    import errno

    from vitscale import export

    run, _ = _run_folder(tmp_path, "ViT-Pico/4", image_size=32, head="finetune")

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "_write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        export.export_run(run)
    assert not (run / "export-safetensors").exists() and not list(run.glob(".export*"))
    monkeypatch.undo()
    stale = run / ".export-safetensors.tmp"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half a file")
    done = export.export_run(run)
    assert not stale.exists() and done.weights.is_file()
    assert load_pretrained("ViT-Pico/4", done.path).head.classifier.out_features == 5
