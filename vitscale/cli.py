"""The ``vitscale`` command line. Each subcommand is a thin layer over a library function;
heavy imports (torch, wandb, matplotlib) happen inside the subcommand that needs them, so
``vitscale --help`` and ``vitscale flops`` start fast."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from analysis import cli as analysis_cli

Handler = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Handler]] = {}


def command(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None]):
    """Register a subcommand: ``configure`` adds its arguments, the decorated function runs it."""

    def register(handler: Handler) -> Handler:
        _COMMANDS[name] = (help, configure, handler)
        return handler

    return register


class UserError(Exception):
    """A problem with the user's input: printed as one message, no traceback."""


# --------------------------------------------------------------------------- flops


def _configure_flops(p: argparse.ArgumentParser) -> None:
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


@command(
    "flops", "params, multiply-adds and pre-training exaFLOPs (paper convention)", _configure_flops
)
def _flops(args: argparse.Namespace) -> int:
    from . import flops
    from .models.names import list_models

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
    try:
        c = flops.count(args.model, args.resolution, num_classes=args.num_classes, head=args.head)
    except ValueError as e:
        raise UserError(str(e)) from None
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


# --------------------------------------------------------------------------- train

EXIT_FAILED = 1
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: checkpointed after SIGUSR1/SIGTERM; run again to resume


def _configure_train(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "config", help="YAML (or config.json of a run folder) with model/data/train/... sections"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set train.steps=100 (repeatable)",
    )
    p.add_argument("--workdir", "-w", help="run folder (default: runs/adhoc/<cell id>)")
    p.add_argument(
        "--dry-run", action="store_true", help="validate and print the resolved config, then stop"
    )


@command(
    "train", "pre-train one cell and evaluate its transfer (run folder contract)", _configure_train
)
def _train(args: argparse.Namespace) -> int:
    from .config import ConfigError, cell_id, load_yaml, resolve

    try:
        cfg = resolve(load_yaml(args.config), overrides=args.overrides, source=args.config)
    except ConfigError as e:
        raise UserError(str(e)) from None
    workdir = args.workdir or f"runs/{cfg.grid or 'adhoc'}/{cell_id(cfg)}"
    if args.dry_run:
        print(json.dumps(cfg.to_dict() | {"cell_id": cell_id(cfg), "workdir": workdir}, indent=2))
        return 0
    from .train import Preempted, train
    from .train.runtime import shutdown

    try:
        result = train(cfg, workdir)
    except ConfigError as e:
        raise UserError(str(e)) from None
    except Preempted as e:
        print(f"{e}; run the same command again to resume", file=sys.stderr)
        return EXIT_PREEMPTED
    finally:
        shutdown()  # the process group (torchrun), if any: last thing a launched process does
    print(
        f"{result['status']}: {workdir} ({result['steps']} steps, {result['wall_clock_s']:.0f} s)"
    )
    if result["status"] != "done":
        print(f"error: {result['error']}", file=sys.stderr)
        return EXIT_FAILED
    return 0


# --------------------------------------------------------------------------- grid


def _configure_grid(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="grid file, e.g. experiments/demo.yaml")
    p.add_argument(
        "--dry-run", action="store_true", help="print the cells, their cost and totals; run nothing"
    )
    p.add_argument("--json", action="store_true", help="with --dry-run: machine-readable output")
    p.add_argument("--executor", choices=("local", "slurm"), default="local")
    p.add_argument("--workers", type=int, default=1, help="local: cells run at once (default 1)")
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="local: processes per cell, via torchrun (default 1)",
    )
    p.add_argument(
        "--profile", help="cluster profile YAML (slurm/profiles/NAME.yaml); sizes and estimates"
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="slurm: after submitting, wait until every cell has ended",
    )
    p.add_argument("--runs", default="runs", help="root of the run folders (default: runs)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key in every cell, e.g. --set train.steps=10 (repeatable; "
        "changes the cell ids)",
    )


@command(
    "grid", "expand a grid file into cells and run or submit the ones not done", _configure_grid
)
def _grid(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .grid import commands

    try:
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
        )
    except ValueError as e:
        raise UserError(str(e)) from None


def _configure_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="run folders, grid folders or a runs/ directory")
    p.add_argument(
        "--shots", type=int, default=5, help="few-shot column: best k-shot accuracy (default 5)"
    )
    p.add_argument("--json", action="store_true")


@command(
    "status",
    "done / running / pending / failed per cell, last step, best few-shot",
    _configure_status,
)
def _status(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .grid import commands

    try:
        return commands.status([Path(p) for p in args.runs], shots=args.shots, as_json=args.json)
    except FileNotFoundError as e:
        raise UserError(str(e)) from None


# --------------------------------------------------------------------------- data


def _configure_data(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="every dataset name: what it is, classes, split sizes")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    pv = sub.add_parser("preview", help="write a PNG grid of samples, one class per row")
    pv.add_argument("name", help="dataset name, e.g. synthetic, synthetic-glyphs, cifar10")
    pv.add_argument("--out", "-o", help="PNG to write (default: preview-<name>.png)")
    pv.add_argument("--image-size", type=int, default=64, help="resolution (default 64)")
    pv.add_argument("--rows", type=int, default=8, help="classes shown, one per row (default 8)")
    pv.add_argument("--cols", type=int, default=8, help="examples per class (default 8)")
    pv.add_argument(
        "--split", default="train", help="train, minitrain, val or test (default train)"
    )
    pv.add_argument("--root", help="where a torchvision set or ImageNet lives")
    pv.add_argument("--download", action="store_true", help="let torchvision fetch the dataset")


@command("data", "list the datasets, or preview one as a grid of samples (PNG)", _configure_data)
def _data(args: argparse.Namespace) -> int:
    if args.data_command == "list":
        from .data.registry import describe_datasets

        rows = describe_datasets()
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        for r in rows:
            classes = r["num_classes"] if r["num_classes"] is not None else "from folders"
            splits = (
                ", ".join(f"{k} {v:,}" for k, v in r["splits"].items())
                if r["splits"]
                else "read from disk"
            )
            held = f"; held-out val {r['val_fraction']:.0%} of train" if r["val_fraction"] else ""
            print(f"{r['name']}\n    {r['description']}")
            print(f"    classes: {classes}; splits: {splits}{held}\n    {r['source']}")
        return 0
    from .data.preview import save_preview

    out = args.out or f"preview-{args.name.replace(':', '_').replace('/', '_')}.png"
    try:
        path = save_preview(
            out,
            args.name,
            split=args.split,
            image_size=args.image_size,
            rows=args.rows,
            cols=args.cols,
            root=args.root,
            download=args.download,
        )
    except ValueError as e:  # unknown name or split, bad size, dataset missing or malformed
        raise UserError(str(e)) from None
    print(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------- figures, fit

command(
    "figures",
    "draw Figs. 3/4/5 and Table 6 from runs (or --paper from the paper's tables)",
    analysis_cli.configure_figures,
)(analysis_cli.run_figures)
command(
    "fit",
    "fit the saturating power law error = a (C + d)^-b + c to the frontier",
    analysis_cli.configure_fit,
)(analysis_cli.run_fit)
command(
    "summary",
    "the measured answer: ResNet vs ViT transfer by pre-training size, and vs compute",
    analysis_cli.configure_summary,
)(analysis_cli.run_summary)


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitscale",
        description="Scaling studies of vision models (ViT paper, Dosovitskiy et al. 2021).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, configure, _) in _COMMANDS.items():
        configure(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _, _, handler = _COMMANDS[args.command]
    try:
        return handler(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
