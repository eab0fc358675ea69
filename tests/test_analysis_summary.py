"""`vitscale summary`: the verdict follows the numbers, whichever way they fall."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.summary import summarise
from vitscale.runfolder import fewshot_key

A, B = fewshot_key("synthetic-glyphs", 5), fewshot_key("synthetic-textures", 5)
MODELS = {"ViT-Pico/4": ("ViT", 2.0), "ViT-Pico/8": ("ViT", 1.0), "BiT-R11x0.5": ("ResNet", 1.5)}


def _frame(values: dict[tuple[str, int], float]) -> pd.DataFrame:
    rows = []
    for (model, n), acc in values.items():
        family, exaflops = MODELS[model]
        rows.append(
            {
                "status": "done",
                "model": model,
                "family": family,
                "num_examples": n,
                "exaflops": exaflops,
                A: acc,
                B: acc + 10,
            }
        )
    rows.append(
        {
            "status": "failed",
            "model": "ViT-Pico/4",
            "family": "ViT",
            "num_examples": 100,
            "exaflops": 2.0,
            A: 99.0,
            B: 99.0,
        }
    )  # failed cells never count
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("large_vit", "verdict"),
    [
        (70.0, "reverses: the ViTs overtake (+20.0 -> -10.0)"),
        (55.0, "shrinks (+20.0 -> +5.0)"),
        (39.5, "barely changes (less than 1 point) (+20.0 -> +20.5)"),
        (30.0, "does not shrink (+20.0 -> +30.0)"),
    ],
)
def test_gap_verdict(large_vit, verdict):
    s = summarise(
        _frame(
            {
                ("ViT-Pico/4", 100): 20.0,
                ("ViT-Pico/8", 100): 10.0,
                ("BiT-R11x0.5", 100): 40.0,
                ("ViT-Pico/4", 10_000): large_vit,
                ("ViT-Pico/8", 10_000): 25.0,
                ("BiT-R11x0.5", 10_000): 60.0,
            }
        )
    )
    assert s.metric == f"average({A}, {B})"
    assert s.by_subset.loc[100, "gap"] == pytest.approx(
        20.0
    )  # best ResNet - best ViT, means of A, B
    lines = "\n".join(s.lines())
    assert (
        "smallest subset (100 images): best ResNet 45.0 vs best ViT 25.0, ResNets 20.0 points ahead"
        in lines
    )
    assert verdict in lines


def test_no_resnet_lead_and_compute_trend():
    s = summarise(
        _frame(
            {
                ("ViT-Pico/4", 100): 50.0,
                ("ViT-Pico/8", 100): 10.0,
                ("BiT-R11x0.5", 100): 40.0,
                ("ViT-Pico/4", 1000): 60.0,
                ("ViT-Pico/8", 1000): 20.0,
                ("BiT-R11x0.5", 1000): 45.0,
            }
        ),
        metric=A,
    )
    lines = "\n".join(s.lines())
    assert "was never a ResNet lead" in lines
    # More compute (Pico/4), more accuracy: rank correlation +1 over the two ViTs.
    assert (
        "ViT: accuracy vs pre-training compute over 2 models, Spearman rank correlation +1.00"
        in lines
    )
    with pytest.raises(ValueError, match="no column"):
        summarise(_frame({("ViT-Pico/4", 100): 1.0}), metric="fewshot/nope/5shot")
