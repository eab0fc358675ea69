"""The ``vitscale`` command line. Each subcommand is a thin layer over a library function;
heavy imports (torch, wandb, matplotlib) happen inside the subcommand that needs them, so
``vitscale --help`` and ``vitscale flops`` start fast."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from analysis import cli as analysis_cli

from .wandb_views import cli as wandb_cli

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
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C, as a shell reports it


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
    import os

    from .config import ConfigError, cell_id, load_yaml, resolve
    from .preflight import dataset_size, preflight

    try:
        cfg = resolve(load_yaml(args.config), overrides=args.overrides, source=args.config)
    except ConfigError as e:
        raise UserError(str(e)) from None
    check = preflight(
        cfg, dataset_size=dataset_size(cfg), num_processes=int(os.environ.get("WORLD_SIZE", 1))
    )
    if check.problems:
        raise UserError("\n".join(f"{args.config}: {p}" for p in check.problems))
    workdir = args.workdir or f"runs/{cfg.grid or 'adhoc'}/{cell_id(cfg)}"
    if args.dry_run:  # a run says its notes itself, once its length is known
        for note in check.notes:
            print(f"note: {note}", file=sys.stderr)
        print(json.dumps(cfg.to_dict() | {"cell_id": cell_id(cfg), "workdir": workdir}, indent=2))
        return 0
    from .data import DatasetFormatError, DatasetNotFoundError
    from .runfolder import DiskFullError
    from .train import Preempted, train
    from .train.checkpoint import CheckpointError
    from .train.runtime import shutdown

    try:
        result = train(cfg, workdir)
    except (ConfigError, DatasetNotFoundError, DatasetFormatError) as e:
        raise UserError(str(e)) from None
    except Preempted as e:
        print(f"{e}; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED if e.signal_name == "SIGINT" else EXIT_PREEMPTED
    except KeyboardInterrupt:  # a second Ctrl-C
        print(
            "interrupted: stopped at once; run the same command again to resume from the last "
            "checkpoint",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except (DiskFullError, CheckpointError) as e:  # the run's fault, not the user's input
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
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
        "--stop-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="local: after Ctrl-C (or SIGTERM), how long the running cells get to checkpoint "
        "before they are stopped at once (default 300; a second Ctrl-C does it sooner)",
    )
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
            stop_timeout=args.stop_timeout,
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
    ls = sub.add_parser(
        "list",
        help="every dataset name: what it is, classes, split sizes; or one sharded set",
        description="Without NAME: every dataset name. With a shards: NAME: its index "
        "(splits, shards, examples, classes) and, with --subset, exactly which shards and "
        "examples a pre-training subset takes.",
    )
    ls.add_argument("name", nargs="?", help="a sharded set, e.g. shards:/data/in21k")
    ls.add_argument("--subset", help="with NAME: the subset to resolve, e.g. 9M (data.subset)")
    ls.add_argument("--seed", type=int, default=0, help="with --subset: the run's seed (default 0)")
    ls.add_argument(
        "--shards", action="store_true", help="with --subset: list the selected shards in order"
    )
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
    sh = sub.add_parser(
        "shard",
        help="convert a dataset into WebDataset tar shards (resumable)",
        description="Write every split of SRC (imagefolder:, multilabel:, cifar10/100, pets, "
        "flowers102, imagenet, the synthetic family) as WebDataset tar shards of N examples "
        "plus index.json under DEST, in a fixed random order (so whole shards are random "
        "subsets). JPEG files are copied byte for byte. Interrupted (Ctrl-C, a kill, a full "
        "disk)? Run the same command again: finished shards are kept.",
    )
    sh.add_argument("src", help="dataset name, e.g. imagefolder:/data/in21k-tree or cifar10")
    sh.add_argument("dest", help="folder to write (new or empty, or an interrupted conversion)")
    sh.add_argument(
        "--shard-size", type=int, required=True, metavar="N", help="examples per shard (e.g. 5000)"
    )
    sh.add_argument(
        "--max-examples", help="at most this many per split, a random part (e.g. 1M; synthetic)"
    )
    sh.add_argument(
        "--image-size", type=int, default=32, help="synthetic sets: rendered size (default 32)"
    )
    sh.add_argument(
        "--shorter-side",
        type=int,
        metavar="PX",
        help="store images larger than this resized to it (JPEG q95): faster loading, less "
        "detail for the crops; default: files copied byte for byte",
    )
    sh.add_argument("--workers", type=int, default=1, help="processes writing shards (default 1)")
    sh.add_argument("--root", help="where a torchvision set or ImageNet lives")
    sh.add_argument("--download", action="store_true", help="let torchvision fetch the dataset")
    ix = sub.add_parser(
        "index",
        help="write index.json for WebDataset shards made elsewhere",
        description="Scan the .tar shards in DIR (headers and labels, not images): count each "
        "shard's examples, check every tar is whole and every example has an image and a "
        "label, and write DIR/index.json (needs write access to DIR).",
    )
    ix.add_argument("dir", help="folder of .tar shards")
    ix.add_argument("--train", default="*.tar", help="train shards (glob; default *.tar)")
    ix.add_argument(
        "--test", default="{test,val}*.tar", help="test shards (default {test,val}*.tar)"
    )
    ix.add_argument(
        "--classes", help="class names, one per line (line i = class i); default: from the labels"
    )
    ix.add_argument("--workers", type=int, default=1, help="processes scanning (default 1)")


@command(
    "data",
    "list or preview datasets; convert one into tar shards (shard) or index shards (index)",
    _configure_data,
)
def _data(args: argparse.Namespace) -> int:
    if args.data_command in ("shard", "index"):
        return _data_shards(args)
    if args.data_command == "list" and args.name:
        return _data_describe(args)
    if args.data_command == "list" and (args.subset or args.shards):
        raise UserError("data list: --subset and --shards describe a sharded set; give its NAME")
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


def _data_shards(args: argparse.Namespace) -> int:
    from .data import DatasetFormatError, DatasetNotFoundError
    from .data.shardwrite import ShardingError, index_shards, shard_dataset

    try:
        if args.data_command == "shard":
            path = shard_dataset(
                args.src,
                args.dest,
                shard_size=args.shard_size,
                max_examples=args.max_examples,
                image_size=args.image_size,
                shorter_side=args.shorter_side,
                root=args.root,
                download=args.download,
                workers=args.workers,
            )
        else:
            path = index_shards(
                args.dir,
                train=args.train,
                test=args.test,
                classes_file=args.classes,
                workers=args.workers,
            )
    except KeyboardInterrupt:
        print(
            "interrupted: the finished shards are kept; run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    except (ShardingError, DatasetNotFoundError, DatasetFormatError, ValueError) as e:
        raise UserError(str(e)) from None
    except OSError as e:  # a full disk, a read-only folder
        where = args.dest if args.data_command == "shard" else args.dir
        raise UserError(
            f"cannot write {where}: {e.strerror or e}; fix it and run the same command again "
            "(finished shards are kept)"
        ) from None
    print(f"wrote {path}")
    return 0


def _data_describe(args: argparse.Namespace) -> int:
    from .data.shardindex import describe, format_description

    try:
        row = describe(args.name, subset=args.subset, seed=args.seed, shards=args.shards)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(json.dumps(row, indent=2) if args.json else format_description(row))
    return 0


# --------------------------------------------------------------------------- export


def _configure_export(p: argparse.ArgumentParser) -> None:
    from .export import FORMATS

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


@command(
    "export",
    "a cell's weights as a timm model folder: timm.create_model('local-dir:OUT', pretrained=True)",
    _configure_export,
)
def _export(args: argparse.Namespace) -> int:
    from .export import export_run

    try:
        done = export_run(args.run, fmt=args.format, out=args.out, force=args.force)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from None
    print(f"wrote {done.path}/ ({done.weights.name}, timm architecture {done.architecture})")
    if done.note:
        print(f"note: {done.note}")
    print(f"load it: timm.create_model('local-dir:{done.path}', pretrained=True)")
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


# --------------------------------------------------------------------------- wandb

command(
    "wandb",
    "W&B views of a grid: the live workspace, a report, uploading offline runs",
    wandb_cli.configure,
)(wandb_cli.run)


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
    except KeyboardInterrupt:  # Ctrl-C where a command has nothing to save
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    # `python -m vitscale.cli`: run the importable module's main, so that the UserError
    # raised by modules importing `vitscale.cli` is the class caught there.
    from vitscale.cli import main as _main

    sys.exit(_main())
