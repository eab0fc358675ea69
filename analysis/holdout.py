"""Backtests of a scaling-law extrapolation: fit the early part of a curve, predict the
rest, and score the prediction and its interval (``vitscale backtest``,
benchmarks/extrapolation.py).

A :class:`Split` is one curve cut in two: the published split of a reference curve
(:func:`analysis.reference.jft.splits`), or the last ``fraction`` of a curve's log-x range
(:func:`split_at`), for a run's learning curve (:func:`history_splits`: examples seen ->
few-shot error, from metrics.jsonl) or a group's compute frontier (:func:`frontier_splits`);
:func:`inner_split` cuts a split's fit rows alone (a backtest that reads no held-out row,
on which benchmarks/extrapolation.py selects extrapolate's design). Scores, as Alabdulmohsin et al. (NeurIPS 2022, Sec. 5) score their benchmark:

- ``rmse``: the root mean square of log(predicted error) - log(observed error) over the
  held-out points, a relative error that weighs a 10% and a 1% error alike;
- ``coverage``: the fraction of held-out points inside the ``level`` interval (it should be
  close to ``level``); ``width``: the interval's mean width in log error.

Estimators (:data:`ESTIMATORS`): ``extrapolate`` (:func:`analysis.scaling.extrapolate`) and
``power-law`` (:func:`analysis.scaling.fit_frontier`, the law of Zhai et al. 2021 fitted to
the curve's own frontier, its bootstrap band as the interval: what ``vitscale fit`` did
before extrapolate).

The same curves uncut (``fraction=None``) are what ``vitscale predict --at X`` reads:
:func:`predictions` of each curve at new x, with extrapolate's interval. Every table here
has a legend, one line per column, and every interval printed goes with
:func:`calibration_note` (what such an interval covered on the JFT benchmark, out of fold).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from vitscale.record import EXAMPLES_SEEN

from .calibration import JFT_OUT_OF_FOLD
from .extrapolation import MIN_DISTINCT, extrapolate, predictive
from .frontier import frontier_frame

ESTIMATORS = ("extrapolate", "power-law")


@dataclass(frozen=True, eq=False)
class Split:
    """One curve: ``name`` (a model, a cell, a frontier's group), the ``metric`` whose error
    it is, its ``family``, the points fitted and the points held out (errors in (0, 1])."""

    name: str
    metric: str
    family: str | None
    x_fit: np.ndarray
    y_fit: np.ndarray
    x_held: np.ndarray
    y_held: np.ndarray


@dataclass(frozen=True)
class Score:
    """How an estimator did on one :class:`Split` (module docstring); ``reach``: the
    farthest held-out x over the last fitted x."""

    name: str
    metric: str
    family: str | None
    estimator: str
    level: float
    n_fit: int
    n_held: int
    reach: float
    rmse: float
    coverage: float
    width: float
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


def log_rmse(pred: ArrayLike, actual: ArrayLike) -> float:
    """sqrt(mean((log pred - log actual)^2)); NaN when a prediction is not a positive number."""
    pred, actual = np.asarray(pred, dtype=float), np.asarray(actual, dtype=float)
    if not np.isfinite(pred).all() or (pred <= 0).any():
        return math.nan
    return float(np.sqrt(np.mean((np.log(pred) - np.log(actual)) ** 2)))


def coverage(actual: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> float:
    """The fraction of ``actual`` inside [lower, upper]."""
    actual = np.asarray(actual, dtype=float)
    return float(np.mean((actual >= np.asarray(lower)) & (actual <= np.asarray(upper))))


def split_at(
    name: str,
    x: ArrayLike,
    y: ArrayLike,
    *,
    fraction: float | None,
    metric: str,
    family: str | None = None,
) -> Split:
    """Hold out the points in the last ``fraction`` of the curve's log-x range (None: none,
    the whole curve is fitted: what a prediction past it reads)."""
    if fraction is not None and not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    lx = np.log(x)
    fit = lx <= lx[0] + (1.0 - (fraction or 0.0)) * (lx[-1] - lx[0])
    return Split(name, metric, family, x[fit], y[fit], x[~fit], y[~fit])


def too_short(splits: Sequence[Split]) -> list[Split]:
    """The splits whose fitted part has fewer distinct x than extrapolate (and the power
    law) need: a design that cannot support a fit, said once by the caller."""
    return [s for s in splits if len(np.unique(s.x_fit)) < MIN_DISTINCT]


def evaluations_needed(fraction: float | None) -> int:
    """Evenly spaced evaluations (at k x eval_every, k = 1..n) a learning curve needs so
    that :data:`~analysis.extrapolation.MIN_DISTINCT` of them are fitted: those at k <=
    n^(1 - fraction) (:func:`split_at`), all n without a fraction."""
    if fraction is None:
        return MIN_DISTINCT
    n = MIN_DISTINCT + 1
    while math.floor(n ** (1.0 - fraction) + 1e-9) < MIN_DISTINCT:
        n += 1
    return n


def inner_split(
    split: Split, *, before: float = 1.0, reach: float = 2.0, min_fit: int = 5
) -> Split | None:
    """A backtest inside ``split``'s fit rows, never reading its held-out rows: the fit rows
    with x <= x_last / ``before`` (x_last: the last fitted x), cut so that the last
    ``reach``-fold of them is held out (benchmarks/extrapolation.py selects its design on
    these); None when fewer than ``min_fit`` points precede the cut or none follow it."""
    x, y = split.x_fit, split.y_fit
    end = x.max() / before
    fit, held = x <= end / reach, (x > end / reach) & (x <= end)
    if len(np.unique(x[fit])) < min_fit or not held.any():
        return None
    return Split(split.name, split.metric, split.family, x[fit], y[fit], x[held], y[held])


def predict(
    split: Split, *, estimator: str = "extrapolate", level: float = 0.95, bootstrap: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pred, lower, upper) at the held-out x; ``ValueError`` when the fit part cannot be
    fitted or the estimator is unknown."""
    if estimator == "extrapolate":
        return extrapolate(split.x_fit, split.y_fit, split.x_held, level=level)
    if estimator == "power-law":
        from .scaling import fit_frontier

        frame = pd.DataFrame({"x": split.x_fit, "accuracy": 100.0 * (1.0 - split.y_fit)})
        fit = fit_frontier(frame, metric="accuracy", x="x", bootstrap=bootstrap, level=level)
        acc_lo, acc_hi = fit.band(split.x_held)
        return fit.law.error(split.x_held), 1.0 - acc_hi / 100.0, 1.0 - acc_lo / 100.0
    raise ValueError(f"unknown estimator {estimator!r}; valid: {', '.join(ESTIMATORS)}")


