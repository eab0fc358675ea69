"""Is the sharded stream shuffled well enough to train on? Label autocorrelation, measured.

The sharded stream (:mod:`vitscale.data.shards.order`) shuffles within windows of
``data.shuffle_shards`` shards. How well that mixes depends on how the shards were
written: here in a random order (``vitscale data shard``) or class by class (the worst
case), on label streams only (no image is decoded: the stream's order is computed),
ImageNet-21k-like: ``--classes`` classes of ``--per-class`` examples in shards of
``--per-shard``. Reported per layout and window: the label autocorrelation rho(lag) and
the distinct classes in a global batch of ``--batch``; their definitions and the results:
benchmarks/RESULTS.md, "The sharded stream's shuffle".

    python benchmarks/shuffle_quality.py
    python benchmarks/shuffle_quality.py --classes 21841 --per-class 650 --per-shard 5000
    python benchmarks/shuffle_quality.py --out bench/shuffle.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitscale.data.shards.order import WindowedOrder  # noqa: E402
from vitscale.data.stream import ShuffledOrder  # noqa: E402

LAGS = (1, 16, 256)


def autocorrelation(labels: np.ndarray, lag: int) -> float:
    p = np.bincount(labels) / len(labels)
    chance = float((p**2).sum())
    return float(((labels[:-lag] == labels[lag:]).mean() - chance) / (1 - chance))


def classes_per_batch(labels: np.ndarray, batch: int) -> float:
    usable = len(labels) // batch * batch
    rows = np.sort(labels[:usable].reshape(-1, batch), axis=1)
    return float(((np.diff(rows, axis=1) != 0).sum(axis=1) + 1).mean())


def iid_classes_per_batch(num_classes: int, batch: int) -> float:
    return num_classes * (1 - (1 - 1 / num_classes) ** batch)


def measure(layout: str, window: int | None, stream: np.ndarray, batch: int) -> dict:
    """One row: the label stream's autocorrelation at each lag and its classes per batch."""
    return {
        "layout": layout,
        "window": window,
        **{f"rho_{lag}": autocorrelation(stream, lag) for lag in LAGS},
        "classes_per_batch": classes_per_batch(stream, batch),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--per-class", type=int, default=1000)
    p.add_argument("--per-shard", type=int, default=1000)
    p.add_argument("--batch", type=int, default=4096, help="global batch (default 4096)")
    p.add_argument("--windows", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--positions", type=int, default=2_000_000, help="stream length measured")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    n = args.classes * args.per_class
    rng = np.random.default_rng(0)
    layouts = {
        # class-sorted: example i has class i // per_class, shards cut in that order
        "class-sorted shards": np.arange(n) // args.per_class,
        # vitscale data shard: a fixed random order
        "randomly written shards": rng.permutation(np.arange(n) // args.per_class),
    }
    takes = np.full(-(-n // args.per_shard), args.per_shard)
    takes[-1] = n - args.per_shard * (len(takes) - 1)
    positions = np.arange(min(args.positions, n))
    rows = []
    expected = iid_classes_per_batch(args.classes, args.batch)
    for layout, label_of in layouts.items():
        for window in args.windows:
            stream = label_of[WindowedOrder(takes=takes, seed=0, window=window)(positions)]
            rows.append(measure(layout, window, stream, args.batch))
    # the map-style stream (a fresh global permutation per epoch), for reference
    steps = len(positions) // args.batch
    order = ShuffledOrder(num_examples=n, seed=0)
    stream = layouts["class-sorted shards"][order(np.arange(steps * args.batch))]
    rows.append(measure("map-style (global permutation)", None, stream, args.batch))
    head = (
        f"{args.classes} classes x {args.per_class} examples, shards of {args.per_shard}, "
        f"{len(positions):,} stream positions, batch {args.batch} (i.i.d.: "
        f"{expected:.0f} classes per batch)"
    )
    lines = [
        head,
        f"{'layout':<32} {'window':>6} "
        + " ".join(f"{'rho(' + str(lag) + ')':>9}" for lag in LAGS)
        + f" {'classes/batch':>14}",
    ]
    for r in rows:
        window = "-" if r["window"] is None else str(r["window"])
        lines.append(
            f"{r['layout']:<32} {window:>6} "
            + " ".join(f"{r[f'rho_{lag}']:>9.4f}" for lag in LAGS)
            + f" {r['classes_per_batch']:>14.0f}"
        )
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.out.suffix == ".json":
            args.out.write_text(json.dumps({"setup": head, "rows": rows}, indent=2) + "\n")
        else:
            args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
