"""Backtests of a scaling-law extrapolation: fit the early part of a curve, predict the
rest, and score the prediction and its interval (``vitscale fit --holdout``,
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

from .extrapolation import extrapolate
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
    fraction: float,
    metric: str,
    family: str | None = None,
) -> Split:
    """Hold out the points in the last ``fraction`` of the curve's log-x range."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    lx = np.log(x)
    fit = lx <= lx[0] + (1.0 - fraction) * (lx[-1] - lx[0])
    return Split(name, metric, family, x[fit], y[fit], x[~fit], y[~fit])


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
    history: pd.DataFrame, *, metrics: Sequence[str], fraction: float
) -> list[Split]:
    """Each cell's learning curve of each of ``metrics`` (a history frame,
    :func:`vitscale.record.cells.load_history`; accuracy in percent) against examples seen,
    cut at ``fraction``; one Split per cell and metric with any points."""
    out = []
    for metric in metrics:
        data = history.dropna(subset=[metric, EXAMPLES_SEEN])
        data = data[data[EXAMPLES_SEEN] > 0]
        for cell, curve in data.groupby("cell_id", sort=True):
            name = f"{curve['model'].iloc[0]} {cell}"
            out.append(
                split_at(
                    name,
                    curve[EXAMPLES_SEEN],
                    _error(curve[metric]),
                    fraction=fraction,
                    metric=metric,
                    family=curve["family"].iloc[0],
                )
            )
    return out


def frontier_splits(
    cells: pd.DataFrame, *, metric: str, x: str, by: str | None, fraction: float
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
        out.append(
            split_at(
                str(name),
                front[x],
                _error(front[metric]),
                fraction=fraction,
                metric=metric,
                family=family,
            )
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
    it = splits
    if progress:
        from tqdm import tqdm

        it = tqdm(splits, desc=estimator, unit="curve", leave=False)
    scores, failures = [], {}
    for split in it:
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
