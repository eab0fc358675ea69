"""``vitscale grid`` and ``vitscale status``."""

from __future__ import annotations

import argparse

from ..errors import user_errors
from .train import add_overrides


def configure_grid(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="grid file, e.g. experiments/demo.yaml")
    p.add_argument(
        "--dry-run", action="store_true", help="print the cells, their cost and totals; run nothing"
    )
    p.add_argument("--json", action="store_true", help="with --dry-run: machine-readable output")
    p.add_argument(
        "--verify",
        action="store_true",
        help="before anything runs, decode every image of each dataset on disk (as training "
        "decodes it): every file that does not decode, named once",
    )
    p.add_argument("--executor", choices=("local", "slurm"), default="local")
    p.add_argument("--workers", type=int, default=1, help="local: cells run at once (default 1)")
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="local: processes per cell, via torchrun (default 1)",
    )
    p.add_argument(
        "--profile",
        help="cluster profile: a name in slurm/profiles/ (h100x8) or a YAML path; sizes and "
        "estimates (GPU-hours from calibration.csv beside it where measured)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="slurm: after submitting, wait until every cell has ended",
    )
    p.add_argument("--runs", default="runs", help="root of the run folders (default: runs)")
    p.add_argument(
        "--sbatch",
        action="store_true",
        help="with --dry-run --profile: print the sbatch script of each job array it would "
        "submit, instead of the table",
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="move the cells of an earlier version of this grid (run folders in its folder "
        "that it no longer has) to its .stale/ folder, and run nothing; with --dry-run: say "
        "which",
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="run again the failed cells that have used their retries (the grid's "
        "`retries:`, default 1): after fixing what failed them",
    )
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="local: after Ctrl-C (or SIGTERM), how long the running cells get to checkpoint "
        "before they are stopped at once (default 300; a second Ctrl-C does it sooner)",
    )
    add_overrides(
        p,
        "override a config key in every cell, e.g. --set train.steps=10 (repeatable; "
        "changes the cell ids)",
    )


def run_grid(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..grid import commands

    with user_errors(ValueError):
        return commands.grid(
            Path(args.file),
            runs_root=Path(args.runs),
            dry_run=args.dry_run,
            as_json=args.json,
            executor=args.executor,
            workers=args.workers,
            processes=args.processes,
            profile_path=args.profile,
            overrides=args.overrides,
            wait=args.wait,
            stop_timeout=args.stop_timeout,
            retry_failed=args.retry_failed,
            verify=args.verify,
            prune=args.prune,
            sbatch=args.sbatch,
        )


def configure_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="run folders, grid folders or a runs/ directory")
    p.add_argument(
        "--shots",
        type=int,
        default=None,
        help="few-shot column: the mean over a cell's transfer sets of its best K-shot "
        "accuracy (default: its first set at its first shot count)",
    )
    p.add_argument("--json", action="store_true")


def run_status(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..grid import commands

    with user_errors(FileNotFoundError):
        return commands.status([Path(p) for p in args.runs], shots=args.shots, as_json=args.json)
