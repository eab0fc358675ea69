"""The GPU measurements in one prepared command: ``benchmarks/gpu_feed.sh OUT_DIR``.

Why one command: a GPU is lent to us rarely, for about 15 minutes on a fresh machine with
no internet, at most 10 minutes a command; so everything runs from one command that ends
in under 8 minutes (TOTAL_S, with a rerun's worth left) and writes into one folder. The
steps, in the issue's order of value, are STEPS below, each under its own cap (``timeout``,
SIGTERM then SIGKILL 5 s later, within the cap) sized from the one H100 run we have
(benchmarks/RESULTS.md: ViT-B/16 bf16 2,404 img/s eager, 3,076 compiled; BiT-R50x1 1,984;
R50x1+ViT-B/16 739; shard-fed 1,371). A step that fails or runs out of time is recorded
and the next one runs; the exit status is then 1.

Without CUDA, or with ``--dry-run``, it runs nothing: it prints every step with its
command and cap, each skipped, writes OUT_DIR/plan.txt and exits 2 (0 with ``--dry-run``).

OUT_DIR afterwards: ``plan.txt``; per step ``<step>.txt`` (its output) and its JSON;
``calibration_rows.csv`` (rows for slurm/profiles/calibration.csv) and ``derived.json``
(the memory check and ``data.decode: auto``'s choice), for the lead to commit, nothing
applied here; ``steps.json`` (each step's status and seconds); ``summary.md``.

    benchmarks/gpu_feed.sh bench/gpu-2026-11-28             # on the GPU machine
    benchmarks/gpu_feed.sh /tmp/plan --dry-run               # anywhere: the plan
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOTAL_S = 475  # every cap together, the scenes step taking what the others left: < 8 min
KILL_AFTER_S = 5  # SIGTERM at cap - 5 s (the trainer checkpoints, Python flushes), then KILL
MODELS = "ViT-B/16,BiT-R50x1,R50x1+ViT-B/16"  # (b) and (c): the three
FEED_TARGET = 0.95  # (a): the better feed's share of resident speed
MEMORY_MARGIN = 0.10  # (c): the estimate may be at most this far above the measured peak
SCENES_DRAFT = "## The GPU study (not registered yet)"  # experiments/preregistered/scenes.md


@dataclass(frozen=True)
class Step:
    key: str
    what: str
    cap_s: int
    argv: tuple[str, ...]
    sizing: str  # why the cap is what it is
    skip: str | None = None  # a reason this step does not run even on a GPU

    def command(self) -> str:
        timeout = ("timeout", "-k", str(KILL_AFTER_S), str(self.cap_s - KILL_AFTER_S))
        return shlex.join([*timeout, *self.argv])


def steps(out: Path, python: str = sys.executable) -> list[Step]:
    """The plan, in order of value; ``out`` the folder every file goes to."""
    from vitscale.data.workers import auto_num_workers

    workers = max(1, auto_num_workers(processes_on_node=1, accelerated=True))
    fixed = [
        Step(
            "env",
            "the GPU, its driver and CUDA",
            10,
            ("nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"),
            "one query",
        ),
        Step(
            "a_feed",
            "(a) ViT-B/16 bf16, batch 256: resident tensors, shard-fed with the decode on the "
            f"{workers} loader workers, with the decode on the device; img/s, ratio to resident",
            105,
            (python, "benchmarks/loader_throughput.py", "--device", "cuda", "--train-step")
            + ("--batch", "256", "--workers", str(workers), "--rounds", "1", "--seconds", "2")
            + ("--out", str(out / "a_feed.json")),
            "512 JPEGs made and sharded (~20 s on one core), 4 CPU paths x 2 s and the loader "
            "alone twice (~25 s), then 33 steps of 256 per feed: 3.5 s resident at 2,404 img/s, "
            "~6 s each fed at ~1,375 (the H100's), plus the workers' and CUDA's start",
        ),
        Step(
            "b_eager",
            f"(b) our step against timm's, eager, batch 256, bf16: {MODELS}",
            70,
            (python, "benchmarks/timm_side_by_side.py", "--models", MODELS, "--compile")
            + ("eager", "--batch", "256", "--steps", "10", "--rounds", "2")
            + ("--out", str(out / "b_eager.json")),
            "6 steps built (ours, timm's x 3 models), 23 steps of 256 each: 2.5, 3 and 8 s at "
            "2,404, 1,984 and ~740 img/s (H100), ~27 s, plus builds and cuDNN's autotuning",
        ),
        Step(
            "b_compiled",
            f"(b) the same, torch.compile: {MODELS}",
            125,
            (python, "benchmarks/timm_side_by_side.py", "--models", MODELS, "--compile")
            + ("compiled", "--batch", "256", "--steps", "10", "--rounds", "2")
            + ("--out", str(out / "b_compiled.json")),
            "6 cold compilations (no inductor cache on a fresh machine, ~20-40 s each, "
            "unmeasured here) plus ~25 s of steps at 3,076 img/s for ViT-B/16; each pair's row "
            "is written as it ends, so a cap reached keeps the pairs done (ViT-B/16 first)",
        ),
        Step(
            "c_trainer",
            f"(c) the real trainer, bf16, batch 256, 30 steps each: {MODELS}; measured peak "
            "memory against vitscale.memory's estimate, and the speeds as calibration rows (d)",
            110,
            (python, "benchmarks/gpu_smoke.py", "--models", MODELS, "--steps", "30")
            + ("--gpus", "1", "--out", str(out / "c_trainer.json"))
            + ("--calibrate", str(out / "calibration_rows.csv")),
            "3 runs under torchrun: ~20 s start each, 30 steps of 256 (3.2, 3.9, ~10 s at the "
            "H100's 2,404, 1,984, ~740 img/s), then 20 s of the loader alone",
        ),
        Step(
            "c_phases",
            "(c) the trainer's clocks: result.json's time_s['step'] against CUDA events "
            "around each step (>= 0.95 of them), fine-tuning's img/s and its host's share "
            "of each step (well under 1: copies queued, not waited for)",
            40,
            (python, "benchmarks/phase_check.py", "--device", "cuda", "--model", "ViT-S/16")
            + ("--steps", "40", "--finetune-steps", "20", "--out", str(out / "c_phases.json")),
            "one process: ~15 s to start and build, 40 + 20 steps of 128 at 224 px of "
            "ViT-S/16 (~4x ViT-B/16's 2,404 img/s: ~3 s), its fine-tuning test pass",
        ),
        Step(
            "d_derive",
            "(d) from (a) and (c): data.decode: auto's choice, the memory check, the "
            "calibration rows; written for the lead to commit, nothing applied",
            10,
            (python, "benchmarks/gpu_feed.py", "--derive", str(out)),
            "reads three JSON files",
        ),
    ]
    registered = SCENES_DRAFT not in (ROOT / "experiments/preregistered/scenes.md").read_text()
    left = TOTAL_S - sum(s.cap_s for s in fixed)
    skip = None
    if not registered:
        skip = (
            "experiments/scenes_gpu.yaml is a draft, not registered "
            "(experiments/preregistered/scenes.md, registration 4): no cell runs before"
        )
    elif left < 60:
        skip = f"{left} s left of TOTAL_S: under a minute, no cell would get past its start"
    scenes = Step(
        "e_scenes",
        "(e) if time remains: the first cells of the scenes GPU study",
        left,
        (python, "-m", "vitscale.cli", "grid", "experiments/scenes_gpu.yaml")
        + ("--executor", "local", "--workers", "1", "--runs", str(out / "e_scenes_runs"))
        + ("--stop-timeout", str(KILL_AFTER_S - 1)),
        "what the steps before left of TOTAL_S; a cell stopped by the cap has checkpointed "
        "and resumes from there",
        skip=skip,
    )
    return [*fixed, scenes]


def plan_text(plan: list[Step], skipped: str | None) -> str:
    lines = [
        f"benchmarks/gpu_feed.sh: {len(plan)} steps, caps summing to {TOTAL_S} s at most; "
        f"each command runs in {ROOT}"
    ]
    for s in plan:
        cap = f"{s.cap_s} s" + (" (at least: the time left)" if s.key == "e_scenes" else "")
        lines += [f"\n{s.key}: {s.what}", f"  cap {cap}: {s.sizing}", f"  $ {s.command()}"]
        if skipped:
            lines.append(f"  skipped: {skipped}")
        if s.skip:
            lines.append(f"  skipped even on a GPU: {s.skip}")
    return "\n".join(lines) + "\n"


def run_step(step: Step, out: Path, cap_s: int) -> dict:
    """Run one step under its cap, its output to ``out/<key>.txt`` and to ours."""
    step = Step(step.key, step.what, cap_s, step.argv, step.sizing)
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    print(f"\n== {step.key} (cap {cap_s} s): {step.command()}", flush=True)
    started = time.monotonic()
    with (out / f"{step.key}.txt").open("w") as log:
        try:
            proc = subprocess.Popen(
                shlex.split(step.command()),
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,  # the backstop below ends the whole group
            )
        except OSError as e:
            log.write(f"{e}\n")
            return {"step": step.key, "status": f"failed: {e}", "seconds": 0.0, "cap_s": cap_s}
        backstop = threading.Timer(cap_s + 10, _kill_group, (proc.pid,))
        backstop.start()
        for line in proc.stdout:
            log.write(line)
            print(line, end="", flush=True)
        rc = proc.wait()
        backstop.cancel()
    seconds = round(time.monotonic() - started, 1)
    status = "ok" if rc == 0 else f"failed (exit {rc})"
    if rc in (124, 137, -9):
        status = f"timed out at {cap_s} s"
    return {"step": step.key, "status": status, "seconds": seconds, "cap_s": cap_s}


def _kill_group(pid: int) -> None:
    """The step's whole process group, where ``timeout`` did not end it (a backstop)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def derive(out: Path) -> dict:
    """(d): ``data.decode: auto``'s choice on a GPU from (a), and (c)'s memory check."""
    derived: dict = {}
    feed = _load(out / "a_feed.json")
    rates = {r["feed"]: r["images_per_s"] for r in (feed or {}).get("rows", []) if "feed" in r}
    if {"resident", "workers", "device"} <= rates.keys():
        best = max(("workers", "device"), key=rates.get)
        derived["decode"] = {
            "images_per_s": rates,
            "ratio_to_resident": {k: rates[k] / rates["resident"] for k in ("workers", "device")},
            "auto_on_cuda": best,  # what `auto` should choose on a GPU
            "target_met": rates[best] / rates["resident"] >= FEED_TARGET,
        }
    trainer = _load(out / "c_trainer.json")
    if trainer:
        derived["memory"] = [
            {
                "model": r["model"],
                "micro_batch": r["micro_batch"],
                "peak_gib": r["peak_memory_gib"],
                "estimate_gib": r["estimated_gib"],
                "estimate_over_peak": r["estimated_gib"] / r["peak_memory_gib"],
                "within": 1.0 <= r["estimated_gib"] / r["peak_memory_gib"] <= 1.0 + MEMORY_MARGIN,
            }
            for r in trainer["runs"]
            if r["peak_memory_gib"]  # 0: the trainer logged no peak
        ]
    rows = out / "calibration_rows.csv"
    derived["calibration_rows"] = str(rows) if rows.is_file() else None
    (out / "derived.json").write_text(json.dumps(derived, indent=2) + "\n")
    print(json.dumps(derived, indent=2))
    return derived


