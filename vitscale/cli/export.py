"""``vitscale export``: a cell's weights as a timm model folder."""

from __future__ import annotations

import argparse

from ..errors import user_errors


def configure(p: argparse.ArgumentParser) -> None:
    from ..export import FORMATS

    p.add_argument("run", help="run folder (runs/<grid>/<cell id>) with a checkpoint")
    p.add_argument(
        "--format",
        choices=tuple(FORMATS),
        default="safetensors",
        help="weights file: model.safetensors (default) or pytorch_model.bin (a .pth state "
        "dict); both in timm's names beside a timm config.json",
    )
    p.add_argument("--out", "-o", help="folder to write (default: RUN/export-<format>)")
    p.add_argument("--force", action="store_true", help="replace an existing --out folder")


def run(args: argparse.Namespace) -> int:
    from ..export import export_run

    with user_errors(ValueError, FileNotFoundError):
        done = export_run(args.run, fmt=args.format, out=args.out, force=args.force)
    print(f"wrote {done.path}/ ({done.weights.name}, timm architecture {done.architecture})")
    if done.note:
        print(f"note: {done.note}")
    print(f"load it: timm.create_model('local-dir:{done.path}', pretrained=True)")
    return 0
