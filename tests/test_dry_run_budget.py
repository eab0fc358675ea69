"""`vitscale grid --dry-run --profile P` before anything is submitted: the grid's resources checked against P as submission checks them, each problem
once; GPU-hours estimated from another GPU where none was measured on P's, flagged;
fine-tunes costed; node-hours and time-limit slices per cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vitscale.cli import main
from vitscale.flops import count
from vitscale.grid import calibration as cal

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
    errors = [line for line in err.splitlines() if not line.startswith("note: ")]
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


def test_a_gpu_never_measured_is_estimated_from_one_that_was(tmp_path, capsys):
    """Measured on an H100, budgeted on an A100: the H100's speed x 312/989, flagged."""
    profile = _profile(tmp_path, gpu_type="A100-SXM4-40GB")
    row = cal.Measured(
        "NVIDIA H100 80GB HBM3", "ViT-Pico/4", 32, "bf16", False, 256, 50_000.0, "", "t"
    )
    cal.append_rows(profile.parent / cal.CALIBRATION_FILE, [row])
    grid = _grid(tmp_path, resources={"default": {"gpus": 4}}, precision="bf16")
    code, out, _ = _dry_run(grid, profile, capsys, "--json")
    cells = json.loads(out)["cells"]
    assert code == 0 and {c["gpu_hours_basis"] for c in cells} == {"est."}
    per_s = 50_000.0 * 312 / 989  # images/s per A100
    assert cells[0]["gpu_hours"] == pytest.approx(1000 * 512 / per_s / 3600)
    assert cells[0]["gpu_hours_measured_on"] == "NVIDIA H100 80GB HBM3"
    _, out, _ = _dry_run(grid, profile, capsys)
    assert " est. " in out
    (warning,) = [line for line in out.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: 2 of 2 cells' GPU-hours are estimated (est.)")
    assert "NVIDIA H100 80GB HBM3 (312/989)" in warning


def test_fine_tunes_are_costed_at_their_resolution(tmp_path, capsys):
    """Two learning rates: two fine-tunes on the held-out slice and the retrain, each
    100 steps of 64 images at 64 px."""
    ft = {"datasets": ["cifar10"], "steps": 100, "batch_size": 64, "lrs": [0.01, 0.03]}
    grid = _grid(tmp_path, resources={}, finetune=ft | {"image_size": 64})
    code, out, _ = _dry_run(grid, _profile(tmp_path), capsys, "--json")
    cell = json.loads(out)["cells"][0]
    per_image = count("ViT-Pico/4", 64, num_classes=10, head="finetune").train_flops_per_example
    assert code == 0
    assert cell["finetune_exaflops"] == pytest.approx(3 * 100 * 64 * per_image / 1e18)
    both = (cell["exaflops"] + cell["finetune_exaflops"]) * 1e18
    assert cell["gpu_hours"] == pytest.approx(both / 100e12 / 3600)  # the assumed FLOP/s
    _, out, _ = _dry_run(grid, _profile(tmp_path), capsys)
    assert "pre-training + " in out and " fine-tuning exaFLOPs" in out


def test_node_hours_and_time_limit_slices_per_cell(tmp_path, capsys):
    """About 43 GPU-hours on 16 GPUs of 2 nodes: 2.7 h of wall time, 5.4 node-hours, 3
    slices of a 1 h limit."""
    profile = _profile(tmp_path, gpus_per_node=8, time_limit="01:00:00", sustained_tflops=3e-4)
    grid = _grid(tmp_path, resources={"default": {"nodes": 2, "gpus": 16}})
    code, out, _ = _dry_run(grid, profile, capsys, "--json")
    got = json.loads(out)
    cell = got["cells"][0]
    wall = cell["gpu_hours"] / 16
    assert code == 0 and 2.5 < wall < 3
    assert cell["node_hours"] == pytest.approx(2 * wall) and cell["slices"] == 3
    assert got["total"]["node_hours"] == pytest.approx(4 * wall)
    _, out, _ = _dry_run(grid, profile, capsys)
    assert "node-h" in out and "slices" in out and "jobs of at most 01:00:00" in out


def test_fig5_on_an_a100_no_longer_looks_cheaper_than_on_an_h100(capsys):
    """The paper's Fig. 5 grid: on the A100 profile every cell is estimated from the H100
    measurements, and costs more GPU-hours than on the H100s; the grid's 8-GPU, 48 h
    resources do not fit 4-GPU nodes with a 12 h limit, said once each."""
    totals = {}
    for name in ("h100x8", "a100x4-preemptible"):
        code, out, err = _dry_run(FIG5, name, capsys, "--json")
        totals[name] = json.loads(out)["total"]
        totals[name]["code"], totals[name]["err"] = code, err
    h100, a100 = totals["h100x8"], totals["a100x4-preemptible"]
    assert h100["code"] == 0 and a100["code"] == 2
    assert a100["gpu_hours_basis"]["est."] == 18
    assert a100["gpu_hours"] > 3 * h100["gpu_hours"]  # 989 / 312 = 3.17
    assert a100["err"].count("resources.default: gpus=8 on 1 node(s)") == 1
    assert a100["err"].count("error:") == len(a100["problems"]) == 7