def summary(out: Path, results: list[dict]) -> str:
    """summary.md: what ran, then the numbers against the issue's targets."""
    env = out / "env.txt"  # nvidia-smi's CSV: a header, then the GPU
    gpu = env.read_text().strip().splitlines()[-1] if env.is_file() else "unknown"
    lines = ["# GPU measurements (benchmarks/gpu_feed.sh)", "", f"GPU: {gpu}", ""]
    lines += ["| step | status | seconds | cap s |", "|---|---|---:|---:|"]
    lines += [f"| {r['step']} | {r['status']} | {r['seconds']} | {r['cap_s']} |" for r in results]
    derived = _load(out / "derived.json") or {}
    if d := derived.get("decode"):
        lines += ["", f"## (a) the feed, ViT-B/16 bf16 batch 256 (target >= {FEED_TARGET:.0%})"]
        lines += ["", "| feed | img/s | of resident |", "|---|---:|---:|"]
        for k, v in d["images_per_s"].items():
            share = d["ratio_to_resident"].get(k, 1.0)
            lines.append(f"| {k} | {v:,.0f} | {share:.0%} |")
        lines += ["", f"`data.decode: auto` on a GPU should choose: **{d['auto_on_cuda']}**"]
    for key in ("b_eager", "b_compiled"):
        if b := _load(out / f"{key}.json"):
            lines += ["", f"## (b) ours against timm, {key[2:]} (target >= 1.2x, BiT >= 1.5x)"]
            lines += ["", "| model | timm img/s | ours img/s | ours/timm |", "|---|---:|---:|---:|"]
            lines += [
                f"| {r['model']} | {r['timm_img_s']:,.0f} | {r['ours_img_s']:,.0f} "
                f"| {r['ratio']:.2f} |"
                for r in b["rows"]
            ]
    if m := derived.get("memory"):
        lines += [
            "",
            f"## (c) memory: estimate against measured peak (<= {MEMORY_MARGIN:.0%} above)",
            "",
            "| model | micro | peak GiB | estimate GiB | ratio |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r['model']} | {r['micro_batch']} | {r['peak_gib']:.1f} | {r['estimate_gib']:.1f} "
            f"| {r['estimate_over_peak']:.2f}{'' if r['within'] else ' (outside)'} |"
            for r in m
        ]
    if c := _load(out / "c_phases.json"):
        lines += [
            "",
            f"## (c) the trainer's clocks, {c['model']}",
            "",
            f"time_s['step'] {c['time_s']['step']:.2f} s against CUDA events "
            f"{c['pretrain_device_s']:.2f} s: share {c['step_share']:.2f} (target >= 0.95); "
            f"fine-tuning {c['finetune_images_per_s'] or 0:,.0f} img/s, host "
            f"{c['finetune_host_share'] or 0:.2f} of each step's device time",
        ]
    if rows := derived.get("calibration_rows"):
        lines += ["", f"## (d) calibration rows for slurm/profiles/calibration.csv: `{rows}`"]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the folder every result goes to")
    p.add_argument("--dry-run", action="store_true", help="print and write the plan only")
    p.add_argument("--derive", action="store_true", help="step (d) alone, on OUT's files")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.derive:
        derive(args.out)
        return 0
    import torch

    cuda = torch.cuda.is_available()
    plan = steps(args.out.resolve())
    skipped = None if cuda else "CUDA is absent here"
    if cuda and args.dry_run:
        skipped = "--dry-run"
    elif cuda and (args.out / "steps.json").exists():
        p.error(f"{args.out} holds an earlier run's results: give a new folder")
    text = plan_text(plan, skipped)
    (args.out / "plan.txt").write_text(text)
    print(text, end="")
    if skipped:
        return 0 if args.dry_run else 2
    results = run_plan(plan, args.out)
    failed = [r["step"] for r in results if not r["status"].startswith(("ok", "skipped"))]
    if failed:
        print(f"gpu_feed: {', '.join(failed)} did not finish; see {args.out}", file=sys.stderr)
    return 1 if failed else 0


def run_plan(plan: list[Step], out: Path) -> list[dict]:
    """Each step in turn, whatever the one before did; steps.json after each, then
    summary.md."""
    started, results = time.monotonic(), []
    for step in plan:
        cap = step.cap_s
        if step.key == "e_scenes":
            cap = int(TOTAL_S - (time.monotonic() - started))
        if step.skip:
            result = {"step": step.key, "status": f"skipped: {step.skip}", "seconds": 0.0}
        elif cap <= KILL_AFTER_S:
            result = {"step": step.key, "status": "skipped: no time left", "seconds": 0.0}
        else:
            result = run_step(step, out, cap)
        results.append(result | {"cap_s": cap})
        (out / "steps.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\n" + summary(out, results), end="")
    return results


if __name__ == "__main__":
    sys.exit(main())
