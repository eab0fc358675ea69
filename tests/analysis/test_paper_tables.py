"""The paper's tables as tidy frames (analysis.paper) and Table 6 output (analysis.tables)."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import paper, tables
from vitscale import flops
from vitscale.paper import table5, table6
from vitscale.record import fewshot_key, finetune_key
from vitscale.record.cells import BASE_COLUMNS, load_runs

from ..helpers import run_folders as fixtures

IMAGENET = finetune_key("imagenet")


def test_table6_frame():
    t6 = paper.table6_frame()
    rows = table6()
    assert len(t6) == len(rows) == 18
    assert list(t6.columns[: len(BASE_COLUMNS)]) == list(BASE_COLUMNS)
    assert set(t6["source"]) == {"paper"} and set(t6["status"]) == {"done"}
    assert set(t6["pretrain_dataset"]) == {"JFT-300M"}
    for row, (_, ours) in zip(rows, t6.iterrows(), strict=True):
        assert ours["family"] == row["family"]
        assert ours["exaflops"] == float(row["pretrain_exaflops"])
        assert ours["epochs"] == int(row["pretrain_epochs"])
        assert ours["examples_seen"] == int(row["pretrain_epochs"]) * 303_000_000
        assert ours[IMAGENET] == float(row["imagenet"])  # percent, as printed
        five = [float(row[k]) for k in ("imagenet", "cifar10", "cifar100", "pets", "flowers")]
        assert ours[paper.AVERAGE_5] == pytest.approx(sum(five) / 5)
    r50 = t6[t6["model"] == "BiT-R50x1"].iloc[0]  # "ResNet50x1" decodes to the BiT name
    assert (r50["size"], pd.isna(r50["patch"])) == ("R50x1", True)
    assert r50["params"] == flops.count("BiT-R50x1").params
    hybrid = t6[t6["model"] == "R50x1+ViT-L/16"]
    assert set(hybrid["size"]) == {"L"} and set(hybrid["patch"]) == {16}


def test_table5_frame():
    t5 = paper.table5_frame()
    assert len(t5) == 3 * 5 - 1  # H/14 was not pre-trained on ImageNet alone
    assert list(t5.columns[: len(BASE_COLUMNS)]) == list(BASE_COLUMNS)
    raw = {(r["pretrain_dataset"], r["downstream"]): r for r in table5()}
    row = t5[(t5["model"] == "ViT-L/16") & (t5["pretrain_dataset"] == "ImageNet-21k")].iloc[0]
    assert row[IMAGENET] == float(raw[("ImageNet-21k", "ImageNet")]["ViT-L/16"])
    assert row[finetune_key("pets")] == float(raw[("ImageNet-21k", "Oxford-IIIT Pets")]["ViT-L/16"])
    assert row["num_examples"] == 14_000_000
    assert t5["exaflops"].isna().all()  # Table 5 gives no compute


def test_paper_table_markdown_and_latex():
    t = tables.table6(paper.table6_frame())
    assert len(t) == 18
    assert list(t.columns[:6]) == ["Model", "Pre-training", "Images", "Epochs", "Cells", "exaFLOPs"]
    assert t.columns[-1] == "Average-5"
    assert list(t["Model"][:3]) == ["ViT-B/32", "ViT-L/32", "ViT-B/16"]  # cheapest first
    md = tables.to_markdown(t).splitlines()
    assert len(md) == 2 + 18
    assert md[2].startswith("| ViT-B/32 | JFT-300M | 303M | 7 | 1 | 55 | 80.73 |")
    tex = tables.to_latex(t, caption="Table 6 & more")
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"Table 6 \& more" in tex
    assert tex.count(r"\\") == 1 + 18


def test_ours_beside_the_paper(tmp_path):
    for seed, top1 in ((0, 0.80), (1, 0.82)):
        config, rows, result = fixtures.cell(
            model="ViT-B/16", subset=1000, steps=4, seed=seed, finetune={"imagenet": top1}
        )
        fixtures.write_cell(tmp_path / "g" / f"s{seed}", config=config, result=result)
    config, rows, result = fixtures.cell(model="ViT-Pico/4", subset=1000, steps=4)
    fixtures.write_cell(tmp_path / "g" / "pico", config=config, result=result)
    cells, _ = load_runs(tmp_path)
    t = tables.table6(cells, metrics=[IMAGENET], reference=paper.table6_frame())
    b16 = t[t["Model"] == "ViT-B/16"].iloc[0]
    assert b16["Cells"] == 2 and b16["ImageNet"] == pytest.approx(81.0)
    assert b16["ImageNet (paper)"] == 84.15 and b16["exaFLOPs (paper)"] == 224
    pico = t[t["Model"] == "ViT-Pico/4"].iloc[0]
    assert pd.isna(pico["ImageNet (paper)"])
    assert "| – |" in tables.to_markdown(t)
    written = tables.write(cells, tmp_path / "out", metrics=[IMAGENET])
    assert [p.name for p in written] == ["table6.md", "table6.tex"]
    # Synthetic few-shot metrics are not the paper's: no paper columns at all.
    shapes = fewshot_key("synthetic-shapes", 5)
    few = tables.table6(cells, metrics=[shapes], reference=paper.table6_frame())
    assert [c for c in few.columns if "(paper)" in c] == ["exaFLOPs (paper)"]
    assert "synthetic-shapes 5-shot" in few.columns
