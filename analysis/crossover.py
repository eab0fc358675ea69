"""Where one learning curve overtakes another: the crossovers of Fig. 4's and Fig. 5's
lines (the paper's question is whose curve ends up ahead, and from how much data or compute).

Measured curves are noisy: two models that run level cross back and forth at every
evaluation (on the JFT curves of :mod:`analysis.reference.jft`, up to 79 sign changes for
one pair of models). A crossover here is a change of order that lasts: each curve's log
values are smoothed with a Gaussian in log x (:data:`BANDWIDTH` e-folds wide), and the
order of two curves changes when the smoothed gap, decisive before (more than :data:`TOL`,
1% of the value), becomes decisive the other way. The crossover is then placed where the
*observed* curves cross: the last sign change of their gap, the same way, before the change
became decisive (the smoothed crossing where the observed curves have none). The second
curve is interpolated linearly in log x at the first one's points, over their common range.

On ImageNet 5-shot, ViT-B/16 overtakes BiT-R50x1 once, between its points at 1.94e8 and
2.06e8 examples seen (about 2.0e8), and stays ahead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

BANDWIDTH = 0.1  # e-folds of x: about 10%, a few evaluations on the JFT curves
TOL = 0.01  # a gap of more than 1% (in log) is decisive


@dataclass(frozen=True)
class Crossover:
    """The first curve (``a``) or the second (``b``) goes ahead (lower y) at ``x``,
    between the first curve's points ``x_before`` and ``x_after``; ``y``: the first
    curve's value there (log-x and log-y interpolation)."""

    x: float
    x_before: float
    x_after: float
    y: float
    leader: str  # "a" or "b": the curve with the lower value after the crossover


def _smooth(lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    w = np.exp(-0.5 * ((lx[:, None] - lx[None, :]) / BANDWIDTH) ** 2)
    return (w @ ly) / w.sum(axis=1)


def _sorted_logs(x: ArrayLike, y: ArrayLike, name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"{name}: x and y must be 1-D and equally long, got {x.shape}, {y.shape}")
    ok = np.isfinite(x) & np.isfinite(y)
    if ((x[ok] <= 0) | (y[ok] <= 0)).any():
        raise ValueError(f"{name}: x and y must be positive (log axes)")
    order = np.argsort(x[ok], kind="stable")
    return np.log(x[ok][order]), np.log(y[ok][order])


def crossovers(x_a: ArrayLike, y_a: ArrayLike, x_b: ArrayLike, y_b: ArrayLike) -> list[Crossover]:
    """The lasting crossovers of curve a (x_a, y_a) and curve b, lower y being better
    (errors; module docstring). NaN points are ignored; fewer than two common points: none."""
    la, ya = _sorted_logs(x_a, y_a, "curve a")
    lb, yb = _sorted_logs(x_b, y_b, "curve b")
    if len(la) < 2 or len(lb) < 2:
        return []
    inside = (la >= max(la[0], lb[0])) & (la <= min(la[-1], lb[-1]))
    if inside.sum() < 2:
        return []
    lx = la[inside]
    raw = ya[inside] - np.interp(lx, lb, yb)
    smooth = _smooth(la, ya)[inside] - np.interp(lx, lb, _smooth(lb, yb))
    out: list[Crossover] = []
    state, decided_at = 0, 0
    for i, gap in enumerate(smooth):
        s = 1 if gap > TOL else -1 if gap < -TOL else 0
        if not s or s == state:
            continue
        if state:
            j = _last_change(raw, decided_at, i, state)
            gap_j = raw
            if j is None:  # the observed curves do not cross here: the smoothed ones do
                j, gap_j = _last_change(smooth, decided_at, i, state), smooth
            frac = gap_j[j] / (gap_j[j] - gap_j[j + 1])
            lxc = lx[j] + frac * (lx[j + 1] - lx[j])
            out.append(
                Crossover(
                    x=float(np.exp(lxc)),
                    x_before=float(np.exp(lx[j])),
                    x_after=float(np.exp(lx[j + 1])),
                    y=float(np.exp(np.interp(lxc, la, ya))),
                    leader="a" if s < 0 else "b",
                )
            )
        state, decided_at = s, i
    return out


def _last_change(gap: np.ndarray, start: int, stop: int, old: int) -> int | None:
    """The last j in [start, stop) where ``gap`` leaves the sign ``old``."""
    for j in range(stop - 1, start - 1, -1):
        if np.sign(gap[j]) == old and np.sign(gap[j + 1]) != old:
            return j
    return None
