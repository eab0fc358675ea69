"""Synthetic-data generation speed against what the demo models consume.

The issue's requirement: rendering the embedded synthetic set must never slow training,
i.e. generation at least 10x faster than a training step of the demo models eats images.
Measured on this machine, same threads for both: ``render`` of random upstream train
indices at 32-224 px, by the torch reference path and by the fused C++ kernel
(:mod:`vitscale.data.synthetic._fused`, the default), and through ``build_loader`` with
0 workers (the demo's path), against one CPU training step (forward, cross-entropy,
backward, AdamW) of each demo model at 32 px, batch 128. Rounds are interleaved
(generation, models, generation, ...) so a change in machine load hits all alike; each
entry is the median over rounds (benchmarks/RESULTS.md, "Synthetic data").

    python benchmarks/data_throughput.py                       # the table
    python benchmarks/data_throughput.py --threads 1 --rounds 5
    python benchmarks/data_throughput.py --out bench/data_throughput.json

Writes nothing unless ``--out`` is given (``.json``: rows as JSON, otherwise the table).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.throughput import make_step  # noqa: E402
from vitscale.data import build_dataset, build_loader  # noqa: E402
from vitscale.data.synthetic.render import render  # noqa: E402
from vitscale.data.synthetic.vocabulary import TASKS, UPSTREAM  # noqa: E402
from vitscale.models import create_model  # noqa: E402

REQUIRED_RATIO = 10.0
CPU = torch.device("cpu")
MODELS = ("ViT-Femto/16", "ViT-Pico/16", "ViT-Pico/8", "BiT-R11x0.5", "BiT-R20x0.5")


def timed(fn, *, images_per_call: int, min_seconds: float) -> float:
    """Images/s of ``fn`` called repeatedly for at least ``min_seconds`` (after one warm-up)."""
    fn()
    calls, started = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return calls * images_per_call / elapsed


class RenderBench:
    """``render`` of ``batch`` random upstream train indices (fresh ones every call), by the
    fused C++ kernel (the default where it builds) or the torch reference path."""

    def __init__(self, size: int, batch: int, *, fused: bool = True) -> None:
        self.size, self.batch, self.fused = size, batch, fused
        self.rng = np.random.default_rng(size)
        self.task = TASKS[UPSTREAM]

    def __call__(self) -> None:
        indices = self.rng.integers(0, self.task.split_size("train"), self.batch)
        render(self.task, "train", indices, self.size, fused=self.fused)


class LoaderBench:
    """``next()`` on ``build_loader`` over the whole upstream train split."""

    def __init__(self, size: int, batch: int) -> None:
        dataset = build_dataset(UPSTREAM, "train", image_size=size)
        self.batches = iter(build_loader(dataset, batch_size=batch, seed=0, num_workers=0))

    def __call__(self) -> None:
        next(self.batches)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 224])
    p.add_argument("--render-batch", type=int, default=256, help="images per render call")
    p.add_argument("--loader-batch", type=int, default=128, help="per-process loader batch")
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--model-size", type=int, default=32, help="model input resolution")
    p.add_argument("--model-batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    p.add_argument("--min-seconds", type=float, default=1.0, help="per measurement")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    p.add_argument("--out", help="write the results (.json: rows; otherwise the table)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    benches: dict[tuple[str, str, int], object] = {}
    for size in args.sizes:
        benches[("generate", "render, torch reference path", size)] = (
            RenderBench(size, args.render_batch, fused=False),
            args.render_batch,
        )
        benches[("generate", "render, fused kernel", size)] = (
            RenderBench(size, args.render_batch),
            args.render_batch,
        )
        benches[("generate", "build_loader, 0 workers", size)] = (
            LoaderBench(size, args.loader_batch),
            args.loader_batch,
        )
    kw = dict(image_size=args.model_size, num_classes=TASKS[UPSTREAM].num_classes)
    for name in args.models:
        torch.manual_seed(0)
        step = make_step(
            create_model(name, **kw), batch=args.model_batch, device=CPU, precision="fp32", **kw
        )
        benches[("consume", f"{name} train step", args.model_size)] = (step, args.model_batch)

    samples: dict[tuple[str, str, int], list[float]] = {k: [] for k in benches}
    for _ in range(args.rounds):
        for key, (fn, per_call) in benches.items():
            samples[key].append(timed(fn, images_per_call=per_call, min_seconds=args.min_seconds))
    rate = {k: statistics.median(v) for k, v in samples.items()}

    consumers = {k: v for k, v in rate.items() if k[0] == "consume"}
    fastest = max(consumers.values())
    rows = []
    lines = [
        f"synthetic-data throughput on {torch.get_num_threads()} torch thread(s), "
        f"median of {args.rounds} interleaved rounds",
        "",
        f"{'what':<10} {'how':<28} {'px':>4} {'images/s':>10}  {'vs fastest model':>16}",
    ]
    for (kind, how, size), value in rate.items():
        ratio = value / fastest if kind == "generate" and size == args.model_size else None
        rows.append(
            dict(what=kind, how=how, px=size, images_per_s=value, ratio_to_fastest_model=ratio)
        )
        shown = f"{ratio:>15.1f}x" if ratio is not None else ""
        lines.append(f"{kind:<10} {how:<28} {size:>4} {value:>10,.0f}  {shown:>16}")
    at = rate[("generate", "build_loader, 0 workers", args.model_size)]  # what training sees
    ratio = at / fastest
    verdict = "meets" if ratio >= REQUIRED_RATIO else "FAILS"
    lines += [
        "",
        f"generation through the loader at {args.model_size} px: {at:,.0f} images/s; the "
        f"hungriest demo model consumes {fastest:,.0f} images/s -> {ratio:.1f}x "
        f"({verdict} the required {REQUIRED_RATIO:.0f}x)",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".json":
            out.write_text(
                json.dumps(dict(threads=torch.get_num_threads(), rows=rows, ratio=ratio), indent=2)
            )
        else:
            out.write_text(text + "\n")
    return 0 if ratio >= REQUIRED_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
