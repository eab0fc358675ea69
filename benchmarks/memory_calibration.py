"""How close vitscale's memory estimate is: saved activations against autograd on the CPU,
and, on a GPU, the whole training step against ``torch.cuda.max_memory_allocated``.

    python benchmarks/memory_calibration.py                  # CPU: every CPU-sized model
    python benchmarks/memory_calibration.py --device cuda    # adds the measured step peak

CPU: for every registry model of at most 30M parameters (and one hybrid), at its smallest
resolution and batch 2, the bytes autograd saves (``torch.autograd.graph.saved_tensors_hooks``)
in fp32 and under CPU bf16 autocast, against ``vitscale.memory.saved_activation_bytes``.
CUDA: one AdamW training step per model at 224 px, bf16 autocast; the peak allocated
bytes against ``vitscale.memory.estimate``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitscale import memory  # noqa: E402
from vitscale.catalog import (
    list_models,  # noqa: E402
    smallest_resolution,  # noqa: E402
)
from vitscale.flops import count  # noqa: E402
from vitscale.models import create_model  # noqa: E402

REAL_PARAM_LIMIT = 30_000_000


def cpu_table() -> float:
    names = [
        n for n in list_models() if count(n, smallest_resolution(n)).params <= REAL_PARAM_LIMIT
    ]
    worst = 0.0
    print(f"{'model':<16} {'px':>4} {'fp32 MiB':>9} {'est.':>9} {'bf16 MiB':>9} {'est.':>9}")
    for name in [*names, "R50x1+ViT-B/32"]:
        size = smallest_resolution(name)
        model = create_model(name, num_classes=10, image_size=size).train()
        images = torch.randn(2, 3, size, size)
        cells = []
        for precision in ("fp32", "bf16"):
            measured = memory.measure_saved_bytes(model, images, bf16=precision == "bf16")
            est = memory.saved_activation_bytes(
                name, image_size=size, batch=2, num_classes=10, precision=precision, device="cpu"
            )
            worst = max(worst, abs(est / measured - 1))
            cells += [measured / 2**20, est / 2**20]
        print(f"{name:<16} {size:>4} " + " ".join(f"{c:>9.3f}" for c in cells))
    print(f"largest relative error: {worst:.2e}")
    return worst


def cuda_table(batch: int) -> None:
    device = torch.device("cuda")
    print(f"\n{'model':<12} {'batch':>5} {'measured GiB':>13} {'estimate GiB':>13} {'ratio':>6}")
    for name in ("ViT-B/16", "BiT-R50x1", "ViT-L/16"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        model = create_model(name, num_classes=1000, image_size=224).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(batch, 3, 224, 224, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)
        for _ in range(2):  # the second step has the optimiser state
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        measured = torch.cuda.max_memory_allocated(device)
        est = memory.estimate(name, image_size=224, micro_batch=batch, num_classes=1000).total
        print(
            f"{name:<12} {batch:>5} {measured / 2**30:>13.2f} {est / 2**30:>13.2f} {est / measured:>6.2f}"
        )
        del model, opt, x, y, loss


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--batch", type=int, default=64, help="CUDA step batch (default 64)")
    args = p.parse_args(argv)
    cpu_table()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("memory_calibration: --device cuda but no CUDA device is visible")
        cuda_table(args.batch)


if __name__ == "__main__":
    main()
