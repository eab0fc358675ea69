"""benchmarks/timm_side_by_side.py runs on the CPU (the GPU numbers need a GPU): timm's
model with timm's step beside ours with the trainer's step, the same batches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import timm_side_by_side as sbs  # noqa: E402


@pytest.mark.parametrize("model", ["ViT-S/16", "BiT-R50x1"])
def test_one_pair_side_by_side_on_the_cpu(model, tmp_path, capsys):
    out = tmp_path / "sbs.json"
    argv = ["--device", "cpu", "--image-size", "32", "--batch", "2", "--steps", "1"]
    argv += ["--rounds", "1", "--compile", "eager", "--models", model, "--out", str(out)]
    assert sbs.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["timm"], r["feed"]) for r in rows] == [
        (model, sbs.PAIRS[model], "resident")
    ]
    assert rows[0]["timm_img_s"] > 0 and rows[0]["ours_img_s"] > 0
    assert rows[0]["ratio"] == pytest.approx(rows[0]["ours_img_s"] / rows[0]["timm_img_s"])
    assert "ours/timm" in capsys.readouterr().out


def test_an_unknown_model_is_refused_with_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        sbs.main(["--models", "ViT-Q/16"])
    assert "valid: ViT-B/16, ViT-S/16, BiT-R50x1, R50x1+ViT-B/16" in capsys.readouterr().err
