"""Compute accounting, measured: our analytic counts against paper Table 6 and against
``torch.utils.flop_counter.FlopCounterMode`` on the built models.

    python benchmarks/flops.py                 # both tables
    python benchmarks/flops.py --table6        # only the paper comparison

FlopCounterMode runs each model once (real CPU tensors up to 30M parameters, the meta
device above) with SDPA on its math backend, whose matmuls it counts (torch >= 2.10 has no
formula for the fused CPU kernel). Expected agreement and the results:
benchmarks/RESULTS.md, "FLOP accounting".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitscale import flops  # noqa: E402
from vitscale.catalog import list_models, parse  # noqa: E402
from vitscale.models import create_model  # noqa: E402

REAL_PARAM_LIMIT = 30_000_000


def table6() -> None:
    print(f"{'model':<17} {'ep':>3} {'paper EF':>9} {'ours EF':>9} {'error':>8}  flag")
    for r in flops.table6_check():
        print(
            f"{r.model:<17} {r.epochs:>3} {r.paper:>9.0f} {r.ours:>9.1f} {100 * r.rel_error:>+7.2f}%  {r.flag}"
        )


def counter(resolution: int) -> None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    print(f"\n{'model':<17} {'px':>4} {'analytic GFLOP':>15} {'FlopCounterMode':>16} {'diff':>8}")
    for name in list_models():
        spec = parse(name)
        res = resolution
        if spec.family == "Hybrid":
            res = max(resolution, 2 * spec.downsample)
        elif spec.family == "ViT" and res % spec.patch:
            res = spec.patch * -(-res // spec.patch)
        ours = flops.count(name, res, num_classes=1000)
        device = "cpu" if ours.params <= REAL_PARAM_LIMIT else "meta"
        with torch.device(device):
            model = create_model(name, num_classes=1000, image_size=res, head="finetune")
            x = torch.randn(1, 3, res, res)
        with FlopCounterMode(display=False) as fc, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            model(x)
        measured = fc.get_total_flops()
        print(
            f"{name:<17} {res:>4} {ours.flops / 1e9:>15.3f} {measured / 1e9:>16.3f} "
            f"{100 * (ours.flops / measured - 1):>+7.2f}%"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table6", action="store_true", help="only the paper Table 6 comparison")
    p.add_argument(
        "--resolution", type=int, default=64, help="FlopCounterMode resolution (default 64)"
    )
    args = p.parse_args()
    table6()
    if not args.table6:
        counter(args.resolution)
    return 0


if __name__ == "__main__":
    sys.exit(main())
