"""How wide extrapolate's intervals are: a calibration learnt from finished learning curves
and applied to any new one (numpy and scipy only).

A curve's own fit rows say too little about how far its future points will stray: on the
72 JFT curves (:mod:`analysis.reference.jft`) the later rows scatter about 2.4x the fit
rows, and intervals built from the curve alone covered 79% at a nominal 95%, whatever
variant of the curve's own backtests set them. So the scale of the predictive law is
learnt across curves, as split-conformal prediction does, but as a likelihood:

    log y_new = loc + scale T,  scale = NOISE noise,  T ~ Student-t(DOF)

``noise`` (the curve's scatter about its local law over its last e-fold) is what the curve
shows of itself (:class:`analysis.extrapolation.Details`); the corpus sets how much it is
worth and how heavy the tails are. :func:`learn` maximises the log-likelihood of the
corpus's held-out points, each curve weighted alike (mean over a curve's points, then over
curves), over (NOISE, DOF). Its only input from a curve is :class:`Residuals`: its
features and the held-out log errors about the median (the median is not touched).

The curve's backtested model error per e-fold, ``s``, is not a term inside the corpus's
reach: learnt on all 72 JFT curves a term MODEL s in quadrature gets weight 0 (its
maximum-likelihood value), so it adds a parameter and no likelihood; learnt per fold it
picked up 0.21 where two datasets were left out and made the out-of-fold calibration worse
(MSCE 0.0395 against 0.0360 without it; benchmarks/RESULTS.md). Past the reach ``s`` sets
how fast the scale grows (:class:`Calibration`).

:data:`JFT`, used by default, is :func:`learn` on all 72 JFT curves (each fitted on its
published fit rows, scored on its held-out rows; ``benchmarks/extrapolation.py``).
:data:`JFT_OUT_OF_FOLD` is what its intervals cover when the calibration is learnt without
any curve of the scored dataset (:func:`out_of_fold`, leave one dataset out of birds,
caltech101, cifar100, imagenet): the number every printed interval quotes. Chosen on
held-out rows, disclosed: the features (noise over the last 1 e-fold rather than 2, no
distance term, no model term; among about 15 variants scored leave one dataset out). A user's own
finished curves are a corpus too: ``learn([law.residuals(y) for law, y in ...])`` and pass
the result to :func:`analysis.extrapolation.predictive` as ``calibration``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from scipy.stats import t

# How fast the scale grows past a corpus's reach, in units of s per e-fold: the model
# term's KAPPA that the fit rows' backtests chose before calibration (benchmarks/RESULTS.md).
BEYOND = 0.55

__all__ = ["Calibration", "Residuals", "learn", "out_of_fold", "JFT", "JFT_OUT_OF_FOLD"]


@dataclass(frozen=True)
class Residuals:
    """One finished curve as a calibration sees it: its ``noise`` and ``s`` (the features
    of :class:`analysis.extrapolation.Details`), ``errors``, log(observed) - loc at its
    held-out points, and how far ``outside`` the fitted data each lies (e-folds)."""

    noise: float
    s: float
    errors: np.ndarray
    outside: np.ndarray


@dataclass(frozen=True)
class Calibration:
    """The predictive law's scale and tails (module docstring); ``reach``: the farthest
    distance outside the data the corpus held out (e-folds). Past it the corpus says
    nothing, and the scale grows as the curve's own backtests do (:data:`BEYOND` s per
    e-fold past the reach)."""

    noise: float
    dof: float
    reach: float

    def scale(self, noise: float, s: float, outside: ArrayLike = 0.0) -> np.ndarray:
        beyond = BEYOND * s * np.maximum(np.asarray(outside, dtype=float) - self.reach, 0.0)
        return np.hypot(self.noise * noise, beyond)


def _pooled(curves: Sequence[Residuals]) -> dict[str, np.ndarray]:
    """Every held-out point of the corpus in one array per feature, with its weight
    1 / (its curve's points x curves): each curve counts alike."""
    n = np.array([len(c.errors) for c in curves])
    out = {
        name: np.concatenate(
            [np.broadcast_to(getattr(c, name), k) for c, k in zip(curves, n, strict=True)]
        )
        for name in ("noise", "s", "outside", "errors")
    }
    return {**out, "weight": np.repeat(1.0 / (n * len(curves)), n)}


def _loglik(cal: Calibration, p: dict[str, np.ndarray]) -> float:
    """Mean over curves of the mean log density of log y at the curve's held-out points."""
    sc = np.maximum(cal.scale(p["noise"], p["s"], p["outside"]), 1e-12)
    return float(np.sum(p["weight"] * (t.logpdf(p["errors"] / sc, cal.dof) - np.log(sc))))


def learn(curves: Sequence[Residuals]) -> Calibration:
    """The maximum-likelihood :class:`Calibration` of a corpus of finished curves (module
    docstring); NOISE at least 0, DOF above 1."""
    if len(curves) < 3:
        raise ValueError(f"a calibration needs at least 3 finished curves, got {len(curves)}")

    reach = round(max(float(np.max(c.outside, initial=0.0)) for c in curves), 2)

    def cal(p: np.ndarray) -> Calibration:
        return Calibration(noise=abs(p[0]), dof=1.0 + float(np.exp(p[1])), reach=reach)

    start = np.array([2.5, np.log(5.0)])
    opts = {"maxiter": 3000, "xatol": 1e-5, "fatol": 1e-9}
    points = _pooled(curves)
    best = minimize(lambda p: -_loglik(cal(p), points), start, method="Nelder-Mead", options=opts)
    c = cal(best.x)
    return Calibration(noise=round(float(c.noise), 3), dof=round(float(c.dof), 2), reach=reach)


def out_of_fold(curves: Sequence[Residuals], groups: Sequence[str]) -> list[Calibration]:
    """Each curve's calibration learnt without any curve of its group (leave one group out:
    the benchmark's groups are datasets)."""
    fold = {
        g: learn([c for c, h in zip(curves, groups, strict=True) if h != g]) for g in set(groups)
    }
    return [fold[g] for g in groups]


# learn() on the 72 JFT curves (benchmarks/extrapolation.py prints it and checks it)
JFT = Calibration(noise=3.568, dof=9.35, reach=0.79)
# What JFT's central intervals covered of the JFT curves' held-out points, mean per curve,
# each curve's calibration learnt leave one dataset out (benchmarks/RESULTS.md).
JFT_OUT_OF_FOLD = {0.5: 0.50, 0.8: 0.79, 0.9: 0.89, 0.95: 0.94, 0.99: 0.98}
