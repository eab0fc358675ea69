"""The paper's Tables 5 and 6 as tidy frames, the same columns as our runs (``source="paper"``).

The numbers are vitscale's package data (:mod:`vitscale.paper`); this module only gives
them the shape of :func:`vitscale.record.cells.load_runs`, so a figure draws the paper's
points and ours with the same code and ours can be laid over the paper's.

Table 5 (Fig. 3's points) gives no epochs, so its ``examples_seen`` and ``exaflops`` are
empty; Table 6 (Fig. 5's) gives no parameters, so ``params`` is our count
(:func:`vitscale.flops.count`, 224 px, 1000-way fine-tuning head).

Transfer datasets are keyed by Table 6's column names (:data:`DATASETS`); a run of ours
is comparable with the paper on a metric when its column has the same name, e.g.
``finetune/imagenet/top1``. Accuracies are percentages, as in the paper.
"""

from __future__ import annotations

from functools import cache

import pandas as pd

from vitscale import flops
from vitscale.catalog import parse
from vitscale.paper import JFT_IMAGES, table5, table6
from vitscale.record import STATUS_DONE, RunResult, finetune_key
from vitscale.record.cells import cell_record, records_to_frame

# Transfer dataset key (Table 6's column, our fine-tuning dataset name) -> display name.
DATASETS = {
    "imagenet": "ImageNet",
    "imagenet_real": "ImageNet ReaL",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "pets": "Oxford-IIIT Pets",
    "flowers": "Oxford Flowers-102",
}
# Few-shot datasets of the JFT learning curves (analysis.reference.jft) Table 6 does not have.
OTHER_DATASETS = {"birds": "Birds", "caltech101": "Caltech-101"}
# Table 5 spells the datasets out (its "downstream" column).
TABLE5_DATASETS = {name: key for key, name in DATASETS.items()}

# Fig. 5's left panel: the mean over these five (docs/protocol.md, "The figures").
AVERAGE_5_DATASETS = ("imagenet", "cifar10", "cifar100", "pets", "flowers")
AVERAGE_5 = "average-5"

# Pre-training set sizes as the paper states them (Sec. 4.1: 1.3M, 14M, 303M images);
# Fig. 3 orders its x axis by these.
PRETRAIN_SIZES = {"ImageNet": 1_300_000, "ImageNet-21k": 14_000_000, "JFT-300M": JFT_IMAGES}


def dataset_name(key: str) -> str:
    """Display name of a transfer dataset key ("cifar10" -> "CIFAR-10"); an own set
    (``imagefolder:/data/shapes``, ``shards:/data/shapes/{000..007}.tar``) by its folder's
    name ("shapes"); others unchanged."""
    if named := DATASETS.get(key) or OTHER_DATASETS.get(key):
        return named
    _, sep, path = key.partition(":")
    parts = [p for p in path.split("/") if p] if sep else []
    while len(parts) > 1 and any(c in parts[-1] for c in "{*?"):  # shard patterns: the folder
        parts.pop()
    return parts[-1] if parts else key


def _average_5(metrics: dict[str, float]) -> float | None:
    values = [metrics.get(finetune_key(ds)) for ds in AVERAGE_5_DATASETS]
    if any(v is None for v in values):
        return None
    return sum(values) / len(values)


def _paper_record(
    *, table: str, model: str, pretrain: str, epochs: int | None, row_metrics: dict
) -> dict:
    """A row with the columns of the cells frame, built through the same function."""
    spec = parse(model)
    examples = None if epochs is None else epochs * PRETRAIN_SIZES[pretrain]
    result = RunResult(
        status=STATUS_DONE,
        model=spec.name,
        examples_seen=examples,
        params=flops.count(spec.name).params,
    )
    config = {
        "cell_id": f"{table}:{spec.name}:{pretrain}" + (f":{epochs}ep" if epochs else ""),
        "grid": table,
        "model": {"name": spec.name},
        "data": {"dataset": pretrain, "subset": None, "num_examples": PRETRAIN_SIZES[pretrain]},
    }
    rec = cell_record(config, result, status=STATUS_DONE, source="paper")
    rec.update(row_metrics)  # percentages already: not through cell_record's conversion
    rec[AVERAGE_5] = _average_5(row_metrics)
    # Only the paper-facing keys; the config echo would add nothing.
    return {k: v for k, v in rec.items() if not k.startswith("config.")}


@cache
def _table5() -> pd.DataFrame:
    rows = table5()
    models = [c for c in rows[0] if c.startswith("ViT-")]
    per_cell: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        key = finetune_key(TABLE5_DATASETS[row["downstream"]])
        for model in models:
            if row[model]:
                per_cell.setdefault((model, row["pretrain_dataset"]), {})[key] = float(row[model])
    records = [
        _paper_record(table="table5", model=m, pretrain=p, epochs=None, row_metrics=metrics)
        for (m, p), metrics in per_cell.items()
    ]
    return records_to_frame(records)


@cache
def _table6() -> pd.DataFrame:
    records = []
    for row in table6():
        metrics = {finetune_key(ds): float(row[ds]) for ds in DATASETS}
        rec = _paper_record(
            table="table6",
            model=row["model"],
            pretrain="JFT-300M",
            epochs=int(row["pretrain_epochs"]),
            row_metrics=metrics,
        )
        if rec["family"] != row["family"]:
            raise ValueError(
                f"Table 6 row {row['model']!r}: family {row['family']!r} but the name "
                f"decodes to {rec['family']!r}"
            )
        rec["exaflops"] = float(row["pretrain_exaflops"])
        records.append(rec)
    return records_to_frame(records)


def table5_frame() -> pd.DataFrame:
    """Paper Table 5, one row per (ViT model, pre-training dataset)."""
    return _table5().copy()


def table6_frame() -> pd.DataFrame:
    """Paper Table 6, one row per (model, epochs) on JFT-300M, with exaFLOPs."""
    return _table6().copy()
