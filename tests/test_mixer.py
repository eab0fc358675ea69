"""MLP-Mixer, the family added as one module: its paper's Table 1, timm's port (logits in
float64 with the same random weights), and a Mixer cell run end to end in the demo's
world. Its FLOP count against FlopCounterMode, its saved bytes against autograd and its
forward/backward are in the registry-wide tests (test_flops, test_memory, test_models)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from analysis import style
from vitscale import flops
from vitscale.catalog import FAMILIES, list_models, model_columns, parse
from vitscale.cli import main
from vitscale.models import create_model

from .helpers.models import fill_

timm = pytest.importorskip("timm")
GELUTanh = pytest.importorskip("timm.layers").GELUTanh

# Tolstikhin et al. Table 1, millions of parameters; their counts leave out the classifier
# (the 1000-way head here: C x 1000 + 1000), as ours less it show to the rounding.
TABLE1 = {
    "Mixer-S/32": 19,
    "Mixer-S/16": 18,
    "Mixer-B/32": 60,
    "Mixer-B/16": 59,
    "Mixer-L/32": 206,
    "Mixer-L/16": 207,
    "Mixer-H/14": 431,
}


@pytest.mark.parametrize("name, millions", TABLE1.items())
def test_params_are_the_papers_table1(name, millions):
    width = parse(name).width
    assert round((flops.count(name).params - (width * 1000 + 1000)) / 1e6) == millions


def test_the_registry_lists_table1_and_a_demo_size():
    assert set(TABLE1) < set(list_models("Mixer"))
    assert model_columns("Mixer-B/16") == ("Mixer", "B", 16)
    with pytest.raises(ValueError, match="unknown Mixer size 'Q'.*valid sizes: Femto, S, B, L, H"):
        parse("Mixer-Q/16")
    with pytest.raises(ValueError, match="Mixer models pool by global average only"):
        create_model("Mixer-S/32", num_classes=3, image_size=64, pool="token")


def _timm_state(model: torch.nn.Module) -> dict:
    """timm's mixer_* names -> ours (its stem is a PatchEmbed; our head a Head)."""
    renamed = {}
    for key, value in model.state_dict().items():
        key = key.replace("stem.proj.", "stem.")
        renamed["head.classifier." + key[5:] if key.startswith("head.") else key] = value
    return renamed


@pytest.mark.parametrize(
    "name, arch, res", [("Mixer-B/16", "mixer_b16_224", 224), ("Mixer-L/16", "mixer_l16_224", 64)]
)
def test_logits_equal_timm_in_float64(name, arch, res):
    """timm's port with random weights (and the official tanh GELU) loaded into ours:
    the same logits. L/16 at 64 px (16 tokens) keeps the suite fast; the code is one."""
    with torch.device("meta"):
        ref = timm.create_model(arch, num_classes=10, img_size=res, act_layer=GELUTanh)
    ref = fill_(ref.to_empty(device="cpu")).double().eval()
    with torch.device("meta"):
        ours = create_model(name, num_classes=10, image_size=res, head="finetune")
    ours = ours.to_empty(device="cpu").double().eval()
    ours.load_state_dict(_timm_state(ref), strict=True)
    x = torch.randn(2, 3, res, res, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        theirs, mine = ref(x), ours(x)
    assert (mine - theirs).abs().max().item() <= 1e-10 * theirs.abs().max().item()
    assert sum(p.numel() for p in ref.parameters()) == flops.count(name, res, num_classes=10).params


def test_a_mixer_cell_runs_in_the_demo_world_and_gets_its_own_colour(tmp_path, capsys):
    """A Mixer cell of the demo's world runs in a grid; status, summary (its own compute
    frontier) and the figures name it, drawn in a colour no other family has."""
    grid = {
        "name": "mix",
        "base": {
            "data": {"dataset": "synthetic", "image_size": 32, "subset": 512},
            "train": {"steps": 4, "batch_size": 32, "eval_every": 2, "log_every": 2},
            "optim": {"warmup_steps": 2},
            "eval": {
                "batch_size": 64,
                "fewshot": {
                    "datasets": ["synthetic-glyphs"],
                    "shots": [2],
                    "seeds": 1,
                    "test_examples": 40,
                },  # fmt: skip
                "upstream": {"examples": 32},
            },
            "wandb": {"mode": "disabled"},
        },
        "axes": {"model.name": ["Mixer-Femto/8"]},
    }
    path, runs = tmp_path / "mix.yaml", tmp_path / "runs"
    path.write_text(yaml.safe_dump(grid))
    assert main(["grid", str(path), "--executor", "local", "--runs", str(runs)]) == 0
    (mixer,) = (p for p in (runs / "mix").iterdir() if p.is_dir())
    result = json.loads((mixer / "result.json").read_text())
    classes = json.loads((mixer / "config.json").read_text())["data"]["num_classes"]
    assert result["status"] == "done"
    counted = flops.count("Mixer-Femto/8", 32, num_classes=classes, head="pretrain")
    assert result["params"] == counted.params
    capsys.readouterr()
    assert main(["status", str(runs / "mix")]) == 0
    assert "Mixer-Femto/8" in capsys.readouterr().out
    assert main(["summary", str(runs / "mix")]) == 0
    assert "Mixer compute frontier (synthetic-glyphs 2-shot accuracy (%)) at 512 images" in (
        capsys.readouterr().out
    )
    assert main(["figures", str(runs / "mix"), "--out", str(tmp_path / "fig")]) == 0
    assert list((tmp_path / "fig").glob("fig4*.png"))
    colours = {f: style.family_color(f) for f in FAMILIES}
    assert len(set(colours.values())) == len(FAMILIES)
    assert style.OTHER_COLOR not in colours.values()
