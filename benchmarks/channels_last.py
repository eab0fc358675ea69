"""Channels-last (NHWC) against the default NCHW layout: our model's training step, A/B
interleaved, so ``train.channels_last: null`` turns it on only where it is measured faster.

    python benchmarks/channels_last.py                                      # BiT-R50x1, CPU
    python benchmarks/channels_last.py --device cuda --precision bf16 --batch 128

Rounds alternate NCHW, NHWC, NCHW, ... on the same weights and batch; the per-round ratio
NHWC/NCHW is reported as its median (above 1: channels-last is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.throughput import make_step, timed  # noqa: E402
from vitscale.models import create_model  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="BiT-R50x1")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=3, help="steps per round")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    torch.manual_seed(0)
    kw = dict(image_size=args.image_size, num_classes=1000)
    steps = {}
    for layout in ("NCHW", "NHWC"):
        model = create_model(args.model, head="finetune", **kw)
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        step = make_step(
            model.to(memory_format=fmt),
            batch=args.batch,
            device=device,
            precision=args.precision,
            memory_format=fmt,
            **kw,
        )
        step()  # warm-up (and, on the GPU, kernel selection)
        steps[layout] = step
    rates: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(args.rounds):
        for layout, step in steps.items():
            rates[layout].append(args.steps * args.batch / timed(step, args.steps, device))
    ratio = statistics.median(a / b for a, b in zip(rates["NHWC"], rates["NCHW"], strict=True))
    print(
        f"{args.model} @ {args.image_size}px, batch {args.batch}, {args.precision}, {device}, "
        f"{torch.get_num_threads()} threads, {args.rounds} rounds x {args.steps} steps"
    )
    for layout, r in rates.items():
        print(f"  {layout}  {statistics.median(r):10.1f} images/s (median)")
    print(f"  NHWC/NCHW {ratio:.3f} (median of per-round ratios)")
    return {"ratio": ratio}


if __name__ == "__main__":
    main()
