"""The positive control's verdict (analysis.control) by the rules registered in
experiments/preregistered/permuted.md, on planted numbers: each rule says what the numbers
say, whichever way they fall, and ``vitscale summary`` / ``vitscale figures`` give it from
run folders."""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd
import pytest

from analysis.control import FACTOR, World, crossing, is_control, summarise
from vitscale.cli import figures as cli
from vitscale.record import fewshot_key

from ..helpers import run_folders as fixtures

R, V = "BiT-R11x0.5", "ViT-Femto/8"
FAMILY = {R: "ResNet", V: "ViT"}
LEVELS = {
    "synthetic": 0.0,
    "synthetic-permuted-50": 0.5,
    "synthetic-permuted-75": 0.75,
    "synthetic-permuted-100": 1.0,
    "synthetic-patchperm": None,
}
WORLDS = {w: World(w, f, f"{w}-glyphs") for w, f in LEVELS.items()}
SMALL, MIDDLE, LARGE = 384, 1536, 76_800


def planted() -> dict[tuple[str, str, int], list[float]]:
    """``{(world, model, subset): [accuracy per seed]}`` in the registered design's shape:
    the ResNet's lead falls with f; at f = 0.75 it crosses beyond the noise (spreads 2,
    gaps +6 and -5); at f = 1 the largest subset's ViT lead is exactly 2 noise units (-4:
    not beyond)."""
    one = {
        ("synthetic", R): (80, 95, 99),
        ("synthetic", V): (20, 25, None),
        ("synthetic-permuted-50", R): (30, 45, 97),
        ("synthetic-permuted-50", V): (22, 40, 89),
        ("synthetic-permuted-75", R): (None, 42, None),
        ("synthetic-permuted-75", V): (None, 43, None),
        ("synthetic-permuted-100", R): (None, 44, None),
        ("synthetic-permuted-100", V): (None, 44.5, None),
    }
    out = {
        (w, m, n): [v]
        for (w, m), values in one.items()
        for n, v in zip((SMALL, MIDDLE, LARGE), values, strict=True)
        if v is not None
    }
    three = lambda mean: [mean - 1, mean, mean + 1]  # noqa: E731  spread 2
    out |= {
        ("synthetic-permuted-75", R, SMALL): three(29),
        ("synthetic-permuted-75", V, SMALL): three(23),
        ("synthetic-permuted-75", R, LARGE): three(91),
        ("synthetic-permuted-75", V, LARGE): three(96),
        ("synthetic-permuted-100", R, SMALL): three(26),
        ("synthetic-permuted-100", V, SMALL): three(21),
        ("synthetic-permuted-100", R, LARGE): three(89),
        ("synthetic-permuted-100", V, LARGE): three(93),
        ("synthetic", V, LARGE): three(70),
        ("synthetic-patchperm", V, LARGE): three(70.5),
    }
    return out


def frame(points: dict[tuple[str, str, int], list[float]]) -> pd.DataFrame:
    rows = []
    for (world, model, n), values in points.items():
        for seed, value in enumerate(values):
            rows.append(
                {
                    "status": "done",
                    "pretrain_dataset": world,
                    "model": model,
                    "family": FAMILY[model],
                    "num_examples": n,
                    "seed": seed,
                    fewshot_key(WORLDS[world].transfer, 5): value,
                }
            )
    return pd.DataFrame(rows)


def test_the_registered_rules_on_a_planted_crossover():
    c = summarise(frame(planted()), worlds=WORLDS)
    assert c.h0["holds"] and c.h0["difference"] == pytest.approx(0.5)
    assert c.h0["num_examples"] == LARGE and c.h0["unit"] == pytest.approx(2)
    assert c.h1["holds"] and [s["holds"] for s in c.h1["subsets"]] == [True] * 3
    assert c.h2["holds"] and c.h2["holds_at"] == [0.75]
    at = {lv["fraction"]: lv for lv in c.h2["levels"]}
    assert at[1.0]["resnet_leads_smallest"] and not at[1.0]["vit_leads_largest"]  # -4 = 2 units
    assert not at[0.5]["decided"] and at[0.75]["decided"] and at[1.0]["decided"]
    # H3: f = 0.75 crosses at 384 * 4^(6/7), f = 1 at 384 * 4^(10/11), higher: it rises
    crossings = {lv["fraction"]: lv["crossing"] for lv in c.h3["levels"]}
    assert crossings[0.0] == crossings[0.5] == math.inf
    assert crossings[0.75] == pytest.approx(SMALL * 4 ** (6 / 7))
    assert crossings[1.0] == pytest.approx(SMALL * 4 ** (10 / 11))
    assert c.h3["rises"] == [(0.75, 1.0)] and c.h3["holds"] is False
    assert c.falsifier["holds"] is False
    lines = "\n".join(c.lines())
    assert (
        "H2 (at some f the ResNet leads at the smallest subset and the ViT at the largest): holds at f = 0.75"
        in lines
    )
    assert "H3 (the subset where the families cross falls as f rises): does not hold" in lines
    json.dumps(c.to_dict())  # the numbers, as JSON


def test_one_seed_points_borrow_their_models_largest_three_seed_spread():
    points = planted()
    points[("synthetic-permuted-100", V, SMALL)] = [17, 21, 25]  # the ViT's largest: 8
    c = summarise(frame(points), worlds=WORLDS)
    gap = c.gaps.set_index(["fraction", "num_examples"])
    assert gap.at[(0.5, MIDDLE), "unit"] == pytest.approx(8)  # ResNet 2, ViT 8
    assert gap.at[(0.75, SMALL), "unit"] == pytest.approx(2)  # measured, both 2
    # f = 1 at 384: +5 against 2 x 8: the ResNet's lead is no longer beyond the noise
    at = {lv["fraction"]: lv for lv in c.h2["levels"]}
    assert not at[1.0]["resnet_leads_smallest"]


