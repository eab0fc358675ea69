"""The scenes world's drawing speed against what the study's models consume.

The requirement: the scenes renderer draws at least 15x faster than the hungriest
study model trains, both on the same cores, so drawing never slows a study; and the same
renderer runs on a GPU (torch operations on CUDA) at 64 px. Measured here: ``render`` of
consecutive upstream train indices in batches of 128, as the trainer asks for them (the
multi-label scenes), in ``--threads`` single-threaded processes at once (as loader workers
draw: the renderer's small operations gain nothing from intra-op threads), against one
training step (forward, cross-entropy, backward, AdamW) of each CPU study model at 32 px,
batch 128, fp32, on ``--threads`` threads. Rounds are interleaved (drawing, models,
drawing, ...) so a change in load hits all alike; each entry is the median over rounds.

    python benchmarks/scenes_render.py                     # CPU, this machine's threads
    python benchmarks/scenes_render.py --threads 2 --rounds 5
    python benchmarks/scenes_render.py --device cuda --size 64   # the GPU study's drawing

Prints the table; exits 1 if the ratio is under the requirement (CPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.data_throughput import timed  # noqa: E402
from benchmarks.throughput import make_step  # noqa: E402
from vitscale.data.scenes import render as rd  # noqa: E402
from vitscale.data.scenes import world as w  # noqa: E402
from vitscale.models import create_model  # noqa: E402

REQUIRED_RATIO = 15.0
STUDY_MODELS = ("ViT-Femto/8", "ViT-Pico/8", "BiT-R11x0.5", "BiT-R20x0.5")


def _draw_for(args: tuple[str, int, float]) -> int:
    """Images one single-threaded process draws in ``seconds`` (after a warm-up)."""
    device, size, seconds = args
    torch.set_num_threads(1)
    task = w.TASKS[w.UPSTREAM]
    rng = np.random.default_rng()
    start = int(rng.integers(0, 10**8))
    rd.render(task, "train", np.arange(start, start + 128), size, device=device)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        rd.render(task, "train", np.arange(start + n, start + n + 128), size, device=device)
        n += 128
    return n


def _draw_rate(processes: int, device: str, size: int, seconds: float) -> float:
    if processes == 1 or device != "cpu":
        return _draw_for((device, size, seconds)) / seconds
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(processes) as pool:
        return sum(pool.map(_draw_for, [(device, size, seconds)] * processes)) / seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", type=int, default=32, help="image side in pixels")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    kw = dict(image_size=args.size, num_classes=w.NUM_UPSTREAM_LABELS)
    steps = {
        name: make_step(create_model(name, **kw), batch=128, device=device, precision="fp32", **kw)
        for name in STUDY_MODELS
    }
    rates: dict[str, list[float]] = {"render": [], **{n: [] for n in steps}}
    for _ in range(args.rounds):
        rates["render"].append(_draw_rate(args.threads, args.device, args.size, args.seconds))
        for name, step in steps.items():
            rates[name].append(timed(step, images_per_call=128, min_seconds=args.seconds))
    median = {k: statistics.median(v) for k, v in rates.items()}
    hungriest = max(steps, key=lambda n: median[n])
    print(
        f"device {device}, {args.size} px, {args.rounds} rounds: drawing in {args.threads} "
        f"process(es), the models on {args.threads} thread(s)"
    )
    print(f"{'':24s}{'img/s':>12s}")
    for name, value in median.items():
        print(f"{name:24s}{value:12,.0f}")
    ratio = median["render"] / median[hungriest]
    print(
        f"drawing / the hungriest model ({hungriest}): {ratio:.1f}x (required {REQUIRED_RATIO:g}x)"
    )
    return 0 if ratio >= REQUIRED_RATIO or device.type != "cpu" else 1


if __name__ == "__main__":
    sys.exit(main())