def score(
    split: Split, *, estimator: str = "extrapolate", level: float = 0.95, bootstrap: int = 200
) -> Score:
    """Fit ``split``'s early part, predict its held-out part, score both (module docstring)."""
    if len(split.x_held) == 0:
        raise ValueError(f"{split.name} {split.metric}: no held-out points")
    start = time.perf_counter()
    pred, lower, upper = predict(split, estimator=estimator, level=level, bootstrap=bootstrap)
    seconds = time.perf_counter() - start
    return Score(
        name=split.name,
        metric=split.metric,
        family=split.family,
        estimator=estimator,
        level=level,
        n_fit=len(split.x_fit),
        n_held=len(split.x_held),
        reach=float(split.x_held.max() / split.x_fit.max()),
        rmse=log_rmse(pred, split.y_held),
        coverage=coverage(split.y_held, lower, upper),
        width=float(np.mean(np.log(upper) - np.log(lower))),
        seconds=seconds,
    )


def summarise(scores: Sequence[Score]) -> dict:
    """Mean and median RMSE (also per family), coverage averaged per curve, its median, and
    pooled over all held-out points, and the mean width."""
    if not scores:
        return {"curves": 0}
    rmse = np.array([s.rmse for s in scores])
    cov = np.array([s.coverage for s in scores])
    n = np.array([s.n_held for s in scores])
    families = sorted({s.family for s in scores if s.family is not None})
    return {
        "curves": len(scores),
        "rmse_mean": float(np.nanmean(rmse)),
        "rmse_median": float(np.nanmedian(rmse)),
        "rmse_by_family": {
            f: float(np.nanmean([s.rmse for s in scores if s.family == f])) for f in families
        },
        "coverage_mean": float(cov.mean()),
        "coverage_median": float(np.median(cov)),
        "coverage_pooled": float(np.sum(cov * n) / n.sum()),
        "width_mean": float(np.mean([s.width for s in scores])),
        "level": scores[0].level,
    }


