"""Learning curves as scaling curves: error against examples seen (Fig. 4's axis) or against
pre-training exaFLOPs (Fig. 5's), both axes logarithmic, one line per model (the looks of
every figure: family colour and line style, size marker), and the crossovers where one
model's curve overtakes another's marked with the letter of the pair, which the legend
spells out ("ViT-B/16 passes BiT-R50x1"; :mod:`analysis.crossover`).

Input is a history frame (:func:`vitscale.record.cells.load_history`, accuracy in percent;
the error drawn is 100 - accuracy), e.g. the JFT curves of :mod:`analysis.reference.jft`.
A panel per metric; rows without a value on the x axis (a model without a compute count)
are left out, and ``note`` says so above the panels.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from vitscale.record import EXAMPLES_SEEN

from .. import metrics as M
from .. import style
from ..crossover import Crossover, crossovers
from ._data import line_styles, log_x, require, two_lines

CROSSOVER = "crossover"  # gid of the crossover markers and their numbers
_MAX_COLUMNS = 4


def error_label(metric: str) -> str:
    """ "ImageNet 5-shot error (%)"."""
    return M.label(metric).replace(" accuracy (%)", " error (%)")


def passes(a: str, b: str, c: Crossover) -> str:
    """ "ViT-B/16 passes BiT-R50x1": which line is ahead after the crossover."""
    ahead, behind = (a, b) if c.leader == "a" else (b, a)
    return f"{ahead} passes {behind}"


def _letter(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i] if i < 26 else str(i + 1)


def plot(
    ax,
    history: pd.DataFrame,
    *,
    metric: str,
    x: str = EXAMPLES_SEEN,
    hue: str = "model",
    pairs: list[str] | None = None,
) -> list[tuple[str, str, Crossover]]:
    """Draw ``metric``'s error against ``x``, one line per ``hue`` value, and mark the
    crossovers, each with the letter of its pair (which line passes which: its place in
    ``pairs``, to which new pairs are added; the legend of :func:`figure` spells them out);
    returns them as ``(line a, line b, crossover)``, a before b in legend order."""
    require(history, [metric, x, hue])
    pairs = [] if pairs is None else pairs
    data = history.dropna(subset=[metric, x, hue])
    data = data[data[x] > 0].sort_values(x, kind="stable")
    looks = line_styles(data, hue)
    curves = {}
    for value, look in looks.items():
        line = data[data[hue] == value]
        curves[value] = (line[x].to_numpy(float), 100.0 - line[metric].to_numpy(float))
        every = max(1, len(line) // 6)  # a few markers: the size, without hiding the curve
        ax.plot(*curves[value], lw=1.0, markevery=every, markersize=3.5, **look)
    found = []
    for a, b in itertools.combinations(looks, 2):
        for c in crossovers(*curves[a], *curves[b]):
            found.append((str(a), str(b), c))
            pair = passes(str(a), str(b), c)
            if pair not in pairs:
                pairs.append(pair)
            ax.scatter(
                [c.x], [c.y], marker="x", s=22, color="black", lw=1.0, zorder=5, gid=CROSSOVER
            )
            ax.annotate(
                _letter(pairs.index(pair)),
                (c.x, c.y),
                xytext=(3, 2 if len(found) % 2 else -8),  # neighbours apart
                textcoords="offset points",
                fontsize="x-small",
                zorder=6,
                gid=CROSSOVER,
            )
    log_x(ax, data[x])
    ax.set_yscale("log")  # errors in percent: 10, 20, 30, 50 ... labelled as numbers
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(M.axis_label(x))
    ax.set_ylabel(error_label(metric))
    return found


def figure(
    history: pd.DataFrame,
    *,
    metrics: Sequence[str],
    x: str = EXAMPLES_SEEN,
    hue: str = "model",
    note: str | None = None,
):
    """Up to four panels per row, titled by metric, on one x range, one legend below (the
    lines, then each crossover's letter: which line passes which); ``note`` above the
    panels. Returns ``(figure, crossovers by metric)``."""
    if not metrics:
        raise ValueError("scaling_curves.figure: no metrics to draw")
    ncols = min(len(metrics), _MAX_COLUMNS)
    found: dict[str, list] = {}
    pairs: list[str] = []
    with style.paper_style():
        fig, axes = style.new_figure(
            ncols, math.ceil(len(metrics) / ncols), width=style.DOUBLE_COLUMN
        )
        handles: dict = {}
        for i, (ax, metric) in enumerate(zip(axes, metrics, strict=False)):
            found[metric] = plot(ax, history, metric=metric, x=x, hue=hue, pairs=pairs)
            ax.set_title(M.short_label(metric))
            ax.set_ylabel("Few-shot error (%)" if i % ncols == 0 else "")
            if ncols > 2:  # a quarter of the page is narrower than the axis label
                ax.set_xlabel(two_lines(ax.get_xlabel(), limit=24))
            handles |= dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
        drawn = axes[: len(metrics)]
        lo = min(ax.get_xlim()[0] for ax in drawn)
        hi = max(ax.get_xlim()[1] for ax in drawn)
        for ax in drawn:  # one x range in every panel: curves compare across them
            ax.set_xlim(lo, hi)
        for ax in axes[len(metrics) :]:
            ax.set_visible(False)
        marks = [style.marker_handle(f"${_letter(i)}$", color="black") for i in range(len(pairs))]
        style.legend_below(fig, [*handles.values(), *marks], [*handles, *pairs])
        if note:
            fig.suptitle(note, fontsize="small", color="0.3")
    return fig, found


def write(
    history: pd.DataFrame,
    out_dir: str | os.PathLike,
    *,
    metrics: Sequence[str],
    stem: str,
    x: str = EXAMPLES_SEEN,
    hue: str = "model",
    note: str | None = None,
    formats: Sequence[str] = style.FORMATS,
) -> tuple[list[Path], dict[str, list]]:
    """Write ``<stem>.<format>``; returns the paths and the crossovers by metric."""
    fig, found = figure(history, metrics=metrics, x=x, hue=hue, note=note)
    return style.save(fig, out_dir, stem, formats=formats), found