def test_noise_decides_a_crossover_and_h0():
    points = planted()
    for key in [k for k in points if k[0] == "synthetic-permuted-75" and len(points[k]) == 3]:
        mean = points[key][1]
        points[key] = [mean - 3, mean, mean + 3]  # spread 6: +6 and -5 are within 2 x 6
    points[("synthetic-patchperm", V, LARGE)] = [79, 80, 81]  # 10 points off the glyph world
    c = summarise(frame(points), worlds=WORLDS)
    assert c.h2["holds"] is False and c.h2["holds_at"] == []
    assert c.h0["holds"] is False and c.h0["difference"] == pytest.approx(10)


def test_the_falsifier_and_a_falling_crossing():
    resnet_everywhere = {
        k: [v + 30 for v in vs] if k[1] == R else vs for k, vs in planted().items()
    }
    c = summarise(frame(resnet_everywhere), worlds=WORLDS)
    assert c.falsifier["holds"] and c.h2["holds"] is False and c.h3["holds"] is False
    assert "falsifier (the ResNet leads at every subset at every level): holds" in c.lines()[-1]
    # the crossing falls from none (f <= 0.5) to 1,536-76,800 (f = 0.75) to 384 (f = 1)
    falling = planted()
    falling[("synthetic-permuted-75", V, MIDDLE)] = [40]  # +2: crosses above 1,536 now
    falling[("synthetic-permuted-100", V, SMALL)] = [26, 27, 28]  # the ViT ahead at 384
    c = summarise(frame(falling), worlds=WORLDS)
    crossings = [lv["crossing"] for lv in c.h3["levels"]]
    assert crossings[:2] == [math.inf, math.inf] and MIDDLE < crossings[2] < LARGE
    assert crossings[3] == SMALL and c.h3["holds"] is True
    assert "f = 1: <= 384" in c.lines()[-2]


def test_a_grid_still_running_says_what_is_not_measured_yet():
    """The ResNets run first: with no ViT cell yet every rule is 'not measured'."""
    resnets = {k: v for k, v in planted().items() if k[1] == R}
    c = summarise(frame(resnets), worlds=WORLDS)
    assert c.gaps.empty and c.h0 is c.h1 is c.h2 is c.h3 is c.falsifier is None
    assert sum("not measured" in line for line in c.lines()) == 5
    assert c.table().shape == (4, 3)  # four levels x three subsets of the ResNet


def test_crossing_and_is_control():
    subsets = [SMALL, MIDDLE, LARGE]
    assert crossing(subsets, [6, -1, -5]) == pytest.approx(SMALL * 4 ** (6 / 7))
    assert crossing(subsets, [0, 3, 5]) == SMALL  # the ViT level already at the smallest
    assert crossing(subsets, [1, 2, 3]) == math.inf
    assert is_control(frame(planted()), WORLDS)
    glyphs_only = frame({k: v for k, v in planted().items() if k[0] == "synthetic"})
    assert not is_control(glyphs_only, WORLDS)  # the glyph study: its own summary
    assert not is_control(glyphs_only.assign(pretrain_dataset="scenes"), WORLDS)
    assert FACTOR == 2.0  # registered


def _write(root, points) -> None:
    """Run folders of the planted points, as the trainer writes them (tests/helpers/run_folders.py)."""
    for (world, model, n), values in points.items():
        for seed, value in enumerate(values):
            metric = fewshot_key(WORLDS[world].transfer, 5)
            config, rows, result = fixtures.cell(
                model=model, subset=n, steps=10, seed=seed, grid="control",
                datasets=[WORLDS[world].transfer], evals=1,
            )  # fmt: skip
            config["data"]["dataset"] = world
            config["cell_id"] = f"{abs(hash((world, model, n, seed))):x}"[:10]
            result["cell_id"] = config["cell_id"]
            result["best"][metric] = value / 100
            fixtures.write_cell(root / config["cell_id"], config=config, result=result)


def _run(which: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"vitscale {which}")
    getattr(cli, f"configure_{which}")(parser)
    return getattr(cli, f"run_{which}")(parser.parse_args(argv))


def test_summary_and_figures_give_the_control_from_run_folders(tmp_path, capsys):
    _write(tmp_path / "control", planted())
    assert _run("summary", [str(tmp_path / "control"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["h2"]["holds_at"] == [0.75] and s["h0"]["holds"] and s["h1"]["holds"]
    assert _run("summary", [str(tmp_path / "control")]) == 0
    out = capsys.readouterr().out
    assert "sigma + tau" in out and "H2 (at some f" in out
    assert "dataset=" not in out  # a world is the point's pre-training set, not a setting
    with pytest.raises(Exception, match="the control's metric is registered"):
        _run("summary", [str(tmp_path / "control"), "--metric", "upstream/top1"])
    figures = tmp_path / "figures"
    assert (
        _run("figures", [str(tmp_path / "control"), "--out", str(figures), "--format", "png"]) == 0
    )
    names = sorted(p.name for p in figures.iterdir())
    assert "control_gap.png" in names and "fig5_compute.png" not in names
    assert sum(n.startswith("fig4_") for n in names) == len(WORLDS)  # Fig. 4 per level
