"""A duration sweep both ways, on the CPU (docs/schedules.md, "Measured").

Each model is pre-trained for 4 durations, 1/8 to all of the longest run, two seeds, two
ways: independent runs with the study's linear decay (every duration from step 0), and a
``wsd`` schedule (20% ``1-sqrt`` cooldowns) whose durations share their stable phase (one
trunk per model and seed, three branches). Everything else is the study's glyph-world cell
(experiments/study.yaml: 76,800 images, batch 128, lr 4e-3, wd 0.1, fp32) but a shorter
warm-up (10 steps: the shortest run's cooldown must start after it) and an evaluation at
the end only. Prints, per way, the compute the cells embody and what was spent, and the
workers' seconds; per model and duration, the final 5-shot glyph accuracy both ways (mean
and seed spread, max - min).

    python benchmarks/wsd_side_by_side.py --out /tmp/wsd              # hours on 2 shared cores
    python benchmarks/wsd_side_by_side.py --out /tmp/wsd --models ViT-Femto/8 --batch 32 --longest 160
    python benchmarks/wsd_side_by_side.py --out /tmp/wsd --no-run     # read an earlier run
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vitscale import record as rf  # noqa: E402

METRIC = rf.fewshot_key("synthetic-glyphs", 5)
WAYS = {
    "linear": {"schedule": "linear"},
    "wsd": {"schedule": "wsd", "cooldown": 0.2, "cooldown_shape": "1-sqrt"},
}


MODELS = {
    "ViT-Femto/8": {"model.name": "ViT-Femto/8", "model.pre_logits": False},
    "BiT-R11x0.5": {"model.name": "BiT-R11x0.5"},
}


def grid(way: str, *, longest: int, seeds: list[int], batch: int, models: list[str]) -> dict:
    return {
        "name": f"sweep_{way}",
        "base": {
            "data": {"dataset": "synthetic", "image_size": 32, "subset": 76800},
            "train": {"batch_size": batch, "log_every": 10, "checkpoint_every": 100, "precision": "fp32"},
            "optim": {"warmup_steps": 10, "lr": 4.0e-3, "weight_decay": 0.1, **WAYS[way]},
            "eval": {
                "batch_size": 500,
                "fewshot": {"datasets": ["synthetic-glyphs"], "shots": [5], "seeds": 3, "test_examples": 1000},
                "upstream": {"examples": 0},
            },
            "wandb": {"mode": "disabled"},
        },
        "axes": {"train.steps": [longest // 8, longest // 4, longest // 2, longest], "seed": seeds},
        "blocks": [{"name": m.replace("/", "-"), "set": MODELS[m]} for m in models],
    }  # fmt: skip


def read(folder: Path) -> list[dict]:
    out = []
    for run in sorted(p for p in folder.iterdir() if (p / rf.RESULT).is_file()):
        r = rf.RunResult.read(run)
        config = rf.read_json(run / rf.CONFIG)
        shared_s = (r.branched_from or {}).get("elapsed_s", 0.0)
        out.append(
            {
                "model": r.model,
                "steps": r.steps,
                "seed": config["seed"],
                "accuracy": r.final.get(METRIC),
                "exaflops": r.pretrain_exaflops,
                "spent_exaflops": r.spent_exaflops,
                "spent_s": r.wall_clock_s - shared_s,  # this cell's own seconds
                "branched": r.branched_from is not None,
            }
        )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--longest", type=int, default=240)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--no-run", action="store_true")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"ways": {}, "cells": {}}
    for way in WAYS:
        path = args.out / f"sweep_{way}.yaml"
        spec = grid(
            way, longest=args.longest, seeds=args.seeds, batch=args.batch, models=args.models
        )
        path.write_text(yaml.safe_dump(spec))
        if not args.no_run:
            started = time.perf_counter()
            command = [sys.executable, "-m", "vitscale.cli", "grid", str(path), "--executor",
                       "local", "--workers", "1", "--runs", str(args.out / "runs")]  # fmt: skip
            subprocess.run(command, check=True, cwd=ROOT)
            summary["ways"][way] = {"grid_wall_s": time.perf_counter() - started}
        cells = read(args.out / "runs" / f"sweep_{way}")
        summary["cells"][way] = cells
        summary["ways"].setdefault(way, {})
        summary["ways"][way] |= {
            "cells": len(cells),
            "runs_from_step_0": sum(not c["branched"] for c in cells),
            "exaflops": sum(c["exaflops"] for c in cells),
            "spent_exaflops": sum(c["spent_exaflops"] for c in cells),
            "worker_s": sum(c["spent_s"] for c in cells),
        }
    print(json.dumps(summary["ways"], indent=2))
    print("\n| model | steps | linear 5-shot (seeds) | wsd 5-shot (seeds) | wsd - linear |")
    print("|---|---:|---:|---:|---:|")
    keys = sorted({(c["model"], c["steps"]) for c in summary["cells"]["linear"]})
    for model, steps in keys:
        accs = {
            way: [c["accuracy"] for c in summary["cells"][way] if (c["model"], c["steps"]) == (model, steps)]
            for way in WAYS
        }  # fmt: skip

        def say(values: list[float]) -> str:
            mean = statistics.fmean(values)
            return f"{100 * mean:.1f}% ± {100 * (max(values) - min(values)) / 2:.1f} ({', '.join(f'{100 * v:.1f}' for v in values)})"

        diff = statistics.fmean(accs["wsd"]) - statistics.fmean(accs["linear"])
        print(
            f"| {model} | {steps} | {say(accs['linear'])} | {say(accs['wsd'])} | {100 * diff:+.1f} |"
        )
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
