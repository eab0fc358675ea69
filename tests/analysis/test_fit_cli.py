"""`vitscale fit`, `predict` and `backtest` for a user's own runs: predictions with extrapolate's
interval and its calibration said, every column explained, a design that cannot support
a fit said once with what would, a backtest without --fraction, bootstrap intervals that say nothing
flagged. Run folders come from tests/helpers/run_folders.py (nothing is trained)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.scaling import extrapolate
from vitscale.cli import main
from vitscale.record.cells import load_history, load_runs

from ..helpers import run_folders as fixtures

METRIC = "fewshot/synthetic-shapes/5shot"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's shape: 2 models x 2 subsets x 2 seeds, 600 steps, few-shot on one set
    evaluated every 200."""
    root = tmp_path_factory.mktemp("demo")
    fixtures.write_runs(
        root,
        cells=8,
        grid="demo",
        models=("BiT-R11x0.5", "ViT-Femto/8"),
        subsets=(1536, 76800),
        steps=(600,),
        evals=3,
        datasets=("synthetic-glyphs",),
    )
    return root / "demo"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """8 durations of one model, 12 evaluations each: curves and a frontier to fit."""
    root = tmp_path_factory.mktemp("study")
    steps = tuple(40 * 2**i for i in range(8))
    fixtures.write_runs(
        root, cells=8, models=("ViT-Pico/4",), subsets=(10_000,), steps=steps, evals=12
    )
    return root


