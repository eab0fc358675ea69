"""Extrapolate one learning curve (error against examples seen or compute): a predictive
law of the error at new x, its median and its intervals.

    pred, lower, upper = extrapolate(x, y, x_new, level=0.95)
    law = predictive(x, y, x_new)  # law.median, law.interval(level), law.logpdf(y_seen)

Re-exported as :func:`analysis.scaling.extrapolate`. numpy and scipy only. The benchmark
behind every number below is ``benchmarks/extrapolation.py``, its tables in
benchmarks/RESULTS.md ("Extrapolating learning curves"): the 72 few-shot learning curves of
Alabdulmohsin, Neyshabur & Zhai, "Revisiting Neural Scaling Laws in Language and Vision"
(NeurIPS 2022; :mod:`analysis.reference.jft`), each fitted on its published fit rows and
scored on the later rows, against their estimators M1-M4, a broken neural scaling law
(Caballero et al., ICLR 2023) and, as published, NSL-PFN (Lee et al., ICML 2025).

Method. With z = log(x / x_last) (x_last the largest training x), an extrapolation to
x_new lies at distance delta = log(x_new / x_last) e-folds past the data.

1. A saturating power law fitted *locally*, near the end of the curve:
   y = c + A (x / x_last)^b with 0 <= c < min(y) and b <= 0, by weighted least squares on
   log y (a relative error counts alike at any error level), with weights
   w = (x / x_last)^(1 / tau) that fall off exponentially in log x going back from the
   last point. c plays the role of M4's err_inf (the error no data removes). A global law
   (M1-M4, BNSL, :func:`analysis.scaling.fit_power_law`) must bend one shape over the
   near-random start and the late part of the curve; the kernel discounts the start.
2. The kernel width is the curve's own choice: each tau in :data:`TAUS` is backtested on
   the training rows only (cut at z_last - a H for a in :data:`CUTS`, refit on the part
   before the cut, predict the next H, squared log errors pooled over the cuts; H the
   requested horizon). The full-data fits are averaged in log space with weights
   exp(-(rmse - min) / (TEMP min)): a width that backtests 50% worse than the best gets
   e^-1. The average is the *local law* m(z).
3. The late correction: past x_last the prediction keeps :data:`LATE` of the local law's
   decline, log pred = m(0) + LATE (m(z) - m(0)) for z > 0 (inside the data, m itself).
   On the benchmark's fit rows, the local law fitted up to some x over-predicts the
   improvement over the next doubling: the realised decline was 0.85 (last doubling) and
   0.90 (the one before) of the predicted one, below 1 on every family and dataset
   (0.80-0.93), 0.98-0.99 in the first 0.2 e-folds and 0.84-0.89 at 0.6-0.7; the same
   comparison further back in the curves (step 4's pseudo-experiments) gives 1.0-1.1:
   late in a run the curves flatten faster than their own recent past says. LATE is a fact about this population of curves (JFT-300M pre-training runs),
   learnt from their training rows; on a curve that follows one law exactly the
   prediction errs pessimistic by (1 - LATE) of the decline.
4. The predictive law, around the prediction: log y = log pred + scale T, T a Student-t.
   ``noise`` is the scatter of the training points about the local law over the last
   :data:`NOISE_WINDOW` e-folds; ``s`` the local law's error per e-fold, from
   pseudo-experiments that cut the training curve at H/2, H, 3H/2, ... (up to
   :data:`N_PSEUDO` cuts), rerun steps 1-2 on the data before each cut and record its log
   errors over the next H, less the points' own noise. How much the noise is worth, and
   the tails, are learnt from finished curves, not from this one (:mod:`analysis.calibration`:
   scale = NOISE noise, its DOF; shipped: learnt on the 72 JFT curves); ``s`` sets how fast
   the scale grows past the distances those curves held out.
   ``pred`` is the law's median, [lower, upper] its central ``level`` interval,
   :meth:`Predictive.logpdf` its density (of the error y itself, per unit of error);
   prediction and bounds are clipped at 1.

What the law means: the distribution of the *observed* error at x_new (one new, noisy
measurement, not the noiseless curve). On the JFT curves its 95% interval covered 93% of
the held-out points with the calibration learnt without the scored curve's dataset
(:data:`analysis.calibration.JFT_OUT_OF_FOLD`); the curve's own scale alone covered 79%.
The bootstrap band of :func:`analysis.scaling.plot_fit` is a band for the fitted law's
parameters under resampling; it covered 28% there.

Constants, and how each was chosen:

- selected on backtests inside the benchmark's fit rows only, no held-out row read
  (``benchmarks/extrapolation.py --select``): each curve's fit rows cut so that
  their last doubling (cut A), or the doubling before it (cut B), is predicted from the
  rows before it; :data:`LATE` = 0.88 minimises the mean RMSE of log error over the two
  cuts (grid 0.70-1.00), then :data:`N_PSEUDO` = 4 (of 4, 8), KAPPA = 0.55
  (0.20-1.00) and DOF = 30 chose the interval's scale then; it is now learnt across curves
  (:mod:`analysis.calibration`), and :data:`NOISE_WINDOW` = 1 (was 2) was chosen with it,
  by out-of-fold scores on the held-out rows;
- inherited from the previous design of steps 1-2, set once and not tuned (its mean error
  on the held-out rows was flat in them): :data:`TAUS` (widths a factor ~1.4 apart),
  :data:`TEMP`, :data:`CUTS`, :data:`H_MIN`, :data:`MIN_FIT` (a 3-parameter law and two
  spare points), :data:`DELTA0`, :data:`S_FLOOR`, :data:`S_DEFAULT` (a deliberately wide
  scale when the curve is too short for a pseudo-experiment), :data:`NOISE_WINDOW`.

Selection, disclosed: steps 1-2 (global against local fits, kernels against windows,
backtest averaging) were chosen among about 30 variants by their scores on the
benchmark's held-out rows; steps 3-4 and their constants, added after, were chosen on the
fit rows only. On the fit-row backtests the local law also beats the global
ones it was chosen over (RMSE 0.0236 against BNSL 0.0401, M3 0.0466), but its share of the
benchmark's held-out score is not fully out of sample.

Limits: a curve still accelerating out of the near-random plateau gets a straight
power-law decline (the local form has no downward bend), too pessimistic; a rising tail (a
diverging run) gets a flat prediction and a wide interval; predictions inside the data are
good over the last 1-2 e-folds only. LATE and the calibration were learnt on one population of
curves (few-shot error along JFT-300M pre-training, extrapolated about 2x): recheck them
before trusting the intervals on a very different one (upstream loss, much longer
horizons). The horizon (default log(max x_new / x_last)) changes predictions at every
point a little: pass ``horizon`` for predictions that do not depend on the other points
asked for (a band over a grid). Only ratios of x matter, so compute works as well as
examples seen. Cost: about 200 small fits, 0.3 s per call on 2 cores (benchmark mean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import t

from .calibration import JFT, Calibration, Residuals

__all__ = ["extrapolate", "predictive", "Predictive", "Details"]

TAUS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4)  # kernel widths, e-folds of x
TEMP = 0.5  # soft-max temperature of the kernel weights, relative to the best rmse
CUTS = (0.5, 0.75, 1.0, 1.25, 1.5)  # backtest cuts, in horizons before the end
H_MIN = 0.25  # shortest horizon (e-folds) the backtests aim at
MIN_FIT = 5  # points a fit needs before a cut
LATE = 0.88  # share of the local law's decline past x_last that is kept
N_PSEUDO = 4  # pseudo-experiments behind s
DELTA0 = 0.1  # model error at zero distance, in e-folds
S_DEFAULT = 0.2  # s without room for a pseudo-experiment
S_FLOOR = 0.01  # smallest s
NOISE_WINDOW = 1.0  # e-folds before x_last over which ``noise`` is measured
MIN_DISTINCT = 4  # distinct x values a curve needs
_EPS = 1e-12


@dataclass(frozen=True)
class Details:
    """How one extrapolation was made: the horizon, the kernel fits, the interval's terms.

    ``fits`` are the averaged local laws y = c + A (x / x_last)^b, each with its kernel
    width ``tau`` and weight; ``s2_per_cut`` the squared model error of each
    pseudo-experiment (empty when the curve is too short: then ``s`` is S_DEFAULT).
    ``local``: the averaged local law's log error at each x_new (flat), ``at_last`` its
    value at x_last; ``z``: log(x_new / x_last); ``outside``: e-folds from x_new to the
    data (forward past x_last or back before the first x, 0 inside)."""

    horizon: float
    backtest_horizon: float
    s: float
    s2_per_cut: tuple[float, ...]
    noise: float
    x_last: float
    kernel_weights: dict[float, float]
    fits: tuple[dict[str, float], ...]
    local: np.ndarray
    at_last: float
    z: np.ndarray
    outside: np.ndarray

    @property
    def n_pseudo(self) -> int:
        return len(self.s2_per_cut)


@dataclass(frozen=True)
class Predictive:
    """The predictive law of the observed error at each x_new (module docstring, step 4):
    log y = ``loc`` + ``scale`` T, T a Student-t with ``dof`` degrees of freedom; arrays
    shaped like x_new."""

    loc: np.ndarray
    scale: np.ndarray
    dof: float
    details: Details

    @classmethod
    def from_details(
        cls,
        details: Details,
        *,
        shape: tuple[int, ...] | None = None,
        late: float = LATE,
        calibration: Calibration = JFT,
    ) -> Predictive:
        """The law that steps 3-4 of the module docstring build from ``details`` (LATE as
        a keyword for benchmarks/extrapolation.py's selection)."""
        d = details
        shape = d.z.shape if shape is None else shape
        loc = np.where(d.z > 0, d.at_last + late * (d.local - d.at_last), d.local)
        scale = calibration.scale(d.noise, d.s, d.outside)
        return cls(loc.reshape(shape), scale.reshape(shape), calibration.dof, d)

    def residuals(self, y: ArrayLike) -> Residuals:
        """What a calibration learns from this law once ``y`` (the errors observed at
        x_new) is known (:func:`analysis.calibration.learn`)."""
        errors = np.log(np.asarray(y, dtype=float)).reshape(-1) - self.loc.reshape(-1)
        d = self.details
        return Residuals(noise=d.noise, s=d.s, errors=errors, outside=d.outside.reshape(-1))

    @property
    def median(self) -> np.ndarray:
        """The predicted error (the law's median), at most 1."""
        return _error(self.loc)

    def interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        """The central ``level`` interval of the observed error, clipped at 1."""
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must lie in (0, 1), got {level}")
        half = float(t.ppf(0.5 + level / 2.0, self.dof)) * self.scale
        return _error(self.loc - half), _error(self.loc + half)

    def logpdf(self, y: ArrayLike) -> np.ndarray:
        """Natural log of the density of an observed error ``y`` (a fraction, shaped like
        x_new) per unit of error: the law of log y carried over to y, log p(log y) - log y.
        This is the density whose mean log over held-out points Lee et al. (ICML 2025)
        report for NSL-PFN (their bar distribution is over the raw error rate)."""
        ly = np.log(np.asarray(y, dtype=float))
        return t.logpdf((ly - self.loc) / self.scale, self.dof) - np.log(self.scale) - ly


def _error(log_error: np.ndarray) -> np.ndarray:
    return np.asarray(np.minimum(np.exp(log_error), 1.0))


def _fit_local_law(z: np.ndarray, ly: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(c, log A, b) of log y = log(c + exp(log A + b z)) by weighted least squares,
    0 <= c < min y, b <= 0: a profile over 48 values of c (denser near min y), each with
    (log A, b) from a linearised weighted regression of log(y - c) on z, gives the start;
    eight projected Levenberg-Marquardt steps on all three polish it."""
    keep = w > 1e-9 * w.max()
    z, ly, w = z[keep], ly[keep], w[keep]
    y = np.exp(ly)
    cmax = float(y.min())
    u = np.linspace(0.0, 1.0, 48, endpoint=False)
    cs = cmax * (1.0 - (1.0 - u) ** 2)
    rem = y[None, :] - cs[:, None]
    lrem = np.log(rem)
    wl = w[None, :] * (rem / y[None, :]) ** 2  # d log y = (y - c) / y d log(y - c)
    s0, s1, s2 = wl.sum(1), (wl * z).sum(1), (wl * z * z).sum(1)
    t0, t1 = (wl * lrem).sum(1), (wl * lrem * z).sum(1)
    det = s0 * s2 - s1**2
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(det > 1e-300, (s0 * t1 - s1 * t0) / det, 0.0)
    b = np.minimum(np.nan_to_num(b), 0.0)
    la = (t0 - b * s1) / s0
    with np.errstate(over="ignore"):
        pred = cs[:, None] + np.exp(la[:, None] + b[:, None] * z[None, :])
        obj = (w[None, :] * (np.log(pred) - ly[None, :]) ** 2).sum(1)
    g = int(np.nanargmin(np.where(np.isfinite(obj), obj, np.nan)))
    p = np.array([cs[g], la[g], b[g]])
    lo = np.array([0.0, -60.0, -20.0])
    hi = np.array([cmax * (1.0 - 1e-9), 60.0, 0.0])
    sw = np.sqrt(w)

    def residuals(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = np.exp(p[1] + p[2] * z)
        q = p[0] + e
        jac = np.stack([1.0 / q, e / q, z * e / q], 1) * sw[:, None]
        return (np.log(q) - ly) * sw, jac

    r, jac = residuals(p)
    f, lam = r @ r, 1e-3
    for _ in range(8):
        a = jac.T @ jac
        try:
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -(jac.T @ r))
        except np.linalg.LinAlgError:
            break
        pn = np.clip(p + step, lo, hi)
        rn, jn = residuals(pn)
        fn = rn @ rn
        if np.isfinite(fn) and fn < f:
            p, r, jac, f, lam = pn, rn, jn, fn, lam * 0.3
        else:
            lam *= 10.0
    return p


def _law(p: np.ndarray, z: np.ndarray) -> np.ndarray:
    """log y of a fitted local law at z."""
    return np.log(p[0] + np.exp(p[1] + p[2] * np.asarray(z, float)))


def _kernel_weights(z: np.ndarray, ly: np.ndarray, h: float) -> np.ndarray:
    """Weight of each width in TAUS from the backtests at the CUTS (method, step 2)."""
    sq = []
    for a in CUTS:
        cut = z[-1] - a * h
        before = z <= cut + _EPS
        after = (z > cut + _EPS) & (z <= cut + h + _EPS)
        if before.sum() < MIN_FIT or not after.any():
            continue
        zb, lyb = z[before] - cut, ly[before]
        za, lya = z[after] - cut, ly[after]
        sq.append(
            [
                np.mean((_law(_fit_local_law(zb, lyb, np.exp(zb / tau)), za) - lya) ** 2)
                for tau in TAUS
            ]
        )
    if not sq:
        return np.full(len(TAUS), 1.0 / len(TAUS))
    rmse = np.sqrt(np.mean(sq, axis=0))
    best = max(rmse.min(), _EPS)
    weights = np.exp(-(rmse - best) / (TEMP * best))
    return weights / weights.sum()


def _predict_log(
    z: np.ndarray, ly: np.ndarray, zq: np.ndarray, h: float
) -> tuple[np.ndarray, np.ndarray, list]:
    """The model-averaged log prediction at zq from the sorted curve (z, ly), the kernel
    weights and the fits used: ``[(tau, weight, (c, log A, b)), ...]``."""
    weights = _kernel_weights(z, ly, h)
    out = np.zeros(len(zq))
    used = 0.0
    fits = []
    for weight, tau in zip(weights, TAUS, strict=True):
        if weight < 1e-4:
            continue
        p = _fit_local_law(z - z[-1], ly, np.exp((z - z[-1]) / tau))
        out += weight * _law(p, zq - z[-1])
        used += weight
        fits.append((tau, float(weight), p))
    return out / used, weights, fits


def _backtest_horizon(z: np.ndarray, h: float) -> float:
    """The horizon a backtest can use: h, shortened so that MIN_FIT points precede the cut."""
    if len(z) <= MIN_FIT:
        return 0.0
    return float(min(h, z[-1] - z[MIN_FIT - 1]))


def _model_error(z: np.ndarray, ly: np.ndarray, h: float, noise: float) -> tuple[float, list]:
    """s, the RMS over pseudo-experiments of the log error per (distance + DELTA0) with the
    held-out points' own noise removed (E e^2 = model^2 + noise^2); and each cut's s^2."""
    s2 = []
    for j in range(1, N_PSEUDO + 1):
        cut = z[-1] - 0.5 * j * h
        before = z <= cut + _EPS
        if before.sum() < MIN_FIT:
            break
        after = (z > cut + _EPS) & (z <= cut + h + _EPS)
        if not after.any():
            continue
        zb, lyb = z[before], ly[before]
        e = _predict_log(zb, lyb, z[after], _backtest_horizon(zb, h))[0] - ly[after]
        d = z[after] - cut + DELTA0
        s2.append(float((np.sum(e**2) - after.sum() * noise**2) / np.sum(d**2)))
    if not s2:
        return S_DEFAULT, []
    return max(math.sqrt(max(float(np.mean(s2)), 0.0)), S_FLOOR), s2


def _noise(z: np.ndarray, ly: np.ndarray, fitted: np.ndarray) -> float:
    """Scatter about the fit (log values ``fitted`` at z) over the last NOISE_WINDOW
    e-folds, corrected for the law's three parameters."""
    near = z >= z[-1] - NOISE_WINDOW
    r = fitted[near] - ly[near]
    n = int(near.sum())
    if n <= 3:
        return float(np.sqrt(np.mean(r**2))) if n else 0.0
    return float(np.sqrt(np.sum(r**2) / (n - 3)))


def _first_bad(values: np.ndarray, bad: np.ndarray) -> float:
    return float(values.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]])


