"""What every figure does to its frame first: check the columns, keep the finished cells,
combine cells that share a line and an x value, and give each line its look."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from vitscale.record import STATUS_DONE
from vitscale.record.cells import metric_columns

from .. import style
from . import AGGREGATES


def require(frame: pd.DataFrame, columns: Sequence[str]) -> None:
    """``ValueError`` naming the first missing column and the metric columns there are."""
    for column in columns:
        if column not in frame.columns:
            metrics = metric_columns(frame)
            shown = ", ".join(metrics[:12]) + (", ..." if len(metrics) > 12 else "")
            raise ValueError(
                f"no column {column!r} in the results; metric columns: {shown or 'none'}"
            )


def finished(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """The finished cells (status done) that have a value in every one of ``columns``."""
    require(frame, ["status", *columns])
    done = frame[frame["status"] == STATUS_DONE]
    return done.dropna(subset=list(columns))


def check_agg(agg: str) -> None:
    if agg not in AGGREGATES:
        raise ValueError(f"unknown aggregate {agg!r}; valid: {', '.join(AGGREGATES)}")


def aggregate(frame: pd.DataFrame, keys: Sequence[str], value: str, agg: str) -> pd.DataFrame:
    """``value`` combined (``agg``) over the rows sharing ``keys``; sorted by the keys."""
    check_agg(agg)
    grouped = frame.groupby(list(keys), sort=True, dropna=False)[value]
    return grouped.agg(agg).reset_index()


def _sort_key(value) -> tuple:
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def hue_order(frame: pd.DataFrame, hue: str) -> list:
    """The values of ``hue`` in display order: models and families in paper order, else
    numbers ascending, then the rest by name."""
    if hue == "family":
        known = [f for f in style.FAMILIES if f in set(frame["family"])]
        return known + sorted(set(frame["family"]) - set(known), key=str)
    if hue == "model":
        families = dict(zip(frame["model"], frame["family"], strict=True))
        sizes = dict(zip(frame["model"], frame["size"], strict=True))
        return style.model_order(frame["model"].unique(), families, sizes)
    return sorted(frame[hue].unique(), key=_sort_key)


def label(value) -> str:
    """A legend label: ``40`` not ``40.0``, ``0.001`` not ``0.0010000``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def line_styles(frame: pd.DataFrame, hue: str) -> dict:
    """``{value: dict(label, color, linestyle, marker)}`` in display order.

    By model: a colour per model, the line style of its family (ViT solid, ResNet dashed,
    hybrid dash-dotted, as in Fig. 4) and a marker per model size. By anything else: a
    colour and a marker per value, solid lines.
    """
    values = hue_order(frame, hue)
    colors = style.model_colors(values)
    if hue == "model":
        first = frame.drop_duplicates("model").set_index("model")
        markers = style.size_markers(first["size"].astype(str))
        return {
            m: dict(
                label=str(m),
                color=colors[m],
                linestyle=style.FAMILY_LINESTYLES.get(first.at[m, "family"], ":"),
                marker=markers[str(first.at[m, "size"])],
            )
            for m in values
        }
    return {
        v: dict(
            label=label(v),
            color=colors[v],
            linestyle="-",
            marker=style.MARKERS[i % len(style.MARKERS)],
        )
        for i, v in enumerate(values)
    }


# Tick multipliers tried in order on a short log axis: the first that gives at least two
# labels in the data's range, spaced as below, wins (1-2-5, then finer).
_SHORT_LOG_SUBS = ((1, 2, 5), (1, 2, 3, 5), (1, 2, 4, 6, 8), (1, 2, 3, 4, 5, 6, 7, 8, 9))
_SHORT_LOG_GAP = 1 / 3.2  # neighbouring labels at least this share of the axis apart


def log_x(ax, values) -> None:
    """A log x axis for positive ``values``. Spanning less than ~1.5 decades, it is labelled
    at a few round values inside the data's range (1, 2 and 5 times each power of ten when
    two of them fall there, else finer multipliers) spaced so that their labels do not
    touch on a narrow panel: matplotlib's own locator labels every integer multiple on a
    short axis and the labels run together."""
    values = pd.Series(values, dtype=float).dropna()
    if values.empty or (values <= 0).any():
        return
    ax.set_xscale("log")
    lo, hi = values.min(), values.max()
    if hi / lo < 30:
        ax.xaxis.set_major_locator(FixedLocator(short_log_ticks(lo, hi)))
        ax.xaxis.set_major_formatter(FuncFormatter(_power_of_ten))
        ax.xaxis.set_minor_formatter(NullFormatter())


def short_log_ticks(lo: float, hi: float) -> list[float]:
    """Round tick values for a log axis over ``[lo, hi]`` (a span under ~1.5 decades), at
    least :data:`_SHORT_LOG_GAP` of the span apart (so at most four)."""
    pad = (hi / lo) ** 0.05  # a label just outside the data still sits inside the margins
    gap = _SHORT_LOG_GAP * math.log10(hi * pad / (lo / pad))
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    ticks: list[float] = []
    for subs in _SHORT_LOG_SUBS:
        ticks = []
        for value in sorted(s * 10.0**e for e in decades for s in subs):
            inside = lo / pad <= value <= hi * pad
            if inside and (not ticks or math.log10(value / ticks[-1]) >= gap - 1e-9):
                ticks.append(value)
        if len(ticks) >= 2:
            break
    return ticks


def _power_of_ten(value: float, _pos=None) -> str:
    """2e4 -> 2x10^4, 1e5 -> 10^5 (mathtext), as matplotlib labels whole decades."""
    exponent = math.floor(math.log10(value) + 1e-9)
    coef = round(value / 10**exponent, 6)
    power = f"10^{{{exponent}}}"
    return f"${power}$" if coef == 1 else f"${coef:g}\\times {power}$"


def two_lines(text: str, limit: int = 28) -> str:
    """``text`` split at the space nearest its middle when longer than ``limit``: an axis
    label that fits beside a short panel."""
    if len(text) <= limit or " " not in text:
        return text
    spaces = [i for i, ch in enumerate(text) if ch == " "]
    cut = min(spaces, key=lambda i: abs(i - len(text) / 2))
    return text[:cut] + "\n" + text[cut + 1 :]
