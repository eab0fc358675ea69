"""Seeds are seeds: which cells of a study differ in their seed alone, and how the others
are told apart or chosen between.

A point of the paper's figures is a model pre-trained on a subset of a pre-training set
for a duration (the set: Fig. 3's axis; the positive control's world); its spread is over
pre-training seeds. Two finished cells with the same (model, set, subset, duration) are
seeds of one *setting* only when their resolved configs differ in ``seed``
alone. Any other difference between them (a learning rate swept by the grid, a value
edited in a grid file between two runs under one ``name:``) is a setting of its own, and
averaging across it would report a hyper-parameter's effect as seed noise. So the keys
that differ become a *setting label* (``lr=0.003``), written after the model's name
(``ViT-Femto/8 lr=0.003``) in every table, figure, W&B view and fit, which then keep the
settings apart as they keep models apart. Or, with ``select="best"``, each (model, subset,
duration) keeps its best setting by the seed mean of the compared metric, as the paper
chose its regularisation per model and dataset (Sec. 4.1, Appendix B.1: "the best of
..."), and says so.

Keys that never make a setting: the seed, the keys that say how a run is operated
(:data:`vitscale.config.identity.OPERATIONAL_KEYS`), the keys the trainer adds
(``DERIVED_KEYS``), and those that define the point itself (model, pre-training set,
subset, duration).
No torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from vitscale.config.identity import DERIVED_KEYS, OPERATIONAL_KEYS

PREFIX = "config."
SELECTIONS = ("show", "best")
# The point a setting belongs to: the model (its original name), pre-training set, subset
# and duration.
POINT = ("model", "pretrain_dataset", "num_examples", "steps")
_POINT_KEYS = (
    "model.name", "data.dataset", "data.subset", "train.steps", "train.epochs", "train.examples"
)  # fmt: skip
_IGNORED = ("seed", *OPERATIONAL_KEYS, *DERIVED_KEYS, *_POINT_KEYS)


def _ignored(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in _IGNORED)


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return ",".join(map(_text, value))
    return str(value)


def _short(keys: Sequence[str]) -> dict[str, str]:
    """Each key's last part ("lr"), or the whole key where two would share one."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last, strict=True)}


def differing_keys(configs: pd.DataFrame, points: pd.DataFrame) -> list[str]:
    """The config keys whose values differ between cells of one point. ``configs``: one
    row per cell, a column per dotted key; ``points``: each cell's (model, subset,
    duration), one column each, aligned with ``configs``."""
    keys = [k for k in configs.columns if not _ignored(k)]
    if not keys or configs.empty:
        return []
    # A key absent from some configs (written before it existed: data.holdout, recipe) is
    # unknown there, not a different value: cells with one id differ in nothing else.
    text = configs[keys].map(_text).where(configs[keys].notna())
    grouped = text.groupby([points[c].astype(str) for c in points.columns], dropna=False)
    varies = grouped.nunique(dropna=True).gt(1).any()
    return sorted(k for k in keys if varies[k])


def labels(configs: pd.DataFrame, points: pd.DataFrame) -> pd.Series:
    """Each cell's setting label, "" where its point's cells differ in the seed alone."""
    keys = differing_keys(configs, points)
    if not keys:
        return pd.Series("", index=configs.index, dtype=str)
    short = _short(keys)
    text = configs[keys].map(_text)
    return text.apply(lambda row: " ".join(f"{short[k]}={row[k]}" for k in keys), axis=1)


def _configs_points(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    columns = [c for c in frame.columns if c.startswith(PREFIX)]
    configs = frame[columns].rename(columns=lambda c: c[len(PREFIX) :])
    return configs, frame[["model_name", *[c for c in POINT[1:] if c in frame.columns]]]


def label_settings(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """A copy of a cells frame whose ``model`` names carry their setting
    ("ViT-Femto/8 lr=0.003"), with ``setting`` (the label alone) and ``model_name`` (the
    model's own name), and the keys that differ. Applying it again recomputes from
    ``model_name``."""
    out = frame.copy()
    if "model_name" not in out.columns:
        out["model_name"] = out["model"]
    configs, points = _configs_points(out)
    keys = differing_keys(configs, points)
    out["setting"] = labels(configs, points).astype(str) if keys else ""
    out["model"] = [
        f"{m} {s}" if s else m for m, s in zip(out["model_name"], out["setting"], strict=True)
    ]
    return out, keys


def select_best(frame: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, list[str]]:
    """Per (model, subset, duration), the cells of the setting with the best seed mean of
    ``metric``, and one line per choice ("ViT-Femto/8 at 1,536 images: best of 2 settings
    (lr), lr=0.003"). ``frame`` as :func:`label_settings` returns it."""
    point = ["model_name", *[c for c in POINT[1:] if c in frame.columns]]
    keep: list[pd.Index] = []
    said: list[str] = []
    for key, group in frame.groupby(point, sort=True, dropna=False):
        means = group.groupby("setting")[metric].mean()
        if len(means) < 2 or means.isna().all():
            keep.append(group.index)
            continue
        best = means.idxmax()
        keep.append(group.index[group["setting"] == best])
        keys = sorted({part.split("=", 1)[0] for s in means.index for part in s.split()})
        n = dict(zip(point, key, strict=True)).get("num_examples", np.nan)
        where = f"{key[0]}" + (f" at {int(n):,} images" if np.isfinite(n) else "")
        said.append(f"{where}: best of {len(means)} {'/'.join(keys)} settings: {best}")
    chosen = frame.loc[np.concatenate(keep)] if keep else frame.iloc[:0]
    chosen = chosen.assign(model=chosen["model_name"])
    return chosen, said


def apply(
    frame: pd.DataFrame, *, select: str = "show", metric: str | None = None
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """:func:`label_settings`, then with ``select="best"`` :func:`select_best` on
    ``metric``: ``(frame, the keys that differ, one line per choice made)``."""
    if select not in SELECTIONS:
        raise ValueError(f"--settings {select!r}: valid: {', '.join(SELECTIONS)}")
    labelled, keys = label_settings(frame)
    if select == "show" or not keys:
        return labelled, keys, []
    if metric is None:
        raise ValueError("--settings best needs the metric it chooses by")
    chosen, said = select_best(labelled, metric)
    return chosen, keys, said
