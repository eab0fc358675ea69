"""One look for every figure: seaborn's "paper" context, a colour-blind-safe palette, one
colour per family, one marker per model size, and legends outside the axes.

Sizes are for a two-column paper: a one-panel figure is one column wide
(:data:`SINGLE_COLUMN` inches) and stays readable there; multi-panel figures span the
page (:data:`DOUBLE_COLUMN`). Matplotlib runs headless (Agg), so figures render on a
server or in CI.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.colors import to_hex, to_rgb  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from vitscale.catalog import FAMILIES, list_models, model_columns  # noqa: E402
from vitscale.families.vit import VIT_SIZES  # noqa: E402

# Okabe-Ito-like colour-blind palette (seaborn "colorblind").
PALETTE: list[str] = sns.color_palette("colorblind").as_hex()
# One colour per family in every figure, in the registry's order (paper Figs. 3-5): ViT
# blue, ResNet orange, hybrid green, Mixer purple; any other
# family grey. Fig. 4: ViT solid, ResNet dashed, hybrids dash-dotted, Mixers dotted.
FAMILY_COLORS = dict(zip(FAMILIES, [PALETTE[i] for i in (0, 1, 2, 4, 5, 6, 7, 8, 9)], strict=False))
OTHER_COLOR = "#666666"
FAMILY_LINESTYLES = dict(zip(FAMILIES, ("-", "--", "-.", ":"), strict=False))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "p", "h", "<", ">", "d", "8", "H")
FORMATS = ("png", "pdf")

SINGLE_COLUMN = 3.4  # inches
DOUBLE_COLUMN = 7.0
PANEL_HEIGHT = 2.6
PNG_DPI = 300

_RC = {
    **sns.axes_style("ticks"),
    **sns.plotting_context("paper"),
    "axes.grid": True,
    "grid.alpha": 0.4,
    "grid.linewidth": 0.5,
    "axes.spines.right": False,
    "axes.spines.top": False,
    "legend.frameon": False,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,  # embed TrueType: text stays editable and searchable
    "figure.constrained_layout.use": True,
}


@contextlib.contextmanager
def paper_style() -> Iterator[None]:
    """Apply the style for the figures made inside the block; global state is restored."""
    with plt.rc_context(_RC):
        yield


def new_figure(
    ncols: int = 1, nrows: int = 1, *, width: float | None = None, height: float | None = None
) -> tuple[Figure, list]:
    """A figure with ``nrows x ncols`` axes (flat list), one column wide for one panel."""
    if width is None:
        width = SINGLE_COLUMN if ncols == 1 else min(DOUBLE_COLUMN, 2.4 * ncols + 0.4)
    if height is None:
        height = PANEL_HEIGHT * nrows + 0.5
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)
    return fig, list(axes.flat)


def size_key(size: str) -> tuple:
    """Canonical order of model sizes: ViT sizes small to large, then ResNets by depth, width."""
    if size in VIT_SIZES:
        return (0, list(VIT_SIZES).index(size), 0.0)
    if size.startswith("R") and "x" in size:
        depth, width = size[1:].split("x", 1)
        try:
            return (1, int(depth), float(width))
        except ValueError:
            pass
    return (2, 0, 0.0, size)


def size_marker(size: str) -> str:
    """The marker of a model size, the same in every figure: ViT (and hybrid) sizes in
    :data:`vitscale.catalog.VIT_SIZES` order, the catalog's ResNet sizes by depth and
    width (the few past fifteen share a marker with a small demo trunk); another size by
    its name."""
    size = str(size)
    if size in VIT_SIZES:
        return MARKERS[list(VIT_SIZES).index(size)]
    resnets = [model_columns(m)[1] for m in list_models("ResNet")]
    if size in resnets:
        return MARKERS[resnets.index(size) % len(MARKERS)]
    return MARKERS[sum(map(ord, size)) % len(MARKERS)]


def family_color(family: str) -> str:
    return FAMILY_COLORS.get(str(family), OTHER_COLOR)


def model_color(model: str, family: str) -> str:
    """The family's colour, darker for a smaller patch (more compute), lighter for a larger
    one: ViT-B/16 and ViT-B/32 differ in shade, never in hue, in every figure."""
    patch = _patch(model)
    if not patch:
        return family_color(family)
    t = max(-0.45, min(0.35, 0.3 * (math.log2(patch) - 4)))  # /16 the family colour itself
    rgb = np.array(to_rgb(family_color(family)))
    rgb = rgb + (1 - rgb) * t if t > 0 else rgb * (1 + t)
    return to_hex(rgb)


def model_look(model: str, family: str, size: str) -> dict:
    """How one model is drawn everywhere: its family's colour (a shade per patch), the
    marker of its size, the line style of its family (Fig. 4)."""
    return dict(
        color=model_color(model, family),
        marker=size_marker(size),
        linestyle=FAMILY_LINESTYLES.get(str(family), ":"),
    )


def model_order(models: Iterable[str], families: dict[str, str], sizes: dict[str, str]) -> list:
    """Models in paper order: family, then size, then name (B/32 before B/16: larger patch
    is the cheaper model)."""

    def key(m: str) -> tuple:
        fam = families.get(m)
        return (
            FAMILIES.index(fam) if fam in FAMILIES else len(FAMILIES),
            size_key(str(sizes.get(m, ""))),
            -_patch(m),
            m,
        )

    return sorted(set(models), key=key)


def _patch(model: str) -> int:
    """The number after a model name's slash (its first word: a setting may follow)."""
    tail = str(model).split(" ", 1)[0].rsplit("/", 1)[-1]
    return int(tail) if "/" in str(model) and tail.isdigit() else 0


