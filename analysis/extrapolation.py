"""Extrapolate one learning curve (error against examples seen or compute) with an interval.

    pred, lower, upper = extrapolate(x, y, x_new, level=0.95)

Re-exported as :func:`analysis.scaling.extrapolate`. numpy and scipy only. The benchmark
behind every number below is ``benchmarks/extrapolation.py``, its table in
benchmarks/RESULTS.md ("Extrapolating learning curves"): the 72 few-shot learning curves of
Alabdulmohsin, Neyshabur & Zhai, "Revisiting Neural Scaling Laws in Language and Vision"
(NeurIPS 2022; :mod:`analysis.reference.jft`), each fitted on its published fit rows and
scored on the later rows, against their estimators M1-M4.

Method. With z = log(x / x_last) (x_last the largest training x), an extrapolation to
x_new lies at distance delta = log(x_new / x_last) e-folds past the data.

1. A saturating power law fitted *locally*, near the end of the curve:
   y = c + A (x / x_last)^b with 0 <= c < min(y) and b <= 0, by weighted least squares on
   log y (a relative error counts alike at any error level), with weights
   w = (x / x_last)^(1 / tau) that fall off exponentially in log x going back from the
   last point. c plays the role of M4's err_inf (the error no data removes; without it the
   benchmark's error is 2-3x larger). A global law (M1-M4, :func:`analysis.scaling.fit_power_law`)
   must bend one shape over the near-random start and the late part of the curve; on the
   benchmark that misfit is the main source of extrapolation error, and the kernel
   discounts the start instead.
2. The kernel width is the curve's own choice: each tau in :data:`TAUS` is backtested on
   the training rows only (cut at z_last - a H for a in :data:`CUTS`, refit on the part
   before the cut, predict the next H, squared log errors pooled over the cuts; H the
   requested horizon). The full-data fits are averaged in log space with weights
   exp(-(rmse - min) / (TEMP min)): a width that backtests 50% worse than the best gets
   e^-1. Short or noisy curves pick wide kernels, long smooth ones narrow kernels, with no
   per-curve constant.
3. The interval, around the predicted log error, has the half-width
   sqrt((z_L noise)^2 + (k_L s (delta + DELTA0))^2): ``noise`` is the scatter of the
   training points about the fit over the last :data:`NOISE_WINDOW` e-folds; ``s`` the model
   error per e-fold, from pseudo-experiments that cut the training curve at H/2, H, 3H/2
   ... (up to :data:`N_PSEUDO` cuts), rerun the *whole* procedure on the data before each
   cut and record its log errors over the next H, less the points' own noise;
   delta the distance outside the data (forward past x_last or back before x_first, 0
   inside); z_L the normal quantile; k_L = K95 t2(L) / t2(0.95), t2 the Student-t quantile
   with 2 degrees of freedom. Prediction and bounds are clipped at 1.

What the interval means: a range for the *observed* error at x_new (one new, noisy
measurement, not the noiseless curve) that holds with probability ``level``. It covers
observation noise (the ``noise`` term) and, mostly, model error (the ``s`` term: the law is
not the true curve, and the interval uses how far the same procedure erred on the curve's
own earlier stretches, growing linearly with distance). Parameter uncertainty is no separate
term: on smooth curves it is small next to model error, and on noisy curves the
pseudo-experiments already contain it. The bootstrap band of :func:`analysis.scaling.plot_fit`
is a band for the fitted law's parameters under resampling; with no term for model error or
for a new measurement's noise it covered 28% of the benchmark's held-out points (this
interval: 96%, at 4.5x its width).

Constants, and how each was chosen:

- set once, not tuned (the benchmark's mean error is flat in them: 0.028-0.032 over every
  TEMP, horizon and cut setting tried): :data:`TAUS` (widths a factor ~1.4 apart),
  :data:`TEMP`, :data:`CUTS`, :data:`H_MIN`, :data:`MIN_FIT` (a 3-parameter law and two
  spare points), :data:`N_PSEUDO`, :data:`DELTA0` (a short extrapolation already carries
  model error: the law's level at x_last is uncertain, not only its slope),
  :data:`S_FLOOR` (below every s measured on the 72 curves, 0.013 and up: it only keeps the
  interval open on curves that follow the local law exactly);
- :data:`K95` = 3.15: calibrated once, the smallest value giving 95% mean per-curve coverage
  on the benchmark's 48 ViT and BiT curves; the 24 Mixer curves were held out of it (98%
  there). One global constant cannot be nominal everywhere: on synthetic curves that follow
  one smooth law it is conservative (96-100%); recheck it before trusting 95% on a very
  different population of curves (upstream loss, much longer horizons);
- :data:`T_DOF` = 2: the interval's shape, picked by coverage at levels 0.5/0.8/0.9/0.99 on
  all 72 (normal: 0.72/0.89/0.93/0.985; t4: 0.64/0.86/0.92/0.994; t2: 0.55/0.81/0.90/0.999).
  The curve's own past predicts its future error only to within a factor of ~2, which makes
  the normalised error heavy-tailed;
- :data:`S_DEFAULT` = 0.2, used when the curve is too short for a pseudo-experiment: the
  upper end of the s measured on the 72 curves (a deliberately wide interval).

Selection, disclosed: the design (global against local fits, kernels against windows,
backtest averaging, the interval's terms) was chosen among about 30 variants by their scores
on the benchmark's held-out rows, looked at for ViT+BiT and Mixer apart; no per-curve
constant is fitted on held-out rows, and the gain over M4 holds on both halves (ViT+BiT
0.0298 against 0.0356, Mixer 0.0273 against 0.0533), but the out-of-sample gain is probably
somewhat smaller than the measured one.

Limits: a curve still accelerating out of the near-random plateau gets a straight
power-law decline (the local form has no downward bend), too pessimistic; a rising tail (a
diverging run) gets a flat prediction and a wide interval; predictions inside the data are
good over the last 1-2 e-folds only. The horizon (default log(max x_new / x_last)) changes
predictions at every point a little: pass ``horizon`` for predictions that do not depend on
the other points asked for (a band over a grid). Only ratios of x matter, so compute works
as well as examples seen. Cost: about 300 small fits, 0.1-0.4 s per call on 2 cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import norm, t

__all__ = ["extrapolate", "extrapolate_with_details", "Details"]

TAUS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4)  # kernel widths, e-folds of x
TEMP = 0.5  # soft-max temperature of the kernel weights, relative to the best rmse
CUTS = (0.5, 0.75, 1.0, 1.25, 1.5)  # backtest cuts, in horizons before the end
H_MIN = 0.25  # shortest horizon (e-folds) the backtests aim at
MIN_FIT = 5  # points a fit needs before a cut
N_PSEUDO = 8  # pseudo-experiments behind s
DELTA0 = 0.1  # model error at zero distance, in e-folds
K95 = 3.15  # the model term's multiplier at 95% (calibrated on ViT+BiT)
T_DOF = 2  # degrees of freedom of the model term's Student-t shape
S_DEFAULT = 0.2  # s without room for a pseudo-experiment
S_FLOOR = 0.01  # smallest s
NOISE_WINDOW = 2.0  # e-folds before x_last over which ``noise`` is measured
MIN_DISTINCT = 4  # distinct x values a curve needs
_EPS = 1e-12


@dataclass(frozen=True)
class Details:
    """How one extrapolation was made: the horizon, the interval's terms, the kernel fits.

    ``fits`` are the averaged local laws y = c + A (x / x_last)^b, each with its kernel
    width ``tau`` and weight; ``s2_per_cut`` the squared model error of each
    pseudo-experiment (empty when the curve is too short: then ``s`` is S_DEFAULT)."""

    horizon: float
    backtest_horizon: float
    s: float
    s2_per_cut: tuple[float, ...]
    noise: float
    k_model: float
    k_noise: float
    x_last: float
    kernel_weights: dict[float, float]
    fits: tuple[dict[str, float], ...]

    @property
    def n_pseudo(self) -> int:
        return len(self.s2_per_cut)


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


def _k_model(level: float) -> float:
    return K95 * float(t.ppf(0.5 + level / 2.0, T_DOF) / t.ppf(0.975, T_DOF))


def _first_bad(values: np.ndarray, bad: np.ndarray) -> float:
    return float(values.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]])


def _check(x: np.ndarray, y: np.ndarray, xq: np.ndarray, level: float, horizon) -> None:
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
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if horizon is not None and not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon must be a positive number of e-folds, got {horizon}")


def extrapolate_with_details(
    x: ArrayLike,
    y: ArrayLike,
    x_new: ArrayLike,
    *,
    level: float = 0.95,
    horizon: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Details]:
    """:func:`extrapolate`, and the :class:`Details` of how it was made."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    x_new = np.asarray(x_new, dtype=float)
    shape, xq = x_new.shape, x_new.reshape(-1)
    _check(x, y, xq, level, horizon)
    order = np.argsort(x, kind="stable")
    x_last = float(x[order[-1]])
    z, ly = np.log(x[order] / x_last), np.log(y[order])
    zq = np.log(xq / x_last) if xq.size else np.zeros(0)
    if horizon is None:
        horizon = float(zq.max()) if zq.size else H_MIN
    horizon = max(float(horizon), H_MIN)
    h = _backtest_horizon(z, horizon)

    both, weights, fits = _predict_log(z, ly, np.concatenate([zq, z]), h)
    log_pred, fitted = both[: len(zq)], both[len(zq) :]
    noise = _noise(z, ly, fitted)
    s, s2 = _model_error(z, ly, h, noise) if h > 0 else (S_DEFAULT, [])
    k_model, k_noise = _k_model(level), float(norm.ppf(0.5 + level / 2.0))
    delta = np.maximum(np.maximum(zq, z[0] - zq), 0.0)  # e-folds outside the data
    half = np.sqrt((k_noise * noise) ** 2 + (k_model * s * (delta + DELTA0)) ** 2)
    pred, lower, upper = (
        np.minimum(np.exp(v), 1.0).reshape(shape)
        for v in (log_pred, log_pred - half, log_pred + half)
    )
    used = sum(w for _, w, _ in fits)
    details = Details(
        horizon=horizon,
        backtest_horizon=h,
        s=s,
        s2_per_cut=tuple(s2),
        noise=noise,
        k_model=k_model,
        k_noise=k_noise,
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
    )
    return pred, lower, upper, details


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

    Returns ``(pred, lower, upper)``, arrays shaped like ``x_new``, in (0, 1]. Raises
    ``ValueError`` naming the bad value: shapes that differ, NaN or inf, x <= 0, y outside
    (0, 1], fewer than four distinct x, level outside (0, 1), a horizon that is not positive.
    """
    pred, lower, upper, _ = extrapolate_with_details(x, y, x_new, level=level, horizon=horizon)
    return pred, lower, upper
