"""Fig. 5, "Performance versus pre-training compute" (docs/protocol.md, "The figures"); the
paper's points are its Table 6 (:func:`paper_panels`).

Each panel draws each model's mean over its seeds at each compute as a point (colour = the
family, a shade per patch, or another ``hue`` column; marker = model size: the looks of
every figure, :func:`analysis.style.model_look`) with the seeds' range as a bar, as Fig. 4
does, the Pareto frontier of those means for each colour group as a line
(:mod:`analysis.frontier`) and, with ``fit``, the saturating power law of Zhai et al.
2021 fitted to that frontier with its bootstrap band (:mod:`analysis.scaling`). A
panel's ``reference`` frame (the paper's Table 6, for a metric the paper measured under
the same name) is drawn beside ours as hollow markers. Published checkpoints evaluated
with our protocol (cells with ``published``: ``model.pretrained``, their compute from
their recipe) are drawn ringed in black and kept out of the frontiers and fits, which
describe our own runs.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vitscale.record import finetune_key

from .. import metrics as M
from .. import paper, scaling, style
from ..frontier import pareto_frontier
from ._data import finished, hue_order, log_x, model_looks, two_lines

X = "exaflops"
SEED_RANGE = "seed-range"  # gid of the error bars' artists
PAPER_PANELS = ((paper.AVERAGE_5, "Average-5"), (finetune_key("imagenet"), "ImageNet"))
REFERENCE_LABEL = "paper (Table 6)"
PUBLISHED_LABEL = "published checkpoint"
FIT_LABEL = "power-law fit"  # Zhai et al. 2021; dotted past the data
_MAX_COLUMNS = 3  # panels per row; more panels wrap onto further rows


@dataclass(frozen=True, eq=False)
class Panel:
    """One axes: ``metric`` of ``frame`` against compute, titled ``title``; ``reference``
    (e.g. :func:`analysis.paper.table6_frame`) is drawn beside it, hollow."""

    frame: pd.DataFrame
    metric: str
    title: str
    reference: pd.DataFrame | None = None


def paper_panels() -> list[Panel]:
    """The paper's two panels, from Table 6."""
    t6 = paper.table6_frame()
    return [Panel(t6, metric, title) for metric, title in PAPER_PANELS]


def _hue(frame: pd.DataFrame, hue: str) -> str:
    # The paper's tables have no config columns: colour them by family.
    return hue if hue in frame.columns else "family"


def _colors(values: Sequence, hue: str) -> dict:
    """Families in their fixed colours (:data:`analysis.style.FAMILY_COLORS`), other
    values in palette order."""
    if hue == "family":
        return {v: style.family_color(v) for v in values}
    return style.value_colors(list(values))


def _looks(panels: Sequence[Panel], hue: str) -> tuple[dict, dict[str, dict]]:
    """``({hue value: colour}, {model: its look})`` over every panel (the reference's
    models are drawn hollow, without a legend entry of their own), so a family or a model
    looks the same in all panels and in every other figure."""
    colors: dict = {}
    models: dict[str, dict] = {}
    for p in panels:
        h = _hue(p.frame, hue)
        done = finished(p.frame, [h, "size", "model"])
        for value, color in _colors(hue_order(done, h), h).items():
            colors.setdefault(value, color)
        for m, look in model_looks(done).items():
            if h != "family":  # coloured by another column: the marker alone is the model's
                look["color"] = "0.3"
            models.setdefault(m, look)
    return colors, models


def _means(data: pd.DataFrame, metric: str, keys: list[str]) -> pd.DataFrame:
    """One row per model and compute (its seeds): the mean, with their lowest and highest."""
    grouped = data.groupby(keys, sort=False, dropna=False)[metric]
    return grouped.agg(["mean", "min", "max"]).rename(columns={"mean": metric}).reset_index()