def value_colors(values: Sequence) -> dict:
    """One palette colour per value of a column that is not a model or a family (a
    learning rate, a subset), in the given order (cycled past 10 values)."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(values)}


def legend_below(
    fig: Figure,
    handles: Sequence,
    labels: Sequence[str],
    *,
    ncols: int | None = None,
    title: str | None = None,
) -> None:
    """A figure legend below the axes, so it never covers data."""
    if not handles:
        return
    # About 1.4 in per entry (more for long labels: ~0.075 in a character, the handle and
    # the gap ~0.4 in) keeps the legend within the figure's width.
    entry = max(1.4, 0.075 * (max(map(len, labels)) + 5))
    fit = max(2, int(fig.get_figwidth() // entry))
    ncols = min(len(handles), fit if ncols is None else min(ncols, fit))
    rows = -(-len(handles) // ncols)
    if rows > 2:  # a taller figure, not shorter axes (~0.17 in a row of the legend)
        fig.set_figheight(fig.get_figheight() + 0.17 * (rows - 2))
    fig.legend(
        handles, labels, loc="outside lower center", ncols=ncols, handlelength=2.2, title=title
    )


def marker_handle(marker: str, *, color: str = "0.3", filled: bool = True) -> Line2D:
    """A legend proxy: a marker alone."""
    return Line2D(
        [],
        [],
        linestyle="none",
        marker=marker,
        color=color,
        markerfacecolor=color if filled else "none",
    )


def line_handle(color: str, *, linestyle: str = "-", marker: str | None = None) -> Line2D:
    """A legend proxy: a line, optionally with a marker."""
    return Line2D([], [], color=color, linestyle=linestyle, marker=marker)


def save(
    fig: Figure,
    out_dir: str | os.PathLike,
    stem: str,
    *,
    formats: Sequence[str] = FORMATS,
) -> list[Path]:
    """Write ``out_dir/stem.<format>`` for each format (PNG at 300 dpi, vector PDF); closes
    the figure (on a bad format too) and returns the paths."""
    paths = []
    try:
        if unknown := [f for f in formats if f not in ("png", "pdf", "svg")]:
            raise ValueError(f"unknown figure format(s) {unknown}; valid: png, pdf, svg")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with paper_style():  # savefig reads its settings (bbox, fonttype) at save time
            for fmt in formats:
                path = out / f"{stem}.{fmt}"
                fig.savefig(path, dpi=PNG_DPI if fmt == "png" else None)
                paths.append(path)
    finally:
        plt.close(fig)
    return paths


def safe_stem(text: str) -> str:
    """A file-name-safe version of a metric or dataset name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("_")
