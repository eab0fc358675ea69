"""The JFT-300M few-shot learning curves of Alabdulmohsin, Neyshabur & Zhai, "Revisiting
Neural Scaling Laws in Language and Vision" (NeurIPS 2022), in the frames our runs give.

The data (``jft_curves.csv``, its source and license in README.md beside it): few-shot
error along pre-training of six models, on four datasets at 5, 10 and 25 shots, 72 curves,
each split by its authors into the points to fit (``Training`` 1) and the later points to
predict (0). Here:

- models get our catalog's names (:data:`MODELS`);
- tasks become our few-shot metric names (``fewshot/<dataset>/<k>shot``,
  :data:`DATASETS`);
- ``compute/exaflops`` is the pre-training compute after ``examples_seen`` images, by
  :func:`vitscale.flops.pretrain_exaflops` at 224 px, JFT-300M's pre-training resolution in
  both papers (docs/protocol.md, "Pre-training compute").

:func:`measurements`: one row per measurement (long: ``metric``, ``dataset``, ``shots``,
``error``, ``training``). :func:`history`: the shape of
:func:`vitscale.record.cells.load_history` (one row per model and examples seen, a column
per metric, accuracy in percent), so the curve figures draw it unchanged.
:func:`splits`: the 72 curves cut at the published split, for :mod:`analysis.holdout`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib.resources import files

import pandas as pd

from vitscale import flops
from vitscale.catalog import model_columns
from vitscale.paper import JFT_IMAGES
from vitscale.record import EXAFLOPS, EXAMPLES_SEEN, STEP, fewshot_key
from vitscale.record.cells import HISTORY_COLUMNS, history_frame

from ..holdout import Split, split_at

NAME = "jft-curves"
FILE = "jft_curves.csv"
PRETRAIN_DATASET = "JFT-300M"
RESOLUTION = 224

# The file's model names -> ours.
MODELS = {
    "ViT/S/16": "ViT-S/16",
    "ViT/B/16": "ViT-B/16",
    "BiT/50/1": "BiT-R50x1",
    "BiT/101/3": "BiT-R101x3",
    "MiX/B/16": "Mixer-B/16",
    "MiX/L/16": "Mixer-L/16",
}
# The file's task prefixes -> our few-shot dataset names (Birds: Caltech-UCSD Birds-200-2011).
DATASETS = {"inet": "imagenet", "c": "cifar100", "bird": "birds", "cal": "caltech101"}
MEASUREMENT_COLUMNS = (
    *HISTORY_COLUMNS,
    "patch",
    EXAMPLES_SEEN,
    EXAFLOPS,
    "metric",
    "dataset",
    "shots",
    "error",
    "training",
)


@cache
def _measurements() -> pd.DataFrame:
    with files(__package__).joinpath(FILE).open(newline="") as fh:
        raw = pd.read_csv(fh)
    parts = raw["Task"].str.rsplit("_", n=1, expand=True)
    dataset, shots = parts[0], parts[1]
    out = pd.DataFrame({"model": raw["Model"].map(MODELS)})
    cols = {m: model_columns(m) for m in MODELS.values()}
    for i, col in enumerate(("family", "size", "patch")):
        out[col] = out["model"].map({m: c[i] for m, c in cols.items()})
    out["cell_id"] = NAME + ":" + out["model"]
    out["grid"] = NAME
    out["pretrain_dataset"] = PRETRAIN_DATASET
    out["num_examples"] = float(JFT_IMAGES)
    out[EXAMPLES_SEEN] = raw["Seen Examples"].astype(float)
    per_example = {m: flops.pretrain_exaflops(m, 1, RESOLUTION) for m in MODELS.values()}
    out[EXAFLOPS] = out["model"].map(per_example) * out[EXAMPLES_SEEN]
    out["dataset"] = dataset.map(DATASETS)
    out["shots"] = shots.astype(int)
    out["metric"] = [fewshot_key(d, k) for d, k in zip(out["dataset"], out["shots"], strict=True)]
    out["error"] = raw["Loss"].astype(float)
    out["training"] = raw["Training"].astype(int).eq(1)
    if out[["model", "dataset"]].isna().any().any():
        raise ValueError(f"{FILE}: a model or task this module does not know")
    out["patch"] = out["patch"].astype("Int64")  # as in the cells frame: empty for ResNets
    out = out.sort_values(["model", "metric", EXAMPLES_SEEN], kind="stable")
    return out[list(MEASUREMENT_COLUMNS)].reset_index(drop=True)


def measurements() -> pd.DataFrame:
    """One row per measurement, columns :data:`MEASUREMENT_COLUMNS`; ``error`` a fraction,
    ``training`` True for the points the authors fit (their later points are held out)."""
    return _measurements().copy()


def history() -> pd.DataFrame:
    """The curves as a history frame (:func:`vitscale.record.cells.history_frame`): one row
    per model and examples seen, ``compute/exaflops``, and a column per few-shot metric,
    accuracy in percent (NaN where that task was not evaluated at that point)."""
    return _history().copy()


@cache
def _history() -> pd.DataFrame:
    ident = [*HISTORY_COLUMNS, EXAMPLES_SEEN, EXAFLOPS]
    points: dict[tuple, dict] = {}
    for r in _measurements().to_dict("records"):
        row = points.setdefault((r["model"], r[EXAMPLES_SEEN]), {c: r[c] for c in ident})
        row[r["metric"]] = 1.0 - r["error"]
    frame = history_frame([row | {STEP: None} for row in points.values()])
    return frame.sort_values(["model", EXAMPLES_SEEN], kind="stable", ignore_index=True)


def splits(
    *,
    models: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    fraction: float | None = None,
) -> list[Split]:
    """The curves cut at the published split (fit: ``training``; held out: the rest), or
    with ``fraction`` at the last fraction of each curve's log-x range
    (:func:`analysis.holdout.split_at`); by model then metric; only ``models`` and
    ``metrics`` when given (``ValueError`` naming the valid ones for an unknown name)."""
    m = _measurements()
    for name, given, valid in (
        ("model", models, MODELS.values()),
        ("metric", metrics, m["metric"]),
    ):
        if unknown := sorted(set(given or ()) - set(valid)):
            raise ValueError(f"unknown {name} {unknown}; valid: {', '.join(sorted(set(valid)))}")
    out = []
    for (model, metric), curve in m.groupby(["model", "metric"], sort=True):
        if (models and model not in models) or (metrics and metric not in metrics):
            continue
        family = str(curve["family"].iloc[0])
        if fraction is not None:
            x, y = curve[EXAMPLES_SEEN], curve["error"]
            out.append(split_at(model, x, y, fraction=fraction, metric=metric, family=family))
            continue
        fit, held = curve[curve["training"]], curve[~curve["training"]]
        out.append(
            Split(
                name=model,
                metric=metric,
                family=family,
                x_fit=fit[EXAMPLES_SEEN].to_numpy(),
                y_fit=fit["error"].to_numpy(),
                x_held=held[EXAMPLES_SEEN].to_numpy(),
                y_held=held["error"].to_numpy(),
            )
        )
    return out
