"""Pareto frontiers: the points no other point beats on both cost and accuracy.

Fig. 5 compares families by their frontiers (paper Sec. 4.4: ViT "dominates ResNets on
the performance/compute trade-off"), and Zhai et al. 2021 fit their scaling law to the
frontier, not to every run: a run with poor hyper-parameters says nothing about what
that compute can buy.

A point dominates another when it costs no more and scores no less, and is strictly
better on one of the two. Ties (equal cost and accuracy) keep the first occurrence.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def pareto_frontier(cost: Sequence[float], score: Sequence[float]) -> np.ndarray:
    """Indices of the non-dominated points, by increasing cost (and increasing score).

    Points with a NaN cost or score are ignored. Lower cost and higher score are better.
    """
    cost = np.asarray(cost, dtype=float)
    score = np.asarray(score, dtype=float)
    if cost.shape != score.shape:
        raise ValueError(f"cost and score differ in shape: {cost.shape} vs {score.shape}")
    valid = np.flatnonzero(~(np.isnan(cost) | np.isnan(score)))
    # By cost ascending; among equal costs the best score first, then input order.
    order = valid[np.lexsort((valid, -score[valid], cost[valid]))]
    keep, best = [], -np.inf
    for i in order:
        if score[i] > best:
            keep.append(i)
            best = score[i]
    return np.asarray(keep, dtype=int)


def frontier_frame(frame: pd.DataFrame, *, x: str, y: str, by: str | None = None) -> pd.DataFrame:
    """The frontier rows of ``frame`` (x = cost, y = accuracy), per group of ``by``."""
    if by is None:
        return frame.iloc[pareto_frontier(frame[x].to_numpy(float), frame[y].to_numpy(float))]
    parts = [
        group.iloc[pareto_frontier(group[x].to_numpy(float), group[y].to_numpy(float))]
        for _, group in frame.groupby(by, sort=False, dropna=False)
    ]
    return pd.concat(parts) if parts else frame.iloc[:0]