def _fit(argv: list[str], capsys, command: str = "fit") -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([command, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _said(err: str) -> list[str]:
    """stderr's lines other than the progress bars'."""
    return [
        line
        for line in err.replace("\r", "\n").splitlines()
        if line.strip() and "it/s" not in line and "run/s" not in line
    ]


def _legend(out: str) -> list[str]:
    return [line for line in out.splitlines() if ": " in line and not line.startswith(" ")]


def test_predict_prints_extrapolates_interval_its_columns_and_its_calibration(study, capsys):
    argv = [str(study), "--curves", "--metric", METRIC, "--at", "1e6", "--level", "0.8"]
    code, out, _ = _fit(argv, capsys, "predict")
    assert code == 0
    header, *rows = out.split("\n\n")[0].splitlines()
    assert header.split() == [
        "curve",
        "x",
        "error",
        "lower",
        "upper",
        "accuracy",
        "reach",
    ]
    assert len(rows) == 8  # one per cell
    # The numbers are extrapolate's, at the level asked for.
    cells, _ = load_runs([study], progress=False)
    history, _ = load_history(cells)
    cell = rows[0].split()[1]
    curve = history[history["cell_id"] == cell].dropna(subset=[METRIC])
    pred, lower, upper = extrapolate(
        curve["examples_seen"], 1 - curve[METRIC] / 100, [1e6], level=0.8
    )
    got = [float(v) for v in rows[0].split()[3:6]]
    assert got == pytest.approx([pred[0], lower[0], upper[0]], abs=5e-5)
    # Every column explained, one line each; the interval's calibration said beside it.
    legend = _legend(out.split("\n\n")[1])
    assert [line.split(":")[0] for line in legend] == [
        "metric",
        "x",
        "error",
        "lower, upper",
        "accuracy",
        "reach",
        "calibration",
    ]
    assert legend[0] == f"metric: {METRIC}, every row"  # one metric: said once, not per row
    assert "a nominal 80% interval covered 79%" in legend[-1]
    # On a frontier, in exaFLOPs, as JSON.
    code, out, _ = _fit([str(study), "--by", "none", "--at", "1e-3", "--json"], capsys, "predict")
    (got,) = json.loads(out)["predictions"]
    assert code == 0 and got["x"] == 1e-3 and got["lower"] < got["error"] < got["upper"]


def test_the_demos_design_is_said_once_with_what_would_fit(demo, capsys):
    code, out, err = _fit([str(demo)], capsys)
    assert code == 2 and "cannot fit" not in out
    assert _said(err) == [
        "error: 2 of 2 frontiers have fewer than 4 points (ResNet: 1, ViT: 1; a cell that a "
        "cell of less exaflops beats is not on its frontier): a frontier needs >= 4 compute points: add durations (train.steps) or model sizes to "
        "the grid; the learning curves per cell have 3 evaluations: vitscale predict --curves "
        "--at X needs >= 4, vitscale backtest --curves needs >= 8 evenly spaced evaluations "
        "per run: set "
        "train.eval_every to at most 75 (train.steps 600 / 8) and train again"
    ]
    code, out, err = _fit([str(demo), "--curves"], capsys, "backtest")
    assert code == 2 and "cannot" not in out
    assert _said(err) == [
        "error: 8 of 8 learning curves have 3 evaluations, and --fraction 0.3 leaves 2 to fit: "
        "extrapolate needs >= 4 fitted, so >= 8 evenly spaced evaluations per run: set "
        "train.eval_every to at most 75 (train.steps 600 / 8) and train again"
    ]
    code, _, err = _fit([str(demo), "--curves", "--at", "2e5"], capsys, "predict")
    assert code == 2 and len(_said(err)) == 1
    assert "set train.eval_every to at most 150 (train.steps 600 / 4)" in err


def test_a_frontier_too_short_points_at_curves_that_can_be_fitted(tmp_path, capsys):
    """One duration, evaluated often: no frontier, but each cell's curve supports both."""
    fixtures.write_runs(
        tmp_path, cells=2, models=("ViT-Pico/4",), subsets=(10_000,), steps=(600,), evals=12
    )
    code, _, err = _fit([str(tmp_path), "--bootstrap", "0"], capsys)
    assert code == 2 and len(_said(err)) == 1
    assert err.rstrip().endswith(
        "to the grid; a learning curve per cell: use vitscale predict --curves --at X or "
        "vitscale backtest --curves"
    )
    code, _, err = _fit([str(tmp_path), "--at", "1"], capsys, "predict")
    assert code == 2 and err.rstrip().endswith("; a learning curve per cell: add --curves")


def test_a_frontier_of_a_metric_without_curves_says_only_what_the_frontier_needs(tmp_path, capsys):
    """A fine-tune's top-1 is measured once per cell: no learning curve to point at."""
    for seed in (0, 1):
        config, rows, result = fixtures.cell(
            model="ViT-Pico/4", subset=10_000, steps=600, seed=seed, finetune={"pets": 0.5}
        )
        fixtures.write_cell(
            tmp_path / config["cell_id"], config=config, metrics=rows, result=result
        )
    code, _, err = _fit([str(tmp_path), "--metric", "finetune/pets/top1"], capsys)
    assert code == 2 and len(_said(err)) == 1
    assert err.rstrip().endswith(
        "a frontier needs >= 4 compute points: add durations "
        "(train.steps) or model sizes to the grid"
    )


def test_a_backtest_holds_out_the_last_30_percent_and_explains_reach(study, capsys):
    argv = [str(study), "--curves", "--metric", METRIC]
    code, out, _ = _fit([*argv, "--json"], capsys, "backtest")
    got = json.loads(out)
    assert code == 0 and got["holdout"] == 0.3 and len(got["curves"]) == 8
    code, out, _ = _fit(argv, capsys, "backtest")
    assert code == 0
    assert "reach: the farthest held-out x over the last fitted x" in out
    assert "the last 0.3 of its log-x range" in out
    assert out.count("calibration: ") == 1 and "a nominal 95% interval covered 94%" in out


def test_bootstrap_intervals_that_say_nothing_are_flagged_and_explained(capsys):
    code, out, _ = _fit(["--paper", "--bootstrap", "40"], capsys)
    assert code == 0
    assert "nan" not in out  # the hybrid frontier (four points) has no interval: none printed
    flagged = [line for line in out.splitlines() if "not determined (refits from" in line]
    assert flagged and all(np.isfinite(float(line.split()[2])) for line in flagged)
    assert out.count("not determined: the refits spread it over more than 10x") == 1
    assert out.count("b: the scaling exponent") == 1  # the legend once, not once per group
