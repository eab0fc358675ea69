"""benchmarks/gpu_feed.sh, the one command for a lent GPU, proven on the CPU: its
plan (every step, its command and cap, the caps under 8 minutes, the files in the folder
given), that every command it would run accepts its arguments (a typo would cost the
GPU's few minutes), and that a step which fails or runs out of time is recorded and the
next one runs."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import gpu_feed  # noqa: E402
from benchmarks.timm_side_by_side import PAIRS  # noqa: E402
from vitscale.catalog import parse  # noqa: E402

KEYS = ["env", "a_feed", "b_eager", "b_compiled", "c_trainer", "c_phases", "d_derive", "e_scenes"]


def _gpu_feed(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, ever
    command = [str(ROOT / "benchmarks/gpu_feed.sh"), str(out), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("args", "status"), [(["--dry-run"], 0), ([], 2)])
def test_without_cuda_every_step_is_listed_with_its_command_and_cap_and_skipped(
    tmp_path, args, status
):
    out = tmp_path / "gpu"
    done = _gpu_feed(out, *args)
    assert done.returncode == status, done.stderr
    plan = gpu_feed.steps(out.resolve())
    text = (out / "plan.txt").read_text()
    assert done.stdout == text
    assert [s.key for s in plan] == KEYS
    for step in plan:
        listed = text.split(f"\n{step.key}: ")[1].split("\n\n")[0]
        assert f"cap {step.cap_s} s" in listed
        assert f"$ {step.command()}" in listed
        assert f"timeout -k {gpu_feed.KILL_AFTER_S} {step.cap_s - gpu_feed.KILL_AFTER_S} " in listed
        assert "skipped: CUDA is absent here" in listed
    assert sum(s.cap_s for s in plan) <= gpu_feed.TOTAL_S < 8 * 60
    assert [p.name for p in out.iterdir()] == ["plan.txt"]  # nothing ran
    writers = [s for s in plan if s.key not in ("env",)]
    for step in writers:  # every result lands in the folder given
        assert any(a.startswith(str(out.resolve())) for a in step.argv), step.key


class _Parsed(Exception):
    pass


@pytest.mark.parametrize("key", [k for k in KEYS if k != "env"])
def test_every_command_it_would_run_accepts_its_arguments(key, tmp_path, monkeypatch):
    """Each Python command's own parser, on the exact arguments, stopped once parsed."""
    step = {s.key: s for s in gpu_feed.steps(tmp_path)}[key]
    python, *argv = step.argv
    assert python == sys.executable
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse_args(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    with pytest.raises(_Parsed):
        if argv[0] == "-m":
            monkeypatch.setattr(sys, "argv", [argv[1], *argv[2:]])
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            monkeypatch.setattr(sys, "argv", argv)
            runpy.run_path(str(ROOT / argv[0]), run_name="__main__")
    if "--models" in argv:  # checked after parsing: known to us and paired with timm's
        for model in argv[argv.index("--models") + 1].split(","):
            assert parse(model).name == model and model in PAIRS


def test_a_failed_or_timed_out_step_is_recorded_and_the_next_one_runs(tmp_path, capsys):
    py = sys.executable
    plan = [
        gpu_feed.Step("x_fails", "", 20, (py, "-c", "import sys; print('half'); sys.exit(3)"), ""),
        gpu_feed.Step("y_hangs", "", 7, (py, "-c", "import time; time.sleep(60)"), ""),
        gpu_feed.Step("z_works", "", 20, (py, "-c", "print('done')"), ""),
    ]
    results = gpu_feed.run_plan(plan, tmp_path)
    status = {r["step"]: r["status"] for r in results}
    assert status == {"x_fails": "failed (exit 3)", "y_hangs": "timed out at 7 s", "z_works": "ok"}
    assert next(r for r in results if r["step"] == "y_hangs")["seconds"] < 7 + 1
    assert (tmp_path / "x_fails.txt").read_text() == "half\n"
    assert (tmp_path / "z_works.txt").read_text() == "done\n"
    assert json.loads((tmp_path / "steps.json").read_text()) == results
    assert "| y_hangs | timed out at 7 s |" in (tmp_path / "summary.md").read_text()


def test_d_derives_the_decode_choice_and_the_memory_check_and_the_summary_shows_them(tmp_path):
    feed = [("resident", 2400.0), ("workers", 1371.0), ("device", 2350.0)]
    rows = [{"path": f, "images_per_s": r, "feed": f} for f, r in feed]
    (tmp_path / "a_feed.json").write_text(json.dumps({"rows": [{"path": "cpu"}, *rows]}))
    runs = [  # the estimate may be at most 10% above the measured peak, never under it
        {"model": "ViT-B/16", "micro_batch": 256, "peak_memory_gib": 17.7, "estimated_gib": 18.1},
        {"model": "BiT-R50x1", "micro_batch": 256, "peak_memory_gib": 20.0, "estimated_gib": 25.3},
        {"model": "R50x1+ViT-B/16", "micro_batch": 256, "peak_memory_gib": 48, "estimated_gib": 47},
    ]
    (tmp_path / "c_trainer.json").write_text(json.dumps({"runs": runs}))
    derived = gpu_feed.derive(tmp_path)
    assert derived["decode"]["auto_on_cuda"] == "device"
    assert derived["decode"]["ratio_to_resident"]["device"] == pytest.approx(2350 / 2400)
    assert derived["decode"]["target_met"] is True
    assert [m["within"] for m in derived["memory"]] == [True, False, False]
    assert derived["calibration_rows"] is None
    assert json.loads((tmp_path / "derived.json").read_text()) == derived
    b = {"rows": [{"model": "BiT-R50x1", "timm_img_s": 1000.0, "ours_img_s": 1600.0, "ratio": 1.6}]}
    (tmp_path / "b_eager.json").write_text(json.dumps(b))
    (tmp_path / "env.txt").write_text("name, memory.total [MiB]\nNVIDIA H200, 143771 MiB\n")
    text = gpu_feed.summary(
        tmp_path, [{"step": "a_feed", "status": "ok", "seconds": 1, "cap_s": 9}]
    )
    assert "GPU: NVIDIA H200, 143771 MiB" in text
    assert "| device | 2,350 | 98% |" in text and "should choose: **device**" in text
    assert "| BiT-R50x1 | 1,000 | 1,600 | 1.60 |" in text
    assert "| BiT-R50x1 | 256 | 20.0 | 25.3 | 1.27 (outside) |" in text
    assert (tmp_path / "summary.md").read_text() == text


def test_the_feeds_of_step_a_run_on_the_cpu(tmp_path):
    """(a)'s three feeds end to end (resident, workers' decode, the device decoder), small:
    a change to the loader or the decoder that breaks them fails here, not on the GPU."""
    from benchmarks.loader_throughput import make_jpegs, train_step_rates
    from vitscale.data.shards.write import shard_dataset

    make_jpegs(tmp_path / "tree", 8, classes=2)
    shard_dataset(
        f"imagefolder:{tmp_path / 'tree'}", tmp_path / "shards", shard_size=4, progress=False
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the benchmark runs: two threads on a shared machine stall
    try:
        rates = train_step_rates(
            tmp_path / "shards",
            0,
            steps=1,
            batch=2,
            device="cpu",
            model_name="ViT-Ti/16",
            image_size=32,
        )
    finally:
        torch.set_num_threads(threads)
    assert rates.keys() == {"resident", "loader", "loader_gpu_decode"}
    assert all(r > 0 for r in rates.values())


def test_the_clock_check_runs_the_trainer_and_fine_tuning_and_reports_both(tmp_path, capsys):
    """benchmarks/phase_check.py end to end on the CPU, tiny: no events here, so the host's
    times stand for the device's and the step phase holds all of them (share about 1)."""
    from benchmarks import phase_check

    out = tmp_path / "c_phases.json"
    args = ["--device", "cpu", "--model", "ViT-Pico/4", "--image-size", "32", "--batch", "16"]
    args += ["--steps", "6", "--log-every", "3", "--finetune-steps", "4", "--out", str(out)]
    assert phase_check.main(args) == 0
    got = json.loads(out.read_text())
    assert got["events"] is False and got["finetune_steps"] == 4
    assert 0.95 <= got["step_share"] < 1.5, got
    assert got["finetune_images_per_s"] > 0 and got["finetune_host_share"] == pytest.approx(1.0)
    assert "fine-tuning" in capsys.readouterr().out
    assert "## (c) the trainer's clocks, ViT-Pico/4" in gpu_feed.summary(tmp_path, [])
