"""A metric along training: the curves behind Fig. 4's early stopping (docs/protocol.md,
"The figures"), showing where the best value fell. Input is a history frame
(:func:`vitscale.record.cells.load_history`: one row per cell and logged step, failed cells
included, since a curve up to the failure is still informative). One line per model (or
per value of ``hue``); cells sharing a line and an x value are combined by ``agg``. When
the cells span several pre-training subsets, each subset gets its own panel (a Fig. 4
grid's models on 3,840 images and on 192,000 learn differently; one mean would hide it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from vitscale.record import EXAMPLES_SEEN

from .. import metrics as M
from .. import style
from ._data import aggregate, check_agg, line_styles, log_x, per_model, require

_MAX_COLUMNS = 4  # panels per row
_SHORT_X = {M.axis_label(EXAMPLES_SEEN): "Examples seen"}


def plot(
    ax,
    history: pd.DataFrame,
    *,
    metric: str,
    x: str = EXAMPLES_SEEN,
    hue: str = "model",
    agg: str = "mean",
) -> None:
    """Draw ``metric`` against ``x`` (examples seen, log axis), one line per ``hue`` value."""
    check_agg(agg)
    require(history, [metric, x, hue])
    data, hue = per_model(history.dropna(subset=[metric, x, hue]), hue)
    points = aggregate(data, [hue, x], metric, agg)
    for value, look in line_styles(data, hue).items():
        line = points[points[hue] == value]
        ax.plot(line[x].to_numpy(), line[metric].to_numpy(), markersize=3, **look)
    log_x(ax, points[x])
    ax.set_xlabel(M.axis_label(x))
    # per evaluation, across seeds: below Fig. 4's value, each seed's best and then their mean
    ax.set_ylabel(f"{M.label(metric)}, {agg} of seeds")


def figure(history: pd.DataFrame, *, metric: str, hue: str = "model", agg: str = "mean"):
    """One panel per pre-training subset (one panel when there is one), the legend below."""
    subsets = (
        sorted(history["num_examples"].dropna().unique())
        if "num_examples" in history.columns and hue != "num_examples"
        else []
    )
    panels = [(f"{int(n):,} images", history[history["num_examples"] == n]) for n in subsets]
    if len(panels) < 2:
        panels = [(None, history)]
    with style.paper_style():
        fig, axes = style.new_figure(
            ncols=min(len(panels), _MAX_COLUMNS), nrows=-(-len(panels) // _MAX_COLUMNS)
        )
        handles: dict = {}
        for ax, (title, part) in zip(axes, panels, strict=False):
            plot(ax, part, metric=metric, hue=hue, agg=agg)
            if title:
                ax.set_title(title)
            handles |= dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        shown = axes[: len(panels)]
        low, high = min(ax.get_ylim()[0] for ax in shown), max(ax.get_ylim()[1] for ax in shown)
        for ax in shown:  # one y-axis: panels compare at a glance
            ax.set_ylim(low, high)
        if len(panels) > 1:  # narrow panels: short x labels, a y label per row
            for i, ax in enumerate(axes):
                ax.set_xlabel(_SHORT_X.get(ax.get_xlabel(), ax.get_xlabel()))
                if i % _MAX_COLUMNS:
                    ax.set_ylabel("")
        style.legend_below(
            fig, list(handles.values()), list(handles), title=None if hue == "model" else hue
        )
    return fig


def write(
    history: pd.DataFrame,
    out_dir: str | os.PathLike,
    *,
    metric: str,
    hue: str = "model",
    agg: str = "mean",
    formats: Sequence[str] = style.FORMATS,
) -> list[Path]:
    """Write ``curves_<metric>.<format>``; returns the paths."""
    fig = figure(history, metric=metric, hue=hue, agg=agg)
    return style.save(fig, out_dir, f"curves_{style.safe_stem(metric)}", formats=formats)
