"""`vitscale figures`, `vitscale fit` and `vitscale summary` handlers (vitscale.cli.figures)."""

from __future__ import annotations

import argparse
import json

import pytest

from vitscale.cli import figures as cli
from vitscale.errors import UserError

from ..helpers import run_folders as fixtures

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


def test_every_figure_option_is_a_field_of_figure_options(tmp_path):
    """``vitscale figures``' drawing options are FigureOptions' fields, with their
    defaults: the parser's defaults build exactly ``FigureOptions(out=...)``, and a flag
    reaches its field."""
    from dataclasses import fields

    from analysis.draw import FigureOptions

    parser = argparse.ArgumentParser()
    cli.configure_figures(parser)
    dests = {a.dest for a in parser._actions}
    assert {f.name for f in fields(FigureOptions)} <= dests
    assert cli._options(parser.parse_args(["--out", str(tmp_path)])) == FigureOptions(
        out=tmp_path, formats=["png", "pdf"]
    )
    args = parser.parse_args(["-o", "x", "--metric", "a", "--metric", "b", "--format", "svg"])
    assert (cli._options(args).metrics, cli._options(args).formats) == (["a", "b"], ["svg"])


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
    with pytest.raises(
        UserError,
        match=r"\(all: 1; a cell that .* not on its frontier\): a frontier needs >= 4 data-size",
    ):
        _run("fit", ["--paper", "--x", "examples", "--by", "none"])  # Table 6: one data size


def test_figures_reference_jft_curves(tmp_path, capsys):
    argv = ["--reference", "jft-curves", "--shots", "25", "--out", str(tmp_path)]
    assert _run("figures", [*argv, "--format", "png"]) == 0
    printed = sorted(p.rsplit("/", 1)[-1] for p in capsys.readouterr().out.split())
    assert printed == [
        "jft-curves_compute_25shot.png",
        "jft-curves_crossovers_25shot.md",
        "jft-curves_examples_25shot.png",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == printed
    table = (tmp_path / "jft-curves_crossovers_25shot.md").read_text()
    assert "| examples_seen | ImageNet 25-shot | ViT-B/16 | BiT-R50x1 |" in table
    with pytest.raises(UserError, match="--shots 1: jft-curves has 5, 10, 25-shot curves"):
        _run("figures", ["--reference", "jft-curves", "--shots", "1", "--out", str(tmp_path)])


def test_backtest_on_a_reference_curve_json(capsys):
    argv = ["--reference", "jft-curves", "--model", "ViT-B/16"]
    argv += ["--metric", "fewshot/imagenet/5shot", "--level", "0.9", "--json"]
    assert _run("backtest", argv) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["holdout"] == "split" and got["estimator"] == "extrapolate"
    (curve,) = got["curves"]
    assert (curve["name"], curve["n_fit"], curve["n_held"], curve["level"]) == (
        "ViT-B/16",
        68,
        361,
        0.9,
    )
    assert curve["rmse"] == pytest.approx(0.0324, abs=5e-5)  # benchmarks/RESULTS.md
    assert 0 <= curve["coverage"] <= 1 and got["summary"]["rmse_mean"] == curve["rmse"]


def test_backtest_on_runs_frontiers_and_curves(tmp_path, capsys):
    steps = tuple(40 * 2**i for i in range(8))  # 8 compute budgets: a frontier to cut
    fixtures.write_runs(
        tmp_path, cells=8, models=("ViT-Pico/4",), subsets=(10_000,), steps=steps, evals=12
    )
    argv = [str(tmp_path), "--fraction", "0.3", "--curves", "--metric"]
    assert _run("backtest", [*argv, "fewshot/synthetic-shapes/5shot", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["holdout"] == 0.3 and len(got["curves"]) == 8 and not got["failures"]
    assert all(c["n_fit"] + c["n_held"] == 12 for c in got["curves"])
    # frontiers: the 8 cells' (compute, accuracy) points of one family
    assert _run("backtest", [str(tmp_path), "--fraction", "0.3", "--x", "exaflops"]) == 0
    out = capsys.readouterr().out
    assert "RMSE of log error" in out and "interval: coverage" in out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["RUNS"], "before the held-out last 0.3 .*: a frontier needs >= 4"),
        (["RUNS", "--fraction", "1.5"], r"--fraction 1.5: give a fraction in \(0, 1\)"),
        (["--reference", "jft-curves", "--model", "ViT-H/14"], "unknown model.*valid: BiT-R101x3"),
        (["--reference", "jft-curves", "--estimator", "M4"], "valid: extrapolate, power-law"),
        (["RUNS", "--reference", "jft-curves"], "give it alone"),
    ],
)
def test_backtest_errors(argv, match, runs):
    argv = [str(runs) if a == "RUNS" else a for a in argv]
    with pytest.raises(UserError, match=match):
        _run("backtest", argv)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["RUNS", "--predict", "1e3"], "a command of their own: vitscale predict ... --at X"),
        (["RUNS", "--holdout"], "a command of their own: vitscale backtest"),
        (["--reference", "jft-curves"], "a command of their own: vitscale backtest"),
    ],
)
def test_fits_old_flags_point_at_the_new_commands(argv, match, runs):
    argv = [str(runs) if a == "RUNS" else a for a in argv]
    with pytest.raises(UserError, match=match):
        _run("fit", argv)