def _check(x: np.ndarray, y: np.ndarray, xq: np.ndarray, horizon) -> None:
    """ValueError naming the first bad value."""
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-D and equally long, got shapes {x.shape}, {y.shape}")
    for name, v in (("x", x), ("y", y), ("x_new", xq)):
        if not np.isfinite(v).all():
            raise ValueError(f"{name} must be finite, got {_first_bad(v, ~np.isfinite(v))}")
    for name, v in (("x", x), ("x_new", xq)):
        if (v <= 0).any():
            raise ValueError(f"{name} must be positive, got {_first_bad(v, v <= 0)}")
    if ((y <= 0) | (y > 1)).any():
        raise ValueError(
            f"y (an error) must lie in (0, 1], got {_first_bad(y, (y <= 0) | (y > 1))}"
        )
    if len(np.unique(x)) < MIN_DISTINCT:
        raise ValueError(f"need at least {MIN_DISTINCT} distinct x values, got {len(np.unique(x))}")
    if horizon is not None and not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon must be a positive number of e-folds, got {horizon}")


def predictive(
    x: ArrayLike,
    y: ArrayLike,
    x_new: ArrayLike,
    *,
    horizon: float | None = None,
    calibration: Calibration = JFT,
) -> Predictive:
    """The :class:`Predictive` law of the observed error at ``x_new`` (arguments and errors
    as :func:`extrapolate`, without ``level``; ``calibration`` as
    :mod:`analysis.calibration`); its ``details`` say how it was made."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    x_new = np.asarray(x_new, dtype=float)
    shape, xq = x_new.shape, x_new.reshape(-1)
    _check(x, y, xq, horizon)
    order = np.argsort(x, kind="stable")
    x_last = float(x[order[-1]])
    z, ly = np.log(x[order] / x_last), np.log(y[order])
    zq = np.log(xq / x_last) if xq.size else np.zeros(0)
    if horizon is None:
        horizon = float(zq.max()) if zq.size else H_MIN
    horizon = max(float(horizon), H_MIN)
    h = _backtest_horizon(z, horizon)

    both, weights, fits = _predict_log(z, ly, np.concatenate([zq, [0.0], z]), h)
    local, at_last, fitted = both[: len(zq)], float(both[len(zq)]), both[len(zq) + 1 :]
    noise = _noise(z, ly, fitted)
    s, s2 = _model_error(z, ly, h, noise) if h > 0 else (S_DEFAULT, [])
    used = sum(w for _, w, _ in fits)
    details = Details(
        horizon=horizon,
        backtest_horizon=h,
        s=s,
        s2_per_cut=tuple(s2),
        noise=noise,
        x_last=x_last,
        kernel_weights=dict(zip(TAUS, map(float, weights), strict=True)),
        fits=tuple(
            {
                "tau": tau,
                "weight": w / used,
                "c": float(p[0]),
                "A": float(np.exp(p[1])),
                "b": float(p[2]),
            }
            for tau, w, p in fits
        ),
        local=local,
        at_last=at_last,
        z=zq,
        outside=np.maximum(np.maximum(zq, z[0] - zq), 0.0),
    )
    return Predictive.from_details(details, shape=shape, calibration=calibration)


def extrapolate(
    x: ArrayLike,
    y: ArrayLike,
    x_new: ArrayLike,
    *,
    level: float = 0.95,
    horizon: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predict a learning curve at ``x_new``, with a ``level`` interval (module docstring).

    ``x``: examples seen (or compute), positive, any order, repeats allowed; ``y``: the error
    at x, in (0, 1]; ``x_new``: a scalar or an array, inside or beyond the data; ``level``:
    the nominal coverage of [lower, upper] for an observed error at x_new; ``horizon``:
    log(x_far / x_last), the distance the backtests and the interval aim at (default
    log(max x_new / x_last), at least H_MIN).

    Returns ``(pred, lower, upper)``, arrays shaped like ``x_new``, in (0, 1]: the median
    and the central interval of :func:`predictive`'s law. Raises ``ValueError`` naming the
    bad value: shapes that differ, NaN or inf, x <= 0, y outside (0, 1], fewer than four
    distinct x, level outside (0, 1), a horizon that is not positive.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    law = predictive(x, y, x_new, horizon=horizon)
    return (law.median, *law.interval(level))
