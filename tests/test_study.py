"""The study grids (`make study`: both worlds), reduced, end to end: grid file -> local
executor -> run folders -> `vitscale summary --json`. Their structure is checked, not
their verdicts (a few steps decide nothing; the measured verdicts are in docs/studies.md, "The
study")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vitscale.cli import main
from vitscale.config import yaml_load

from .helpers.configs import in_seconds

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "experiments" / "study.yaml"
SCENES = ROOT / "experiments" / "scenes_study.yaml"


def _reduced(tmp: Path, study: Path = STUDY) -> Path:
    """The study's own blocks, each cut to one model; the two-seed blocks to their
    smallest and largest subset, the one-seed ones to one subset, the compute blocks to
    one shorter duration; a few steps each."""
    grid = in_seconds(yaml_load(study.read_text()))
    for block in grid["blocks"]:
        axes = block["axes"]
        axes["model.name"] = axes["model.name"][-1:]
        if "data.subset" in axes:
            subsets = axes["data.subset"]
            axes["data.subset"] = [subsets[0], subsets[-1]] if "seed" in axes else subsets[:1]
        if "train.steps" in axes:
            axes["train.steps"] = [2]
    path = tmp / study.name
    path.write_text(yaml.safe_dump(grid))
    return path


@pytest.mark.slow
def test_reduced_study_runs_end_to_end_and_summarises_as_json(tmp_path, capsys):
    grid = _reduced(tmp_path)
    runs = tmp_path / "runs"
    assert (
        main(["grid", str(grid), "--executor", "local", "--workers", "2", "--runs", str(runs)]) == 0
    )
    capsys.readouterr()
    assert main(["summary", str(runs / "study"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)

    assert s["metric"] == "fewshot/synthetic-glyphs/5shot"
    assert s["fig4_steps"] == 4
    assert [row["num_examples"] for row in s["subsets"]] == [1536, 4_800, 76_800]
    for row in s["subsets"]:
        seeds = 1 if row["num_examples"] == 4_800 else 2
        for side in ("vit", "resnet"):
            best = row[side]
            assert best["seeds"] == seeds
            assert best["model"] == {"vit": "ViT-Femto/8", "resnet": "BiT-R11x0.5"}[side]
            assert 0 <= best["mean"] <= 100
            assert (best["seed_spread"] is None) == (seeds == 1)  # one seed: not measured
        assert row["gap"] == pytest.approx(row["resnet"]["mean"] - row["vit"]["mean"])
    change = s["gap_change"]
    assert change["smallest"] == 1536 and change["largest"] == 76_800
    assert change["shrink"] == pytest.approx(change["gap_smallest"] - change["gap_largest"])
    assert isinstance(change["trend"], bool) and isinstance(change["crossover"], bool)
    # Fig. 5: per family the largest subset at 2 and 4 steps, one frontier each.
    assert set(s["frontier"]) == {"ViT", "ResNet"}
    for points in s["frontier"].values():
        assert sorted(p["steps"] for p in points) == [2, 4]
        assert any(p["on_frontier"] for p in points)
        flops = {p["steps"]: p["exaflops"] for p in points}
        assert flops[4] == pytest.approx(2 * flops[2])
    comparison = s["frontier_comparison"]
    assert comparison == {} or {"range", "segments", "crossings"} <= set(comparison)
    assert s["verdict"] and all(isinstance(line, str) for line in s["verdict"])
    assert any(line.startswith("smallest subset (1,536 images)") for line in s["verdict"])


def _makefile_value(name: str) -> str:
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith(name))
    return line.split("=", 1)[1].strip()


@pytest.mark.slow
def test_reduced_scenes_study_summarises_its_registered_metric(tmp_path, capsys):
    """The scenes world's half: multi-label sigmoid pre-training, the five-task suite read
    through the fair probe, and the verdict on the pre-registered suite mean (the
    Makefile's SCENES_METRIC, which the registration names)."""
    grid = _reduced(tmp_path, SCENES)
    runs = tmp_path / "runs"
    argv = ["grid", str(grid), "--executor", "local", "--workers", "2", "--runs", str(runs)]
    assert main(argv) == 0
    capsys.readouterr()
    metric = _makefile_value("SCENES_METRIC")
    registration = (ROOT / "experiments" / "preregistered" / "scenes.md").read_text()
    assert " ".join(metric.split()) in " ".join(registration.split())
    assert main(["summary", str(runs / "scenes_study"), "--metric", metric, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["metric"] == metric
    assert [row["num_examples"] for row in s["subsets"]] == [1536, 4_800, 76_800]
    cell = next((runs / "scenes_study").glob("*/result.json"))
    result = json.loads(cell.read_text())
    tasks = {
        "scenes-parts",
        "scenes-arrangements",
        "scenes-same",
        "scenes-count",
        "synthetic-glyphs",
    }
    assert {k.split("/")[1] for k in result["best"] if k.startswith("fewshot/")} == tasks
    config = json.loads((cell.parent / "config.json").read_text())
    assert config["train"]["loss"] == "sigmoid" and config["eval"]["fewshot"]["width"] == 48
