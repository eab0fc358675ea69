"""What every figure does to its frame first: check the columns, keep the finished cells,
combine cells that share a line and an x value, and give each line its look."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import pandas as pd
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath
from matplotlib.ticker import FuncFormatter, Locator, NullFormatter

from vitscale.catalog import FAMILIES
from vitscale.record import STATUS_DONE
from vitscale.record.cells import metric_columns

from .. import style
from . import AGGREGATES

_TEXT = TextToPath()


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
    return frame[frame["status"] == STATUS_DONE].dropna(subset=list(columns))


def check_agg(agg: str) -> None:
    if agg not in AGGREGATES:
        raise ValueError(f"unknown aggregate {agg!r}; valid: {', '.join(AGGREGATES)}")


def aggregate(frame: pd.DataFrame, keys: Sequence[str], value: str, agg: str) -> pd.DataFrame:
    """``value`` combined (``agg``) over the rows sharing ``keys``; sorted by the keys."""
    check_agg(agg)
    return frame.groupby(list(keys), sort=True, dropna=False)[value].agg(agg).reset_index()


def _sort_key(value) -> tuple:
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def hue_order(frame: pd.DataFrame, hue: str) -> list:
    """The values of ``hue`` in display order: models and families in paper order, else
    numbers ascending, then the rest by name."""
    if hue == "family":
        known = [f for f in FAMILIES if f in set(frame["family"])]
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


def per_model(frame: pd.DataFrame, hue: str) -> tuple[pd.DataFrame, str]:
    """``(frame, hue)`` to draw by: lines by a column other than the model are drawn per
    model too when there are several ("ViT-B/16 lr=0.001"), each in its model's look, never
    one line averaging families together."""
    if hue == "model" or "model" not in frame or frame["model"].nunique() < 2:
        return frame, hue
    key = hue.rsplit(".", 1)[-1]
    lines = frame["model"].astype(str) + f" {key}=" + frame[hue].map(label)
    return frame.assign(model=lines), "model"


def model_looks(frame: pd.DataFrame) -> dict:
    """``{model: dict(label, color, linestyle, marker)}`` in display order: each model's
    :func:`analysis.style.model_look`; a model that would look like one already drawn (the
    same model under another setting) gets hollow markers, then other line styles, each
    filled and hollow (:data:`_SETTING_LOOKS`), so every setting looks apart."""
    first = frame.drop_duplicates("model").set_index("model")
    looks: dict = {}
    for m in hue_order(frame, "model"):
        look = style.model_look(m, first.at[m, "family"], first.at[m, "size"])
        same = sum(
            (v["color"], v["marker"]) == (look["color"], look["marker"]) for v in looks.values()
        )
        hollow, line = _SETTING_LOOKS[same % len(_SETTING_LOOKS)]
        if hollow:
            look["markerfacecolor"] = "white"
        look["linestyle"] = line or look["linestyle"]
        looks[m] = dict(label=str(m), **look)
    return looks


# the n-th setting of one model: (hollow markers, its line style; None: the family's)
_SETTING_LOOKS = tuple(
    (hollow, line) for line in (None, ":", "-.", (0, (1, 4))) for hollow in (False, True)
)


def line_styles(frame: pd.DataFrame, hue: str) -> dict:
    """``{value: dict(label, color, linestyle, marker)}`` in display order: by model,
    :func:`model_looks`; by anything else, a colour and a marker per value, solid lines."""
    if hue == "model":
        return model_looks(frame)
    values = hue_order(frame, hue)
    colors = style.value_colors(values)
    return {
        v: dict(
            label=label(v),
            color=colors[v],
            linestyle="-",
            marker=style.MARKERS[i % len(style.MARKERS)],
        )
        for i, v in enumerate(values)
    }


# Tick values tried on a log axis, densest first: multipliers of each power of ten (one
# multiplier other than 1 where a single power of ten falls in the range), then every n-th
# power of ten. The densest set whose labels do not touch (and that has at most
# _MAX_LABELS of them) wins; at least two labels when any set gives two.
_LOG_SUBS = (
    (1, 2, 3, 4, 5, 6, 7, 8, 9),
    (1, 2, 4, 6, 8),
    (1, 2, 3, 5),
    (1, 2, 5),
    (1, 3),
    (1,),
    (3,),
    (2,),
    (5,),
)
_DECADE_STEPS = (2, 3, 4, 5, 10, 20, 50)
_MAX_LABELS = 6


class RoundLogLocator(Locator):
    """Major ticks of a log axis at round values (1, 2, 5 x 10^k, ..., every n-th power of
    ten), chosen when the axis is drawn from its limits, its length and its labels' font:
    neighbouring labels never touch, whatever the span (matplotlib's own locator labels
    minor ticks on an axis of one to two decades, and "2x10^3 3x10^3 4x10^3" run
    together)."""

    def __call__(self):
        lo, hi = self.axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin, vmax))
        if not (lo > 0 and math.isfinite(hi)):
            return []
        axes = self.axis.axes
        box = axes.get_window_extent()
        vertical = self.axis.axis_name == "y"
        length = (box.height if vertical else box.width) * 72 / axes.figure.dpi
        size = self.axis.majorTicks[0].label1.get_fontsize()
        return round_log_ticks(lo, hi, length=length, fontsize=size, vertical=vertical)


def _candidates(lo: float, hi: float):
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for subs in _LOG_SUBS:
        yield [s * 10.0**e for e in range(first, last + 1) for s in subs]
    for step in _DECADE_STEPS:
        yield [10.0**e for e in range(first, last + 1) if e % step == 0]


def round_log_ticks(
    lo: float, hi: float, *, length: float, fontsize: float, vertical: bool = False
) -> list[float]:
    """Round tick values in ``[lo, hi]`` for a log axis ``length`` points long whose
    labels (:func:`power_of_ten`, ``fontsize`` points) keep a third of a character
    between them."""
    span = math.log10(hi / lo) or 1.0
    font = FontProperties(size=fontsize)

    def extent(value: float) -> float:
        if vertical:
            return 1.2 * fontsize
        return _TEXT.get_text_width_height_descent(power_of_ten(value), font, ismath=True)[0]

    fallback: list[float] = []
    for values in _candidates(lo, hi):
        ticks = [v for v in values if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
        if len(ticks) > _MAX_LABELS:
            continue
        at = [math.log10(v / lo) / span * length for v in ticks]
        apart = all(
            b - a >= (extent(u) + extent(w)) / 2 + fontsize / 3
            for a, b, u, w in zip(at, at[1:], ticks, ticks[1:], strict=False)
        )
        if apart and len(ticks) >= 2:
            return ticks
        if apart and ticks and not fallback:
            fallback = ticks
    return fallback


def log_x(ax, values) -> None:
    """A log x axis for positive ``values``, labelled at round values whose labels never
    touch (:class:`RoundLogLocator`); minor ticks unlabelled."""
    values = pd.Series(values, dtype=float).dropna()
    if values.empty or (values <= 0).any():
        return
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(RoundLogLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(power_of_ten))
    ax.xaxis.set_minor_formatter(NullFormatter())


def power_of_ten(value: float, _pos=None) -> str:
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
