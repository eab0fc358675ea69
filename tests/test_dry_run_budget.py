"""`vitscale grid --dry-run --profile P` before anything is submitted (issue 31, items 7
and 8): the grid's resources checked against P as submission checks them, each problem
once; GPU-hours estimated from another GPU where none was measured on P's, flagged;
fine-tunes costed; node-hours and time-limit slices per cell."""

from __future__ import annotations

from pathlib import Path

import yaml

from vitscale.cli import main

from .helpers.configs import tiny_config

ROOT = Path(__file__).resolve().parents[1]
FIG5 = str(ROOT / "experiments" / "fig5_compute.yaml")


def _grid(tmp: Path, *, resources: dict, finetune: dict | None = None, **train) -> Path:
    """Two blocks of one tiny ViT each (two blocks: a problem must not repeat per block)."""
    base = tiny_config(train={"steps": 1000, "batch_size": 512} | train)
    base["eval"]["finetune"] = finetune or {}
    grid = {
        "name": "budget",
        "base": base,
        "blocks": [{"name": "a", "set": {"seed": 0}}, {"name": "b", "set": {"seed": 1}}],
        "resources": resources,
    }
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def _profile(tmp: Path, **keys) -> Path:
    path = tmp / "profiles" / "small.yaml"
    path.parent.mkdir(exist_ok=True)
    defaults = {"gpus_per_node": 4, "cpus_per_node": 32, "max_nodes": 2, "sustained_tflops": 100}
    path.write_text(yaml.safe_dump(defaults | keys))
    return path


def _dry_run(grid: Path, profile: Path | str, capsys, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["grid", str(grid), "--dry-run", "--profile", str(profile), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dry_run_checks_resources_against_the_profile_once_each(tmp_path, capsys):
    grid = _grid(tmp_path, resources={"default": {"gpus": 8, "time": "24:00:00"}})
    profile = _profile(tmp_path, time_limit="04:00:00")
    code, out, err = _dry_run(grid, profile, capsys, "--runs", str(tmp_path / "runs"))
    assert code == 2
    assert "total:" in out  # the table first, then the problems
    errors = err.strip().splitlines()
    assert errors == [
        f"error: {grid}: resources.default: gpus=8 on 1 node(s) but profile 'small' has 4 GPUs "
        "per node; set nodes: 2 for gpus: 8, or ask for fewer GPUs",
        f"error: {grid}: resources.default: time=24:00:00 exceeds profile 'small' limit "
        "04:00:00; ask for at most 04:00:00 (long cells checkpoint and requeue)",
    ]
    # Submission refuses the grid with the same messages, once each, not once per block.
    code = main(["grid", str(grid), "--executor", "slurm", "--profile", str(profile)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("gpus=8") == 1 and err.count("time=24:00:00") == 1
    assert not (tmp_path / "runs").exists()
