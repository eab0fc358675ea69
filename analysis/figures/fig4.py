"""Fig. 4, "Linear few-shot evaluation on ImageNet versus pre-training size"
(docs/protocol.md, "The figures").

Here: any few-shot metric of the cells frame (its ``best`` value, the paper's early
stopping) against the pre-training dataset size on a log axis, one line per model (ViT
solid, ResNet dashed, hybrid dash-dotted) or per value of any column (``hue``), cells
sharing a line and a size (seeds) combined by ``agg``, with the range over them (max -
min: the seed spread) as an error bar. Only the cells of Fig. 4's duration are drawn (the
steps shared by the most subsets, :func:`analysis.summary.fig4_steps`): a grid's shorter
Fig. 5 runs on the largest subset do not mix in (when a line and an x value would mix
durations; a ``hue`` or ``x`` that separates them draws them all).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .. import metrics as M
from .. import style
from ..summary import fig4_steps
from ._data import aggregate, check_agg, finished, line_styles, log_x, per_model

SEED_RANGE = "seed-range"  # gid of the error bars' artists


def plot(
    ax,
    cells: pd.DataFrame,
    *,
    metric: str,
    x: str = "num_examples",
    hue: str = "model",
    agg: str = "mean",
) -> None:
    """Draw one line per value of ``hue``: ``metric`` (combined by ``agg``) against ``x``."""
    check_agg(agg)
    data, hue = per_model(finished(cells, [metric, x, hue]), hue)
    mixed = "steps" in data and data.groupby([hue, x])["steps"].nunique().max() > 1
    if mixed:  # cells of one point trained for different durations: Fig. 4's duration only
        data = data[data["steps"] == fig4_steps(data)]
    points = aggregate(data, [hue, x], metric, agg)
    lo, hi = (aggregate(data, [hue, x], metric, a)[metric] for a in ("min", "max"))
    points = points.assign(lo=lo.to_numpy(), hi=hi.to_numpy())
    for value, look in line_styles(data, hue).items():
        line = points[points[hue] == value]
        y = line[metric].to_numpy()
        spread = [y - line["lo"].to_numpy(), line["hi"].to_numpy() - y]
        ax.plot(line[x].to_numpy(), y, markersize=4, **look)
        if (spread[0] + spread[1]).max() > 0:  # several cells (seeds) at a point: their range
            bar = ax.errorbar(
                line[x].to_numpy(), y, yerr=spread, fmt="none", ecolor=look["color"], capsize=2
            )
            for artist in (*bar.lines[1], *bar.lines[2]):
                artist.set_gid(SEED_RANGE)
    log_x(ax, points[x])
    ax.set_xlabel(M.axis_label(x))
    ax.set_ylabel(M.label(metric))


def figure(
    cells: pd.DataFrame,
    *,
    metric: str,
    x: str = "num_examples",
    hue: str = "model",
    agg: str = "mean",
):
    """A one-column figure with the legend below the axes."""
    with style.paper_style():
        fig, (ax,) = style.new_figure()
        plot(ax, cells, metric=metric, x=x, hue=hue, agg=agg)
        handles, labels = ax.get_legend_handles_labels()
        style.legend_below(fig, handles, labels, title=None if hue == "model" else hue)
    return fig


def write(
    cells: pd.DataFrame,
    out_dir: str | os.PathLike,
    *,
    metric: str,
    x: str = "num_examples",
    hue: str = "model",
    agg: str = "mean",
    formats: Sequence[str] = style.FORMATS,
) -> list[Path]:
    """Write ``fig4_<metric>.<format>``; returns the paths."""
    fig = figure(cells, metric=metric, x=x, hue=hue, agg=agg)
    return style.save(fig, out_dir, f"fig4_{style.safe_stem(metric)}", formats=formats)
