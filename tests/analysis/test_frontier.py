"""Pareto frontier extraction (analysis.frontier): hand-made points and properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.frontier import frontier_frame, pareto_frontier


def test_hand_made_points():
    cost = [1.0, 2.0, 2.0, 3.0, 4.0, 0.5, math.nan, 5.0]
    score = [10.0, 9.0, 12.0, 12.0, 15.0, 5.0, 20.0, 15.0]
    # (2, 9) loses to (1, 10); (3, 12) to (2, 12); (5, 15) to (4, 15); NaN is ignored.
    assert list(pareto_frontier(cost, score)) == [5, 0, 2, 4]


def test_ties_keep_the_first_and_shapes_must_match():
    assert list(pareto_frontier([1, 1, 2], [3, 3, 3])) == [0]
    assert list(pareto_frontier([], [])) == []
    with pytest.raises(ValueError, match="shape"):
        pareto_frontier([1, 2], [1])


def test_frontier_frame_per_group():
    frame = pd.DataFrame(
        {
            "family": ["ViT", "ViT", "ViT", "ResNet", "ResNet"],
            "exaflops": [1.0, 2.0, 3.0, 1.0, 2.0],
            "acc": [50.0, 40.0, 60.0, 45.0, 55.0],
        }
    )
    front = frontier_frame(frame, x="exaflops", y="acc", by="family")
    assert sorted(front.index) == [0, 2, 3, 4]
    assert list(frontier_frame(frame, x="exaflops", y="acc").index) == [0, 4, 2]


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(finite, finite), max_size=40))
def test_frontier_properties(points):
    cost = np.array([p[0] for p in points], dtype=float)
    score = np.array([p[1] for p in points], dtype=float)
    idx = pareto_frontier(cost, score)
    front = set(idx.tolist())

    def dominates(j, i):
        return (
            cost[j] <= cost[i]
            and score[j] >= score[i]
            and (cost[j] < cost[i] or score[j] > score[i])
        )

    # Along the frontier cost and score both increase strictly.
    assert np.all(np.diff(cost[idx]) > 0) and np.all(np.diff(score[idx]) > 0)
    for i in range(len(points)):
        if i in front:  # nothing beats a frontier point
            assert not any(dominates(j, i) for j in range(len(points)))
        else:  # everything else is beaten by, or equal to, a frontier point
            assert any(
                dominates(j, i) or (cost[j] == cost[i] and score[j] == score[i]) for j in front
            )
