"""``vitscale data``: list, preview, shard and index datasets."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import UserError, user_errors


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    ls = sub.add_parser(
        "list",
        help="every dataset name: what it is, classes, split sizes; or one dataset",
        description="Without NAME: every dataset name. With NAME: its classes, each split's "
        "size and where its held-out parts come from (test: a test/ or val/ folder, else "
        "data.holdout of train/; val: eval.finetune.val_fraction of train). A shards: NAME: "
        "its index (splits, shards, examples, classes) and, with --subset, exactly which "
        "shards and examples a pre-training subset takes.",
    )
    ls.add_argument(
        "name", nargs="?", help="a dataset, e.g. imagefolder:/data/mine or shards:/data/in21k"
    )
    ls.add_argument("--root", help="with NAME: where a torchvision set or ImageNet lives")
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
        "subsets). JPEG, PNG and WebP files are copied byte for byte, unchecked unless "
        "--verify; other formats become PNG. Interrupted (Ctrl-C, a kill, a full "
        "disk)? Run the same command again: finished shards are kept.",
    )
    sh.add_argument("src", help="dataset name, e.g. imagefolder:/data/in21k-tree or cifar10")
    sh.add_argument("dest", help="folder to write (new or empty, or an interrupted conversion)")
    sh.add_argument(
        "--shard-size",
        type=int,
        default=5000,
        metavar="N",
        help="examples per shard (default 5000: about 0.5 GB of ImageNet-sized JPEGs)",
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
    sh.add_argument(
        "--verify",
        action="store_true",
        help="decode every image file before it is copied (as training decodes it; the cost "
        "of reading the set once) and name every one that does not: the shards that would "
        "hold them are not written and the command exits non-zero. Without it, JPEG, PNG "
        "and WebP files are copied unchecked (a damaged one is found when training reads "
        "it: data.skip_bad_samples); files converted or resized are decoded either way",
    )
    sh.add_argument(
        "--holdout",
        type=float,
        metavar="FRACTION",
        help="a folder set without test/ or val/: the part of train/ held out as the test "
        "shards (as data.holdout; unset: its default, said when used)",
    )
    sh.add_argument("--root", help="where a torchvision set or ImageNet lives")
    sh.add_argument("--download", action="store_true", help="let torchvision fetch the dataset")
    ix = sub.add_parser(
        "index",
        help="write index.json for WebDataset shards made elsewhere",
        description="Scan the .tar shards in DIR (headers and labels; images too with "
        "--verify): count each shard's examples, check every tar is whole and every example "
        "has an image and a label, and write DIR/index.json (needs write access to DIR).",
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
    ix.add_argument(
        "--verify",
        action="store_true",
        help="decode every image too (the cost of reading the set once) and name every "
        "example that does not decode (shard and key); any: nothing is indexed, exit non-zero",
    )


def run(args: argparse.Namespace) -> int:
    if args.data_command in ("shard", "index"):
        return _data_shards(args)
    if args.data_command == "list" and args.name:
        return _data_describe(args)
    if args.data_command == "list" and (args.subset or args.shards):
        raise UserError("data list: --subset and --shards describe a sharded set; give its NAME")
    if args.data_command == "list":
        from ..data.registry import describe_datasets

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
            held = (
                f"; val {r['val_fraction']:.0%} of train (eval.finetune.val_fraction)"
                if r["val_fraction"]
                else ""
            )
            print(f"{r['name']}\n    {r['description']}")
            print(f"    classes: {classes}; splits: {splits}{held}\n    {r['source']}")
        return 0
    from ..data.preview import save_preview

    out = args.out or f"preview-{args.name.replace(':', '_').replace('/', '_')}.png"
    with user_errors(ValueError):  # unknown name or split, bad size, dataset missing or malformed
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
    print(f"wrote {path}")
    return 0


def _data_shards(args: argparse.Namespace) -> int:
    from ..data import DatasetFormatError, DatasetNotFoundError
    from ..data.shards.write import ShardingError, index_shards, shard_dataset

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
                verify=args.verify,
                holdout=args.holdout,
            )
        else:
            path = index_shards(
                args.dir,
                train=args.train,
                test=args.test,
                classes_file=args.classes,
                workers=args.workers,
                verify=args.verify,
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
    from ..kinds import kind_of

    if kind_of(args.name).folder == "shards":
        from ..data.shards.index import describe, format_description

        with user_errors(ValueError):
            row = describe(args.name, subset=args.subset, seed=args.seed, shards=args.shards)
        print(json.dumps(row, indent=2) if args.json else format_description(row))
        return 0
    if args.subset or args.shards:
        raise UserError("data list: --subset and --shards describe a sharded set (shards:/path)")
    from ..data.build import describe_dataset, format_dataset

    with user_errors(ValueError):  # unknown name, dataset missing or malformed
        row = describe_dataset(args.name, root=args.root)
    print(json.dumps(row, indent=2) if args.json else format_dataset(row))
    return 0