def _error(accuracy: pd.Series) -> np.ndarray:
    return 1.0 - accuracy.to_numpy(float) / 100.0


def history_splits(
    history: pd.DataFrame, *, metrics: Sequence[str], fraction: float | None
) -> list[Split]:
    """Each cell's learning curve of each of ``metrics`` (a history frame,
    :func:`vitscale.record.cells.load_history`; accuracy in percent) against examples seen,
    cut at ``fraction``; one Split per cell and metric with any points."""
    out = []
    for metric in metrics:
        data = history.dropna(subset=[metric, EXAMPLES_SEEN])
        data = data[data[EXAMPLES_SEEN] > 0]
        for cell, curve in data.groupby("cell_id", sort=True):
            name, family = f"{curve['model'].iloc[0]} {cell}", curve["family"].iloc[0]
            x, y = curve[EXAMPLES_SEEN], _error(curve[metric])
            out.append(split_at(name, x, y, fraction=fraction, metric=metric, family=family))
    return out


def frontier_splits(
    cells: pd.DataFrame, *, metric: str, x: str, by: str | None, fraction: float | None
) -> list[Split]:
    """The compute (or data) frontier of each ``by`` group of ``cells`` (finished cells,
    accuracy in percent), cut at ``fraction``."""
    data = cells.dropna(subset=[x, metric])
    data = data[data[x] > 0]
    groups = [("all", data)] if by is None else list(data.groupby(by, sort=True))
    out = []
    for name, group in groups:
        front = frontier_frame(group, x=x, y=metric)
        family = str(name) if by == "family" else None
        y = _error(front[metric])
        out.append(
            split_at(str(name), front[x], y, fraction=fraction, metric=metric, family=family)
        )
    return out


def evaluate(
    splits: Sequence[Split],
    *,
    estimator: str = "extrapolate",
    level: float = 0.95,
    bootstrap: int = 200,
    progress: bool = False,
) -> tuple[list[Score], dict[str, str]]:
    """:func:`score` each split; those that cannot be fitted (too few points, an error of 0)
    are returned apart, ``{"<name> <metric>": why}``."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; valid: {', '.join(ESTIMATORS)}")
    if progress:
        from tqdm import tqdm

        splits = tqdm(splits, desc=estimator, unit="curve", leave=False)
    scores, failures = [], {}
    for split in splits:
        try:
            scores.append(score(split, estimator=estimator, level=level, bootstrap=bootstrap))
        except ValueError as e:
            failures[f"{split.name} {split.metric}"] = str(e)
    return scores, failures


def table(scores: Sequence[Score]) -> pd.DataFrame:
    """One row per curve: points fitted and held out, reach, RMSE, coverage, width."""
    return pd.DataFrame(
        {
            "curve": [s.name for s in scores],
            "metric": [s.metric for s in scores],
            "fit": [s.n_fit for s in scores],
            "held out": [s.n_held for s in scores],
            "reach": [round(s.reach, 2) for s in scores],
            "RMSE (log)": [round(s.rmse, 4) for s in scores],
            "coverage": [round(s.coverage, 3) for s in scores],
            "width (log)": [round(s.width, 3) for s in scores],
        }
    )


def legend(*, level: float, fraction: float | None) -> list[str]:
    """What :func:`table`'s columns mean, one line each."""
    cut = "its published split" if fraction is None else f"the last {fraction:g} of its log-x range"
    return [
        f"fit, held out: the curve's points fitted, and those predicted ({cut})",
        "reach: the farthest held-out x over the last fitted x (2: predicted twice as far as "
        "the data)",
        "RMSE (log): root mean square of log(predicted) - log(observed) error over the "
        "held-out points (0.05: about 5% off)",
        f"coverage: the share of held-out points inside the {100 * level:g}% interval (near "
        f"{level:g} if the interval is right)",
        "width (log): the interval's mean width, in log error",
    ]