def _points(ax, data, metric, hue, colors, models, *, gid, hollow=False, ringed=False) -> None:
    """Seed means as points (a model's look; coloured by ``hue`` unless it is the family),
    the seeds' range as a bar where there are several."""
    means = _means(data, metric, list(dict.fromkeys([hue, "model", "family", "size", X])))
    for model in hue_order(means, "model"):
        group = means[means["model"] == model]
        look = models.get(model) or style.model_look(
            model, group["family"].iloc[0], group["size"].iloc[0]
        )
        color = look["color"] if hue == "family" else colors.get(group[hue].iloc[0], "0.4")
        y = group[metric].to_numpy()
        spread = [y - group["min"].to_numpy(), group["max"].to_numpy() - y]
        if (spread[0] + spread[1]).max() > 0:
            bar = ax.errorbar(
                group[X].to_numpy(),
                y,
                yerr=spread,
                fmt="none",
                ecolor=color,
                lw=0.8,
                capsize=1.5,
                zorder=2,
            )
            for artist in (*bar.lines[1], *bar.lines[2]):
                artist.set_gid(SEED_RANGE)
        ax.scatter(
            group[X],
            y,
            marker=look["marker"],
            s=18 if hollow else 26 if ringed else 16,
            facecolors="none" if hollow else look.get("markerfacecolor", color),
            edgecolors="black" if ringed else color,
            linewidths=0.8 if hollow or ringed else 0.4,
            zorder=2 if hollow else 5 if ringed else 3,
            label=str(model) + (" (published)" if ringed else ""),
            gid=gid,
        )


def _published(data: pd.DataFrame) -> pd.Series:
    """Rows that are published checkpoints (False where the frame has no such column)."""
    if "published" not in data.columns:
        return pd.Series(False, index=data.index)
    return data["published"].fillna(False).astype(bool)


def plot(
    ax,
    panel: Panel,
    *,
    hue: str = "family",
    fit: bool = False,
    bootstrap: int = 200,
    looks: tuple[dict, dict[str, dict]] | None = None,
) -> None:
    """Draw one panel: seed means (with their range), the frontier of the means per
    ``hue`` group as a line, optionally the fitted law.

    ``looks`` (colours and markers, from :func:`figure`) keeps them the same across
    panels; by default they are this panel's own.
    """
    colors, models = looks or _looks([panel], hue)
    hue, metric = _hue(panel.frame, hue), panel.metric
    every = finished(panel.frame, [X, metric, hue, "size", "model"])
    published = _published(every)
    data = every[~published]
    if panel.reference is not None:
        ref = finished(panel.reference, [X, metric, "family", "size", "model"])
        _points(ax, ref, metric, "family", colors, models, gid="reference", hollow=True)
    _points(ax, data, metric, hue, colors, models, gid="points")
    _points(ax, every[published], metric, hue, colors, models, gid="published", ringed=True)
    for value in hue_order(data, hue):
        group = data[data[hue] == value]
        means = _means(group, metric, ["model", X])
        front = means.iloc[pareto_frontier(means[X].to_numpy(float), means[metric])]
        ax.plot(
            front[X].to_numpy(),
            front[metric].to_numpy(),
            color=colors[value],
            lw=1.0,
            zorder=4,
            label=f"{value} frontier",
            gid="frontier",
        )
        if fit:
            _fit(ax, group, metric, colors[value], bootstrap, name=value)
    xs = [every[X]] + ([ref[X]] if panel.reference is not None else [])
    log_x(ax, pd.concat(xs))
    ax.set_xlabel(M.axis_label(X))
    ax.set_ylabel(M.label(metric))
    ax.set_title(panel.title)


def _fit(ax, group: pd.DataFrame, metric: str, color: str, bootstrap: int, *, name: str) -> None:
    """The law on this group's frontier; skipped, and said, when it cannot be fitted
    (fewer than four distinct frontier points, an accuracy of 100%)."""
    try:
        law = scaling.fit_frontier(group, metric=metric, x=X, bootstrap=bootstrap)
    except ValueError as e:
        print(f"note: no {FIT_LABEL} drawn for {name} ({M.label(metric)}): {e}", file=sys.stderr)
        return
    scaling.plot_fit(ax, law, color=color, extrapolate=3.0)


