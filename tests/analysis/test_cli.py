"""`vitscale figures`, `vitscale fit` and `vitscale summary` handlers (vitscale.cli.figures)."""

from __future__ import annotations

import argparse
import json

import pytest

from analysis import fixtures
from vitscale.cli import figures as cli
from vitscale.errors import UserError

PAPER_FILES = [
    "paper_fig3_transfer_imagenet.pdf",
    "paper_fig3_transfer_imagenet.png",
    "paper_fig5_compute.pdf",
    "paper_fig5_compute.png",
    "paper_table6.md",
    "paper_table6.tex",
]


def _run(which: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"vitscale {which}")
    getattr(cli, f"configure_{which}")(parser)
    return getattr(cli, f"run_{which}")(parser.parse_args(argv))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    fixtures.write_runs(
        root, cells=36, models=("ViT-Pico/4", "BiT-R11x0.5"), subsets=(100, 300, 1000, 10_000)
    )
    bad = root / "fixture" / "broken"
    bad.mkdir()
    (bad / "config.json").write_text("{")
    return root


def test_figures_paper(tmp_path, capsys):
    assert _run("figures", ["--paper", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(p.rsplit("/", 1)[-1] for p in printed) == PAPER_FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == PAPER_FILES


def test_figures_runs(tmp_path, runs, capsys):
    assert _run("figures", [str(runs), "--out", str(tmp_path), "--overlay-paper", "--curves"]) == 0
    out, err = capsys.readouterr()
    names = sorted(p.rsplit("/", 1)[-1] for p in out.split())
    stems = sorted({n.rsplit(".", 1)[0] for n in names})
    assert stems == [
        "curves_fewshot_synthetic-shapes_5shot",
        "curves_fewshot_synthetic-textures_5shot",
        "fig4_fewshot_synthetic-shapes_5shot",
        "fig4_fewshot_synthetic-textures_5shot",
        "fig5_compute",
        "table6",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    assert "skipped 1 unreadable run folder" in err and "broken" in err
    assert "none of" in err and "drawn beside ours" in err  # synthetic: not comparable
    table = (tmp_path / "table6.md").read_text()
    assert "Average (2)" in table and "synthetic-shapes 5-shot" in table


def test_figures_group_by_config_and_shots(tmp_path, runs, capsys):
    argv = [
        str(runs),
        "--out",
        str(tmp_path),
        "--group-by",
        "config.train.steps",
        "--shots",
        "1",
        "--format",
        "png",
    ]
    assert _run("figures", argv) == 0
    assert "fig4_fewshot_synthetic-shapes_1shot.png" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--out", "x"], "give RUNS_DIR"),
        (["/no/such/runs", "--out", "x"], "/no/such/runs"),
        (["RUNS", "--out", "x", "--group-by", "colour"], "--group-by 'colour': no such column"),
        (["RUNS", "--out", "x", "--metric", "fewshot/x/5shot"], "--metric 'fewshot/x/5shot'"),
    ],
)
def test_figures_user_errors(argv, match, runs):
    argv = [str(runs) if a == "RUNS" else a for a in argv]
    with pytest.raises(UserError, match=match):
        _run("figures", argv)


def test_fit_paper(capsys):
    argv = ["--paper", "--metric", "finetune/imagenet/top1", "--bootstrap", "40"]
    assert _run("fit", argv) == 0
    out = capsys.readouterr().out
    assert "== family = ViT" in out and "== family = ResNet" in out
    assert out.count("  b = ") == 3
    assert "40 bootstrap refits" in out  # ViT and ResNet have more than four frontier points
    assert "no intervals" in out  # the hybrid frontier has exactly four


def test_fit_runs_json(runs, capsys):
    assert (
        _run("fit", [str(runs), "--x", "examples", "--by", "none", "--bootstrap", "20", "--json"])
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    (fit,) = got.values()
    assert fit["x"] == "num_examples" and fit["metric"].startswith("average(")
    assert fit["bootstrap"] <= 20 and set(fit["intervals"]) == {"a", "b", "c", "d"}


def test_fit_errors(runs):
    with pytest.raises(UserError, match="give RUNS_DIR"):
        _run("fit", [])
    with pytest.raises(UserError, match="no such column"):
        _run("fit", [str(runs), "--metric", "nope"])
    with pytest.raises(UserError, match="at least 4 distinct"):
        _run("fit", ["--paper", "--x", "examples", "--by", "none"])  # Table 6: one data size
