"""Harness overhead of a grid: its wall-clock against the pure training-step time.

Runs a grid with the local executor (default: the demo), times it, then reads every
cell's ``result.json["time_s"]`` (seconds per phase, :mod:`vitscale.train.timing`) and
splits the workers' time into training steps and what the harness adds; ``startup`` is
the workers' seconds not inside a cell. The phases, the target (at most 15%) and
the results: benchmarks/RESULTS.md, "Harness overhead of the demo".

    python benchmarks/overhead.py                                   # experiments/demo.yaml, 2 workers
    python benchmarks/overhead.py --runs runs/demo --no-run         # an existing grid's folders
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vitscale import record as rf  # noqa: E402
from vitscale.train.timing import PHASES  # noqa: E402

# What the harness adds (the target: at most 15% of the training steps); drawing
# the synthetic images in the training process (``data``) and fine-tuning (part of the
# experiment) are reported beside it.
OVERHEAD = ("startup", "setup", "log", "eval", "checkpoint")


def split(results: list[dict], *, worker_seconds: float | None) -> dict[str, float]:
    """Seconds per phase summed over cells, plus start-up from the workers' time."""
    totals = dict.fromkeys(PHASES, 0.0)
    for result in results:
        for phase, seconds in (result.get("time_s") or {}).items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    wall = sum(r["wall_clock_s"] for r in results)
    totals["startup"] = max(0.0, worker_seconds - wall) if worker_seconds else 0.0
    totals["other"] = max(0.0, wall - sum(totals[p] for p in PHASES))
    return totals


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", type=Path, default=ROOT / "experiments" / "demo.yaml")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runs", type=Path, help="runs root (default: a temporary folder)")
    p.add_argument("--no-run", action="store_true", help="only read the run folders of --runs")
    p.add_argument(
        "--wall-clock", type=float, help="with --no-run: the grid's measured wall-clock (s)"
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    runs = args.runs or Path(tempfile.mkdtemp(prefix="vitscale-overhead-"))
    wall = args.wall_clock
    if not args.no_run:
        command = [sys.executable, "-m", "vitscale.cli", "grid", str(args.grid)]
        command += ["--executor", "local", "--workers", str(args.workers), "--runs", str(runs)]
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT)
        wall = time.perf_counter() - start
    results = [rf.read_json(path) for path in sorted(runs.glob(f"*/*/{rf.RESULT}"))]
    if not results:
        sys.exit(f"no {rf.RESULT} under {runs}/<grid>/<cell>/")
    totals = split(results, worker_seconds=wall * args.workers if wall else None)
    step = totals["step"]
    overhead = sum(totals[p] for p in OVERHEAD)
    report = {
        "cells": len(results),
        "workers": args.workers,
        "grid_wall_clock_s": wall,
        "seconds": totals,
        "overhead_vs_steps": overhead / step if step else None,
        "data_vs_steps": totals["data"] / step if step else None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{len(results)} cells, {args.workers} workers, grid wall-clock "
        f"{'?' if wall is None else f'{wall:.0f} s'}"
    )
    print(f"{'phase':<11} {'seconds':>9} {'vs steps':>9}")
    for phase in ("step", *OVERHEAD, "data", "finetune", "other"):
        share = f"{100 * totals[phase] / step:8.1f}%" if step else ""
        print(f"{phase:<11} {totals[phase]:9.1f} {share:>9}")
    print(
        f"harness overhead (start-up, setup, logging, evaluation, checkpointing) = "
        f"{100 * report['overhead_vs_steps']:.1f}% of the training-step time; "
        f"data loading {100 * report['data_vs_steps']:.1f}% more"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