def calibration_note(level: float) -> str:
    """One line beside any interval of ``extrapolate``: what such an interval covered of
    the JFT curves' held-out points, out of fold
    (:data:`~analysis.calibration.JFT_OUT_OF_FOLD`)."""
    near = min(JFT_OUT_OF_FOLD, key=lambda v: abs(v - level))
    return (
        f"calibration: learnt on the 72 JFT learning curves; learnt without a dataset, a nominal "
        f"{100 * near:g}% interval covered {100 * JFT_OUT_OF_FOLD[near]:.0f}% of that dataset's "
        'held-out points (docs/extrapolation.md, "Extrapolating learning curves")'
    )


@dataclass(frozen=True)
class Prediction:
    """A curve's predicted error at ``x`` past (or inside) its data: extrapolate's median
    and central ``level`` interval; ``reach``: x over the curve's largest x."""

    name: str
    metric: str
    family: str | None
    x: float
    error: float
    lower: float
    upper: float
    level: float
    reach: float
    n_fit: int

    def as_dict(self) -> dict:
        return asdict(self) | {"accuracy": 100.0 * (1.0 - self.error)}


def predictions(
    splits: Sequence[Split], x_new: Sequence[float], *, level: float = 0.95
) -> tuple[list[Prediction], dict[str, str]]:
    """Each curve's (its fitted part's) predicted error at every ``x_new``: the median and
    central ``level`` interval of :func:`~analysis.extrapolation.predictive`'s law; curves
    that cannot be fitted are returned apart, ``{"<name> <metric>": why}``."""
    out, failures = [], {}
    for s in splits:
        try:
            law = predictive(s.x_fit, s.y_fit, np.asarray(x_new, dtype=float))
            pred, (lower, upper) = law.median, law.interval(level)
        except ValueError as e:
            failures[f"{s.name} {s.metric}"] = str(e)
            continue
        last = float(s.x_fit.max())
        for x, p, lo, hi in zip(x_new, pred, lower, upper, strict=True):
            row = (float(x), float(p), float(lo), float(hi), level, float(x) / last)
            out.append(Prediction(s.name, s.metric, s.family, *row, len(s.x_fit)))
    return out, failures


def prediction_table(rows: Sequence[Prediction]) -> pd.DataFrame:
    """One row per curve and x: the predicted error, its interval, accuracy and reach; the
    metric column only where the curves are of more than one (else the legend names it)."""
    metrics = [r.metric for r in rows]
    return pd.DataFrame(
        {
            "curve": [r.name for r in rows],
            **({"metric": metrics} if len(set(metrics)) > 1 else {}),
            "x": [f"{r.x:.4g}" for r in rows],
            "error": [round(r.error, 4) for r in rows],
            "lower": [round(r.lower, 4) for r in rows],
            "upper": [round(r.upper, 4) for r in rows],
            "accuracy": [round(100.0 * (1.0 - r.error), 2) for r in rows],
            "reach": [round(r.reach, 2) for r in rows],
        }
    )


def prediction_legend(rows: Sequence[Prediction], *, level: float, x: str) -> list[str]:
    """What :func:`prediction_table`'s columns mean, one line each."""
    metrics = list(dict.fromkeys(r.metric for r in rows))
    return [
        f"metric: {metrics[0]}, every row"
        if len(metrics) == 1
        else "metric: the accuracy whose learning curve is predicted",
        f"x: where the error is predicted (--at), in {x}",
        "error: the predicted error, 1 - accuracy/100 (the median of extrapolate's law)",
        f"lower, upper: the central {100 * level:g}% interval of an error observed at x",
        "accuracy: 100 (1 - error), in percent",
        "reach: x over the largest x fitted (1: inside the data; the JFT benchmark checked "
        "about 2: further is less tested)",
    ]


def summary_lines(summary: dict) -> list[str]:
    """The headline of :func:`summarise`, in words."""
    if not summary.get("curves"):
        return ["no curve could be fitted"]
    by_family = ", ".join(f"{f} {v:.4f}" for f, v in summary["rmse_by_family"].items())
    return [
        f"{summary['curves']} curves: RMSE of log error mean {summary['rmse_mean']:.4f}, "
        f"median {summary['rmse_median']:.4f}" + (f" ({by_family})" if by_family else ""),
        f"{100 * summary['level']:.0f}% interval: coverage mean {summary['coverage_mean']:.3f}, "
        f"median {summary['coverage_median']:.3f}, pooled {summary['coverage_pooled']:.3f}; "
        f"mean width {summary['width_mean']:.3f} (log error)",
    ]
