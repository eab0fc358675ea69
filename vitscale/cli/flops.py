"""``vitscale flops``: params, multiply-adds and pre-training exaFLOPs (paper convention)."""

from __future__ import annotations

import argparse
import json

from ..errors import UserError, user_errors


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", nargs="?", help="registry name, e.g. ViT-B/16, BiT-R50x1, R50x1+ViT-B/16"
    )
    p.add_argument(
        "--resolution", "-r", type=int, default=224, help="input resolution in pixels (default 224)"
    )
    p.add_argument("--num-classes", type=int, default=1000, help="classifier width (default 1000)")
    p.add_argument("--head", choices=("finetune", "pretrain"), default="finetune")
    p.add_argument(
        "--table6", action="store_true", help="every row of paper Table 6 beside our count"
    )
    p.add_argument("--list", action="store_true", help="list the registry's model names")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from .. import flops
    from ..catalog import list_models

    if args.list:
        names = list_models()
        print(json.dumps(names) if args.json else "\n".join(names))
        return 0
    if args.table6:
        rows = flops.table6_check()
        if args.json:
            print(json.dumps([r.__dict__ | {"rel_error": r.rel_error} for r in rows], indent=2))
            return 0
        print(
            f"{'model':<17} {'family':<7} {'ep':>3} {'paper EF':>9} {'ours EF':>9} {'error':>7}  flag"
        )
        for r in rows:
            print(
                f"{r.model:<17} {r.family:<7} {r.epochs:>3} {r.paper:>9.0f} {r.ours:>9.1f} "
                f"{100 * r.rel_error:>+6.2f}%  {r.flag}"
            )
        print("\nours = epochs x 303M images x 3 x 2 x paper-convention multiply-adds at 224 px")
        return 0
    if not args.model:
        raise UserError("vitscale flops: give a MODEL, --table6 or --list")
    with user_errors(ValueError):
        c = flops.count(args.model, args.resolution, num_classes=args.num_classes, head=args.head)
    if args.json:
        print(json.dumps(c.as_dict(), indent=2))
        return 0
    print(f"{c.name} at {c.resolution} px ({c.head} head, {c.num_classes} classes)")
    print(f"  params                    {c.params:>16,d}  ({c.params / 1e6:.2f} M)")
    print(f"  forward MACs (dense)      {c.macs:>16,d}  ({c.macs / 1e9:.3f} G)")
    print(f"  forward MACs (paper)      {c.paper_macs:>16,d}  ({c.paper_macs / 1e9:.3f} G)")
    print(f"  forward FLOPs (dense)     {c.flops:>16,d}  ({c.flops / 1e9:.3f} G)")
    print(f"  train FLOPs / example     {c.train_flops_per_example:>16,d}  (3 x 2 x paper MACs)")
    return 0
