"""GPU-hour budgets from measured speeds (vitscale.grid.calibration) and profiles found by
name: `vitscale grid --dry-run --profile NAME` says, per cell, whether its GPU-hours come
from a measurement of its model, of its family, or from the profile's assumed FLOP/s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vitscale.cli import main
from vitscale.flops import count
from vitscale.grid import calibration as cal
from vitscale.grid.profile import find_profile, known_profiles, load_profile

ROOT = Path(__file__).resolve().parents[1]
GPU = "NVIDIA H100 80GB HBM3"


def _row(model: str, rate: float, *, size: int = 224, compile: bool = False) -> cal.Measured:
    return cal.Measured(GPU, model, size, "bf16", compile, 256, rate, "2026-11-24", "test")


def _setup(tmp: Path, rows: list[cal.Measured], gpu_type: str | None = "H100 80GB HBM3") -> Path:
    profiles = tmp / "profiles"
    profiles.mkdir()
    text = "gpus_per_node: 8\ncpus_per_node: 64\nsustained_tflops: 400\ngpu_mem_gb: 80\n"
    if gpu_type:
        text += f"gpu_type: {gpu_type}\n"
    (profiles / "mine.yaml").write_text(text)
    cal.append_rows(profiles / cal.CALIBRATION_FILE, rows)
    grid = tmp / "grid.yaml"
    grid.write_text(
        "name: g\n"
        "base:\n"
        "  data: {dataset: synthetic, image_size: 224}\n"
        "  train: {steps: 1000, batch_size: 512, precision: bf16}\n"
        "  eval: {fewshot: {datasets: []}, upstream: {examples: 0}}\n"
        "axes:\n"
        "  model.name: [ViT-B/16, ViT-S/16, BiT-R50x1]\n"
    )
    return profiles / "mine.yaml"


def _dry_run(tmp: Path, profile: Path, capsys) -> dict:
    capsys.readouterr()
    argv = ["grid", str(tmp / "grid.yaml"), "--dry-run", "--json", "--profile", str(profile)]
    assert main([*argv, "--runs", str(tmp / "runs")]) == 0
    return json.loads(capsys.readouterr().out)


def test_gpu_hours_from_the_model_then_its_family_then_the_assumption(tmp_path, capsys):
    profile = _setup(tmp_path, [_row("ViT-B/16", 2000.0), _row("ViT-B/16", 2400.0)])
    out = _dry_run(tmp_path, profile, capsys)
    cells = {c["model"]: c for c in out["cells"]}
    examples = 1000 * 512
    # measured: the median of the model's rows
    assert cells["ViT-B/16"]["gpu_hours_basis"] == cal.MEASURED
    assert cells["ViT-B/16"]["gpu_hours"] == pytest.approx(examples / 2200.0 / 3600)
    # family: ViT-B/16's achieved FLOP/s, spent on ViT-S/16's FLOPs per image
    b16 = count("ViT-B/16", 224, head="pretrain").train_flops_per_example
    s16 = count("ViT-S/16", 224, head="pretrain").train_flops_per_example
    assert cells["ViT-S/16"]["gpu_hours_basis"] == cal.FAMILY
    assert cells["ViT-S/16"]["gpu_hours"] == pytest.approx(examples / (2200.0 * b16 / s16) / 3600)
    # assumed: no ResNet was measured
    assert cells["BiT-R50x1"]["gpu_hours_basis"] == cal.ASSUMED
    assert cells["BiT-R50x1"]["gpu_hours"] == pytest.approx(
        cells["BiT-R50x1"]["exaflops"] * 1e18 / 400e12 / 3600
    )
    assert out["total"]["gpu_hours_basis"] == {"measured": 1, "family": 1, "est.": 0, "assumed": 1}


def test_measurements_on_another_gpu_are_estimates_and_other_compile_settings_do_not_count(
    tmp_path, capsys
):
    rows = [_row("ViT-B/16", 2000.0, compile=True), _row("BiT-R50x1", 1900.0, size=128)]
    out = _dry_run(tmp_path, _setup(tmp_path, rows, gpu_type="A100"), capsys)
    basis = {c["model"]: c["gpu_hours_basis"] for c in out["cells"]}
    assert basis == {"ViT-B/16": "assumed", "ViT-S/16": "assumed", "BiT-R50x1": cal.ESTIMATED}
    capsys.readouterr()
    (tmp_path / "profiles" / "mine.yaml").write_text(
        "gpus_per_node: 8\nsustained_tflops: 400\ngpu_type: H100\n"
    )
    out = _dry_run(tmp_path, tmp_path / "profiles" / "mine.yaml", capsys)
    basis = {c["model"]: c["gpu_hours_basis"] for c in out["cells"]}
    # compiled ViT rows do not speak for eager cells; a 128 px BiT row is its family's
    assert basis == {"ViT-B/16": "assumed", "ViT-S/16": "assumed", "BiT-R50x1": "family"}


def test_the_table_says_which_numbers_are_measured(tmp_path, capsys):
    profile = _setup(tmp_path, [_row("ViT-B/16", 2400.0)])
    capsys.readouterr()
    argv = ["grid", str(tmp_path / "grid.yaml"), "--dry-run", "--profile", str(profile)]
    assert main([*argv, "--runs", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "1 cell(s) from their model's speed measured on H100 80GB HBM3" in out
    assert "1 from their family's measured TFLOP/s" in out
    assert "1 assumed at 400 TFLOP/s" in out


def test_a_malformed_calibration_row_names_its_line(tmp_path):
    path = tmp_path / cal.CALIBRATION_FILE
    cal.append_rows(path, [_row("ViT-B/16", 2400.0)])
    with path.open("a") as fh:
        fh.write(f"{GPU},ViT-Q/16,224,bf16,false,256,100,2026-11-24,x\n")
    with pytest.raises(ValueError, match=r"line 3: .*ViT-Q/16"):
        cal.load_calibration(path)


def test_profiles_are_found_by_name_and_an_unknown_name_lists_the_known_ones():
    assert find_profile("h100x8").resolve() == ROOT / "slurm" / "profiles" / "h100x8.yaml"
    assert {"h100x8", "local", "a100x4-preemptible"} <= set(known_profiles())
    profile = load_profile("h100x8")
    assert profile.name == "h100x8" and profile.gpu_type == "H100 80GB HBM3"
    # the shipped calibration: the H100 measurements of benchmarks/RESULTS.md, "GPU smoke"
    assert {r.model for r in profile.calibration} >= {"ViT-B/16", "BiT-R50x1"}
    with pytest.raises(ValueError, match=r"not found: h100x9; known profiles: .*h100x8"):
        load_profile("h100x9")


def test_the_shipped_h100_measurements_budget_bit_by_its_own_speed():
    """The reason for calibrating: BiT's measured MFU (5%) is far below the profile's
    assumption, so its budget from measurements is several times the assumed one."""
    profile = load_profile("h100x8")
    rate, basis, gpu = cal.images_per_s(
        profile.calibration,
        profile.gpu_type,
        model="BiT-R50x1",
        image_size=224,
        precision="bf16",
        compile=False,
    )
    assumed = profile.sustained_tflops * 1e12 / count("BiT-R50x1", 224).train_flops_per_example
    assert basis == cal.MEASURED and rate == pytest.approx(1987.5) and "H100" in gpu
    assert assumed / rate > 5