def _legend(
    fig, colors: dict, models: dict[str, dict], *, reference: bool, fit: bool, published: bool
) -> None:
    """The colours (drawn as the frontier line), then every model by its full name (its
    marker and colour), the paper's points, published checkpoints, the fit."""
    handles = [style.line_handle(c) for c in colors.values()]
    labels = [f"{v} frontier" for v in colors]
    handles += [
        style.marker_handle(look["marker"], color=look["color"]) for look in models.values()
    ]
    labels += list(models)
    ring = style.marker_handle("o")
    ring.set_markeredgecolor("black")
    for shown, handle, label in (
        (published, ring, PUBLISHED_LABEL),
        (reference, style.marker_handle("o", filled=False), REFERENCE_LABEL),
        (fit, style.line_handle("0.3"), FIT_LABEL),
    ):
        if shown:
            handles.append(handle)
            labels.append(label)
    style.legend_below(fig, handles, labels)


def figure(
    panels: Sequence[Panel], *, hue: str = "family", fit: bool = False, bootstrap: int = 200
):
    """Panels side by side (up to three per row, at most the page width), one legend
    below them all: colours (with the frontier line), sizes, the paper's points, the fit."""
    if not panels:
        raise ValueError("fig5.figure: no panels to draw")
    looks = _looks(panels, hue)
    ncols = min(len(panels), _MAX_COLUMNS)
    nrows = math.ceil(len(panels) / ncols)
    with style.paper_style():
        width = style.SINGLE_COLUMN if ncols == 1 else style.DOUBLE_COLUMN
        fig, axes = style.new_figure(ncols, nrows, width=width)
        for ax, panel in zip(axes, panels, strict=False):
            plot(ax, panel, hue=hue, fit=fit, bootstrap=bootstrap, looks=looks)
            ax.set_ylabel(two_lines(ax.get_ylabel()))
            if ncols > 2:  # a third of the page is narrower than the compute label
                ax.set_xlabel(two_lines(ax.get_xlabel(), limit=24))
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        drawn_fit = any(ln.get_gid() == "fit" for ax in axes for ln in ax.lines)
        reference = any(p.reference is not None for p in panels)
        published = any(c.get_gid() == "published" for ax in axes for c in ax.collections)
        lines = {  # a frontier of one point draws no line: no line in the legend either
            ln.get_label().removesuffix(" frontier")
            for ax in axes
            for ln in ax.lines
            if ln.get_gid() == "frontier" and len(ln.get_xdata()) > 1
        }
        colors = {v: c for v, c in looks[0].items() if str(v) in lines}
        _legend(fig, colors, looks[1], reference=reference, fit=drawn_fit, published=published)
    return fig


def write(
    panels: Sequence[Panel],
    out_dir: str | os.PathLike,
    *,
    hue: str = "family",
    fit: bool = False,
    bootstrap: int = 200,
    formats: Sequence[str] = style.FORMATS,
    stem: str = "fig5_compute",
) -> list[Path]:
    """Write ``fig5_compute.<format>``; returns the paths."""
    fig = figure(panels, hue=hue, fit=fit, bootstrap=bootstrap)
    return style.save(fig, out_dir, stem, formats=formats)


def write_paper(
    out_dir: str | os.PathLike,
    *,
    fit: bool = False,
    bootstrap: int = 200,
    formats: Sequence[str] = style.FORMATS,
) -> list[Path]:
    """Fig. 5 redrawn from Table 6: ``paper_fig5_compute.<format>``."""
    return write(
        paper_panels(),
        out_dir,
        fit=fit,
        bootstrap=bootstrap,
        formats=formats,
        stem="paper_fig5_compute",
    )
