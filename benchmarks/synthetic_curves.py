"""Synthetic learning curves from known laws with log-normal noise: where the truth is known,
does an interval cover the held-out observations as often as it says
(benchmarks/extrapolation.py, its second table)?

Two laws, neither exactly the local form :func:`analysis.scaling.extrapolate` fits:

- ``M4``: (y - e_inf) / (e_0 - y)^alpha = beta x^c (Alabdulmohsin et al. 2022), a plateau
  near e_0 = 1 - 1/classes at the start, a floor e_inf in [0.03, 0.3];
- ``SPL``: y = a (x + d)^-b + c, the saturating power law of Zhai et al. 2021
  (:mod:`analysis.scaling`).

The x grid mimics the JFT benchmark: training x log-spaced from 4e6 to 1.5e9 (60 or 15
points), held-out x evenly spaced from 1.6e9 to 3.2e9 (about 2.1x past the last training
point). Observed error = true error x exp(N(0, sigma^2)), capped at 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

X0, X1, XT0, XT1 = 4e6, 1.5e9, 1.6e9, 3.2e9
LAWS = ("M4", "SPL")
SIGMAS = (0.005, 0.02, 0.05)


def _solve_m4(f: np.ndarray, e_inf: float, e_0: float, alpha: float) -> np.ndarray:
    """y with (y - e_inf) / (e_0 - y)^alpha = f, by bisection on (e_inf, e_0)."""
    lo, hi = np.full_like(f, e_inf), np.full_like(f, e_0)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        below = (mid - e_inf) / (e_0 - mid) ** alpha < f
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def sample_law(kind: str, rng: np.random.Generator) -> Callable[[np.ndarray], np.ndarray]:
    """A random law of ``kind``, as a function x -> true error."""
    if kind == "M4":
        e_0 = 1.0 - 1.0 / rng.choice([100, 200, 1000])
        e_inf = rng.uniform(0.03, 0.3)
        alpha = rng.uniform(0.5, 2.0)
        c = -rng.uniform(0.25, 0.8)
        # the half-way point of the transition between 1e7 and 3e8 examples
        x_half = np.exp(rng.uniform(np.log(1e7), np.log(3e8)))
        y_half = 0.5 * (e_0 + e_inf)
        beta = (y_half - e_inf) / (e_0 - y_half) ** alpha / x_half**c
        return lambda x: _solve_m4(beta * np.asarray(x, float) ** c, e_inf, e_0, alpha)
    if kind == "SPL":
        floor = rng.uniform(0.03, 0.3)
        b = rng.uniform(0.2, 0.7)
        d = np.exp(rng.uniform(np.log(1e6), np.log(1e8)))
        a = (rng.uniform(0.7, 0.95) - floor) * (X0 + d) ** b  # error at the first point < 1
        return lambda x: a * (np.asarray(x, float) + d) ** (-b) + floor
    raise ValueError(f"unknown law {kind!r}; valid: {', '.join(LAWS)}")


def make_curves(
    kind: str, sigma: float, n: int, *, n_train: int = 60, n_test: int = 100, seed: int = 0
):
    """``n`` curves: ``(x, y, x_test, y_test, true error at x_test)`` each."""
    rng = np.random.default_rng([seed, int(sigma * 1e4), n_train, LAWS.index(kind) + 1])
    x, xt = np.geomspace(X0, X1, n_train), np.linspace(XT0, XT1, n_test)
    out = []
    for _ in range(n):
        law = sample_law(kind, rng)
        y = np.minimum(law(x) * np.exp(sigma * rng.standard_normal(n_train)), 1.0)
        yt = np.minimum(law(xt) * np.exp(sigma * rng.standard_normal(n_test)), 1.0)
        out.append((x, y, xt, yt, law(xt)))
    return out


def coverage_rows(
    predict: Callable, *, n: int = 20, n_train: int = 60, laws: Sequence[str] = LAWS
) -> list[tuple]:
    """``predict(x, y, x_test) -> (pred, lower, upper)`` on ``n`` curves per law and noise
    level: ``(law, sigma, n_train, RMSE of log pred against the truth, mean coverage,
    median coverage, mean width in log)`` per cell."""
    rows = []
    for kind in laws:
        for sigma in SIGMAS:
            cov, rmse, width = [], [], []
            for x, y, xt, yt, truth in make_curves(kind, sigma, n, n_train=n_train):
                pred, lo, hi = predict(x, y, xt)
                cov.append(np.mean((yt >= lo) & (yt <= hi)))
                rmse.append(np.sqrt(np.mean((np.log(pred) - np.log(truth)) ** 2)))
                width.append(np.mean(np.log(hi) - np.log(lo)))
            rows.append(
                (kind, sigma, n_train, np.mean(rmse), np.mean(cov), np.median(cov), np.mean(width))
            )
    return rows
