"""The saturating power law of Zhai et al. 2021 ("Scaling Vision Transformers", Sec. 2):

    E = a (C + d)^(-b) + c

with E the error (1 - accuracy), C the pre-training compute (or data size), c the error
no amount of compute removes, b the scaling exponent and d the compute below which the
law flattens (it keeps the curve finite as C -> 0). Zhai et al. fit it to the
compute-accuracy *Pareto frontier*: the best accuracy each budget bought
(:mod:`analysis.frontier`).

Fitting (:func:`fit_power_law`):

- residuals in log space, ``log E_fit - log E``, so a point at 10% error and one at 1%
  weigh alike, with a robust loss (``soft_l1``: quadratic up to ``f_scale``, about a 5%
  relative error, linear beyond) so one bad run cannot drag the curve;
- compute is scaled by its geometric mean before fitting (the optimiser then sees numbers
  near 1 whether C is 1e-6 or 1e3 exaFLOPs) and the parameters are scaled back;
- several starting points (a grid over b, c and d), keeping the lowest cost;
- bootstrap intervals: the points are resampled with replacement and refitted, each
  refit starting from the full-data fit; resamples with fewer distinct C than the law
  has parameters are drawn again (they cannot determine it). With only four distinct
  points every resample is the data again, so no interval is given (NaN). Intervals are
  percentiles of the refits; the same refits give the extrapolation band of
  :func:`plot_fit`.

That band is a band for the law's parameters: it leaves out model error and the noise of a
new measurement, and covered 28% of the held-out points of the JFT learning-curve benchmark.
To *predict* a curve past its data, with a law of the next observation (its median,
intervals and density), use :func:`extrapolate` (:mod:`analysis.extrapolation`, re-exported
here).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from .extrapolation import extrapolate
from .frontier import pareto_frontier

__all__ = [
    "PARAMS",
    "PowerLaw",
    "PowerLawFit",
    "extrapolate",
    "fit_frontier",
    "fit_groups",
    "fit_power_law",
    "plot_fit",
]

PARAMS = ("a", "b", "c", "d")
_MIN_DISTINCT = len(PARAMS)
# A parameter whose bootstrap interval spans more than this factor is not determined by
# the points (a and d trade off when a frontier shows no bend: ResNet on Table 6 gave
# a = 0.83 [0.17, 2867]); its interval is said to be so rather than printed as a range.
UNDETERMINED_SPAN = 10.0
# What the printed fit's lines mean, one line each (vitscale fit prints them once).
LEGEND = (
    "E: the error, 1 - accuracy/100; x: the cost axis (--x)",
    "b: the scaling exponent, how fast the error falls with x",
    "c: the error no amount of x removes (100 (1 - c): the saturating accuracy)",
    "a, d: the law's scale and the x below which it flattens (they trade off against each other)",
    "[lo, hi]: the parameter's interval over bootstrap refits of the frontier: the law's "
    "uncertainty, not a prediction's (vitscale predict --at X gives those)",
    f"not determined: the refits spread it over more than {UNDETERMINED_SPAN:g}x: these points "
    "do not pin it down",
)
# Evaluations per start: a good start converges in ~30-80; the rest are cut short (the
# best start wins anyway), which bounds the time of a bootstrap.
_MAX_NFEV = 150


@dataclass(frozen=True)
class PowerLaw:
    """E(C) = a (C + d)^(-b) + c, with E a fraction and C in the units it was fitted in."""

    a: float
    b: float
    c: float
    d: float

    def error(self, x: np.ndarray | float) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return self.a * (x + self.d) ** (-self.b) + self.c

    def accuracy(self, x: np.ndarray | float) -> np.ndarray:
        """Predicted accuracy in percent."""
        return 100.0 * (1.0 - self.error(x))

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.a, self.b, self.c, self.d)


@dataclass(frozen=True)
class PowerLawFit:
    """A fitted law, its bootstrap refits and percentile intervals.

    ``samples`` has one row (a, b, c, d) per successful bootstrap refit.
    """

    law: PowerLaw
    x: str
    metric: str
    num_points: int
    level: float
    samples: np.ndarray = field(repr=False)
    x_range: tuple[float, float] = (math.nan, math.nan)

    @property
    def intervals(self) -> dict[str, tuple[float, float]]:
        """Percentile bootstrap interval of each parameter (NaN without refits)."""
        if len(self.samples) == 0:
            return {p: (math.nan, math.nan) for p in PARAMS}
        lo, hi = np.percentile(self.samples, [50 * (1 - self.level), 50 * (1 + self.level)], 0)
        return {p: (float(lo[i]), float(hi[i])) for i, p in enumerate(PARAMS)}

    @property
    def determined(self) -> dict[str, bool]:
        """Whether each parameter's interval is a range worth reading: there are refits and
        they span at most :data:`UNDETERMINED_SPAN` (a positive parameter's factor)."""
        return {
            p: bool(
                lo == hi == 0 or (math.isfinite(lo) and lo > 0 and hi / lo <= UNDETERMINED_SPAN)
            )
            for p, (lo, hi) in self.intervals.items()
        }

    def band(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise interval of the predicted accuracy (percent) over the bootstrap refits."""
        x = np.asarray(x, dtype=float)
        if len(self.samples) == 0:
            acc = self.law.accuracy(x)
            return acc, acc
        a, b, c, d = (self.samples[:, [i]] for i in range(4))
        acc = 100.0 * (1.0 - (a * (x[None, :] + d) ** (-b) + c))
        q = [50 * (1 - self.level), 50 * (1 + self.level)]
        lo, hi = np.percentile(acc, q, axis=0)
        return lo, hi

    def as_dict(self) -> dict:
        return {
            "x": self.x,
            "metric": self.metric,
            "num_points": self.num_points,
            "bootstrap": len(self.samples),
            "level": self.level,
            "x_range": list(self.x_range),
            **{p: getattr(self.law, p) for p in PARAMS},
            "intervals": {p: list(v) for p, v in self.intervals.items()},
            "determined": self.determined,
        }

    def __str__(self) -> str:
        pct = f"{100 * self.level:.0f}%"
        how = (
            f"{pct} intervals from {len(self.samples)} bootstrap refits"
            if len(self.samples)
            else "no intervals: too few distinct points to resample"
        )
        lines = [
            f"E = a ({self.x} + d)^(-b) + c, E = 1 - {self.metric}/100",
            f"fitted to {self.num_points} frontier points, x in "
            f"[{self.x_range[0]:.4g}, {self.x_range[1]:.4g}]; {how}",
        ]
        determined = self.determined
        for p, (lo, hi) in self.intervals.items():
            value = f"  {p} = {getattr(self.law, p):<11.4g}"
            if not len(self.samples):
                lines.append(value.rstrip())
            elif determined[p]:
                lines.append(f"{value} [{lo:.4g}, {hi:.4g}]")
            else:
                lines.append(f"{value} not determined (refits from {lo:.2g} to {hi:.2g})")
        lines.append(f"  saturating accuracy 100 (1 - c) = {100 * (1 - self.law.c):.2f}%")
        return "\n".join(lines)


def _residuals(theta: np.ndarray, x: np.ndarray, log_err: np.ndarray) -> np.ndarray:
    log_a, b, c, d = theta
    pred = np.exp(log_a) * (x + d) ** (-b) + c
    return np.log(pred) - log_err


def _jacobian(theta: np.ndarray, x: np.ndarray, log_err: np.ndarray) -> np.ndarray:
    log_a, b, c, d = theta
    power = np.exp(log_a) * (x + d) ** (-b)
    pred = power + c
    cols = (power, -power * np.log(x + d), np.ones_like(x), -b * power / (x + d))
    return np.stack(cols, axis=1) / pred[:, None]


def _starts(err: np.ndarray) -> list[np.ndarray]:
    """A grid of starting points in the scaled units (x near 1)."""
    med, low = float(np.median(err)), float(err.min())
    starts = []
    for b, c_frac, d in itertools.product((0.1, 0.3, 1.0), (0.0, 0.9), (0.0, 1.0)):
        c = c_frac * low
        a = max(med - c, 1e-3 * med) * (1.0 + d) ** b  # passes near (x=1, median error)
        starts.append(np.array([math.log(a), b, c, d]))
    return starts


def _fit_scaled(
    x: np.ndarray, err: np.ndarray, starts: Sequence[np.ndarray], f_scale: float
) -> np.ndarray | None:
    log_err = np.log(err)
    upper_c = float(err.max())
    lower = np.array([-50.0, 1e-4, 0.0, 0.0])
    upper = np.array([50.0, 10.0, upper_c, 1e6])
    best, best_cost = None, math.inf
    for start in starts:
        start = np.clip(start, lower, upper - 1e-12)
        try:
            sol = least_squares(
                _residuals,
                start,
                jac=_jacobian,
                args=(x, log_err),
                bounds=(lower, upper),
                loss="soft_l1",
                f_scale=f_scale,
                method="trf",
                max_nfev=_MAX_NFEV,
            )
        except (ValueError, FloatingPointError):
            continue
        if np.isfinite(sol.cost) and sol.cost < best_cost:
            best, best_cost = sol.x, sol.cost
    return best


def _unscale(theta: np.ndarray, scale: float) -> PowerLaw:
    log_a, b, c, d = (float(v) for v in theta)
    return PowerLaw(a=math.exp(log_a) * scale**b, b=b, c=c, d=d * scale)


def fit_power_law(
    x: Sequence[float],
    error: Sequence[float],
    *,
    bootstrap: int = 200,
    level: float = 0.95,
    seed: int = 0,
    f_scale: float = 0.05,
    progress: bool = False,
) -> tuple[PowerLaw, np.ndarray]:
    """Fit E = a (x + d)^(-b) + c; returns the law and its bootstrap refits (n x 4).

    ``error`` is a fraction in (0, 1]. Raises ``ValueError`` for fewer than four distinct
    x values, non-positive x or errors outside (0, 1].
    """
    x = np.asarray(x, dtype=float)
    err = np.asarray(error, dtype=float)
    if x.shape != err.shape or x.ndim != 1:
        raise ValueError(f"x and error must be 1-D and equally long, got {x.shape}, {err.shape}")
    if np.isnan(x).any() or np.isnan(err).any():
        raise ValueError("x and error must not contain NaN")
    if (x <= 0).any():
        raise ValueError(f"x must be positive (compute or examples), got min {x.min():g}")
    if ((err <= 0) | (err > 1)).any():
        raise ValueError(f"error must lie in (0, 1], got range [{err.min():g}, {err.max():g}]")
    if len(np.unique(x)) < _MIN_DISTINCT:
        raise ValueError(
            f"need at least {_MIN_DISTINCT} distinct x values to fit the 4-parameter law, "
            f"got {len(np.unique(x))}"
        )
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    scale = float(np.exp(np.log(x).mean()))
    xs = x / scale
    theta = _fit_scaled(xs, err, _starts(err), f_scale)
    if theta is None:
        raise ValueError("the power-law fit failed from every starting point")
    law = _unscale(theta, scale)

    rng = np.random.default_rng(seed)
    samples = []
    if len(np.unique(x)) <= _MIN_DISTINCT:
        bootstrap = 0  # every admissible resample is a permutation of the data
    attempts = 0
    it = range(bootstrap)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="bootstrap", unit="fit", leave=False)
    for _ in it:
        while attempts < 20 * max(bootstrap, 1):
            attempts += 1
            idx = rng.integers(0, len(x), len(x))
            if len(np.unique(xs[idx])) >= _MIN_DISTINCT:
                break
        else:
            break
        sol = _fit_scaled(xs[idx], err[idx], [theta], f_scale)
        if sol is not None:
            samples.append(_unscale(sol, scale).as_tuple())
    return law, np.asarray(samples, dtype=float).reshape(-1, 4)


def fit_frontier(
    frame: pd.DataFrame,
    *,
    metric: str,
    x: str = "exaflops",
    bootstrap: int = 200,
    level: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> PowerLawFit:
    """Fit the law to the Pareto frontier of ``frame`` (x = cost, metric = accuracy in %)."""
    for col in (x, metric):
        if col not in frame.columns:
            raise ValueError(f"no column {col!r} in the results; columns: {list(frame.columns)}")
    data = frame[[x, metric]].dropna()
    data = data[data[x] > 0]
    front = data.iloc[pareto_frontier(data[x].to_numpy(float), data[metric].to_numpy(float))]
    cost = front[x].to_numpy(float)
    err = 1.0 - front[metric].to_numpy(float) / 100.0
    law, samples = fit_power_law(
        cost, err, bootstrap=bootstrap, level=level, seed=seed, progress=progress
    )
    return PowerLawFit(
        law=law,
        x=x,
        metric=metric,
        num_points=len(front),
        level=level,
        samples=samples,
        x_range=(float(cost.min()), float(cost.max())),
    )


def plot_fit(ax, fit: PowerLawFit, *, color: str = "0.2", extrapolate: float = 10.0, band=True):
    """Draw the fitted accuracy curve and its bootstrap band, extended ``extrapolate``-fold
    past the largest fitted x (dashed there: an extrapolation). Returns the artists."""
    lo, hi = fit.x_range
    inside = np.geomspace(lo, hi, 100)
    beyond = np.geomspace(hi, hi * extrapolate, 50) if extrapolate > 1 else inside[-1:]
    artists = [
        ax.plot(inside, fit.law.accuracy(inside), color=color, lw=1.0, gid="fit")[0],
        ax.plot(beyond, fit.law.accuracy(beyond), color=color, lw=1.0, ls=":", gid="fit")[0],
    ]
    if band and len(fit.samples):
        grid = np.concatenate([inside, beyond[1:]])
        b_lo, b_hi = fit.band(grid)
        artists.append(
            ax.fill_between(grid, b_lo, b_hi, color=color, alpha=0.15, lw=0, gid="fit-band")
        )
    return artists


def fit_groups(
    frame: pd.DataFrame,
    *,
    metric: str | None = None,
    shots: int | None = None,
    x: str = "exaflops",
    by: str | None = "family",
    bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> tuple[str, dict[str, PowerLawFit], dict[str, str]]:
    """``vitscale fit``: the law fitted to the frontier of each ``by`` group of finished
    cells (``by=None``: all together). ``metric`` None: the average of the transfer metrics
    found (or the one found); an ``average-...`` name is computed from its parts.

    Returns ``(metric, fits, failures)``: the fitted groups and, for each group that could
    not be fitted, why. Raises :class:`~vitscale.errors.UserError` for a metric or column
    that is not there."""
    from vitscale.errors import UserError

    from .metrics import resolve_metric

    frame, metric = resolve_metric(frame, metric, shots=shots)
    if by is not None and by not in frame.columns:
        raise UserError(f"--by {by!r}: no such column (e.g. family, model, size, grid)")
    groups = [("all", frame)] if by is None else list(frame.groupby(by, sort=True))
    fits: dict[str, PowerLawFit] = {}
    failures: dict[str, str] = {}
    kw = dict(metric=metric, x=x, bootstrap=bootstrap, level=level, seed=seed, progress=progress)
    for name, group in groups:
        try:
            fits[str(name)] = fit_frontier(group, **kw)
        except ValueError as e:
            failures[str(name)] = str(e)
    return metric, fits, failures
