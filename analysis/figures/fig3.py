"""Fig. 3, "Transfer to ImageNet" (docs/protocol.md, "The figures"); the paper's points are
its Table 5 (:func:`paper_frame`).

From runs: the x axis has one position per pre-training dataset, ordered by size; each
non-ResNet model is a line and the ResNets form the band (their lowest to highest
accuracy at each dataset). A dataset is represented by its largest subset (the paper
pre-trains on whole datasets); cells sharing a model and a dataset (seeds) are combined
by ``agg``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from vitscale.record import finetune_key

from .. import metrics as M
from .. import paper, style
from ._data import aggregate, check_agg, finished, line_styles

IMAGENET = finetune_key("imagenet")
BAND_LABEL = "BiT ResNets (range)"
BAND_COLOR = style.family_color("ResNet")  # the ResNet colour of every figure
_BAND_HALF_WIDTH = 0.3  # a band at a single dataset is drawn this wide either side


def paper_frame() -> pd.DataFrame:
    """Table 5's ViTs and Table 6's ResNets (the band; JFT-300M only)."""
    t6 = paper.table6_frame()
    return pd.concat([paper.table5_frame(), t6[t6["family"] == "ResNet"]], ignore_index=True)


def _datasets(data: pd.DataFrame) -> list[str]:
    """Pre-training datasets, smallest first (by their largest subset), then by name."""
    sizes = data.groupby("pretrain_dataset", sort=False)["num_examples"].max()
    return sorted(sizes.index, key=lambda d: (np.isnan(sizes[d]), sizes[d], str(d)))


def _largest_subset(data: pd.DataFrame) -> pd.DataFrame:
    size = data.groupby("pretrain_dataset")["num_examples"].transform("max")
    return data[(data["num_examples"] == size) | size.isna()]


def plot(ax, frame: pd.DataFrame, *, metric: str = IMAGENET, agg: str = "mean") -> None:
    """Draw a line per non-ResNet model and the ResNets' band, against the dataset."""
    check_agg(agg)
    data = _largest_subset(finished(frame, [metric, "model", "pretrain_dataset"]))
    datasets = _datasets(data)
    position = {d: i for i, d in enumerate(datasets)}

    resnets = data[data["family"] == "ResNet"]
    if len(resnets):
        # One value per distinct pre-training (model, dataset, epochs): seeds combined.
        runs = aggregate(resnets, ["pretrain_dataset", "model", "epochs"], metric, agg)
        band = runs.groupby("pretrain_dataset")[metric].agg(["min", "max"])
        band = band.assign(x=band.index.map(position)).sort_values("x")
        xs, lo, hi = band["x"].to_numpy(float), band["min"].to_numpy(), band["max"].to_numpy()
        if len(xs) == 1:
            xs = np.array([xs[0] - _BAND_HALF_WIDTH, xs[0] + _BAND_HALF_WIDTH])
            lo, hi = np.repeat(lo, 2), np.repeat(hi, 2)
        ax.fill_between(xs, lo, hi, color=BAND_COLOR, alpha=0.3, lw=0, zorder=1, gid="band")

    models = data[data["family"] != "ResNet"]
    points = aggregate(models, ["model", "pretrain_dataset"], metric, agg)
    points["x"] = points["pretrain_dataset"].map(position)
    for model, look in line_styles(models, "model").items():
        line = points[points["model"] == model].sort_values("x")
        ax.plot(line["x"].to_numpy(), line[metric].to_numpy(), markersize=4, zorder=3, **look)

    ax.set_xticks(range(len(datasets)), [str(d) for d in datasets])
    ax.set_xlim(-0.5, len(datasets) - 0.5)
    ax.set_xlabel(M.axis_label("pretrain_dataset"))
    ax.set_ylabel(M.label(metric))
    ax.grid(False, axis="x")


def figure(frame: pd.DataFrame, *, metric: str = IMAGENET, agg: str = "mean"):
    """A one-column figure; the legend (models, then the band) below the axes."""
    with style.paper_style():
        fig, (ax,) = style.new_figure()
        plot(ax, frame, metric=metric, agg=agg)
        handles, labels = ax.get_legend_handles_labels()
        if any(c.get_gid() == "band" for c in ax.collections):
            handles.append(Patch(color=BAND_COLOR, alpha=0.3, lw=0))
            labels.append(BAND_LABEL)
        style.legend_below(fig, handles, labels)
    return fig


def write(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike,
    *,
    metric: str = IMAGENET,
    agg: str = "mean",
    formats: Sequence[str] = style.FORMATS,
) -> list[Path]:
    """Write ``fig3_<metric>.<format>``; returns the paths."""
    fig = figure(frame, metric=metric, agg=agg)
    return style.save(fig, out_dir, f"fig3_{style.safe_stem(metric)}", formats=formats)


def write_paper(
    out_dir: str | os.PathLike, *, formats: Sequence[str] = style.FORMATS
) -> list[Path]:
    """Fig. 3 redrawn from Tables 5 and 6: ``paper_fig3_transfer_imagenet.<format>``."""
    fig = figure(paper_frame())
    return style.save(fig, out_dir, "paper_fig3_transfer_imagenet", formats=formats)
