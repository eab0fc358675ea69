"""Backtests (analysis.holdout) and the extrapolation benchmark's scores
(benchmarks/extrapolation.py), checked against numbers computed here independently."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm, t

from analysis import holdout
from analysis.reference import jft

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("extrapolation")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _rmse_of_log(pred, actual) -> float:
    return float(np.sqrt(np.mean((np.log(pred) - np.log(actual)) ** 2)))


def test_benchmark_m1_rmse_equals_a_closed_form_power_law_fit(bench):
    """M1 is a straight line in log-log: numpy.polyfit, recomputed here for all 72 curves."""
    splits = jft.splits()
    res = bench.run("M1", splits, jobs=1, done={})
    row = bench.summarise("M1", res, splits, None)
    mine = []
    for s in splits:
        slope, intercept = np.polyfit(np.log(s.x_fit), np.log(s.y_fit), 1)
        mine.append(_rmse_of_log(np.exp(intercept + slope * np.log(s.x_held)), s.y_held))
    np.testing.assert_allclose(row["rmse"], mine, rtol=1e-9)
    assert row["mean"] == pytest.approx(0.1046, abs=5e-5)  # benchmarks/RESULTS.md


def test_benchmark_scores_extrapolate_as_numpy_does(bench):
    splits = jft.splits(
        models=["ViT-B/16", "Mixer-B/16"],
        metrics=["fewshot/imagenet/5shot", "fewshot/caltech101/5shot"],
    )
    res = bench.run("extrapolate", splits, jobs=1, done={})
    row = bench.summarise("extrapolate", res, splits, np.zeros(len(splits)))
    for i, s in enumerate(splits):
        r = res[bench._key(s)]
        assert row["rmse"][i] == pytest.approx(_rmse_of_log(r["pred"], s.y_held), rel=1e-12)
        for level in bench.LEVELS:
            lo, hi = (np.array(b) for b in r["bands"][str(level)])
            inside = (s.y_held >= lo) & (s.y_held <= hi)
            assert row["cov"][level][i] == pytest.approx(inside.mean())
    (i,) = [i for i, s in enumerate(splits) if s.name == "ViT-B/16" and "imagenet" in s.metric]
    assert row["rmse"][i] == pytest.approx(0.0324, abs=5e-5)  # RESULTS.md: one of M4's wins
    assert row["wins"] == 0  # against zeros


def test_the_old_intervals_imply_a_density(bench):
    """The log-likelihood of the old estimator ("extrapolate (before)"): the symmetric law
    whose central level-L interval is its interval puts mass L inside it."""
    old = SimpleNamespace(K95=3.15, T_DOF=2)  # its constants at commit bench.BEFORE
    noise, m = 0.01, 0.03
    half = {  # the old interval's half-width at each level (its eq. in analysis/extrapolation.py)
        level: np.hypot(
            norm.ppf(0.5 + level / 2) * noise,
            3.15 * t.ppf(0.5 + level / 2, 2) / t.ppf(0.975, 2) * m,
        )
        for level in (0.5, 0.95)
    }
    u = np.union1d(np.linspace(0.0, 2.0, 20_001), list(half.values()))
    dens = np.exp(bench._implied_logpdf(old, u, noise, np.full_like(u, m)))
    assert 2 * np.trapezoid(dens, u) == pytest.approx(1.0, abs=1e-3)  # t2's tail past u = 2
    for level, h in half.items():
        inside = u <= h
        assert 2 * np.trapezoid(dens[inside], u[inside]) == pytest.approx(level, abs=2e-4)


def test_bnsl_fits_a_broken_law(bench):
    """scaling_baselines.fit_bnsl on a noise-free curve of its own form (one break at 1e8,
    inside the data) extrapolates it 2x past the data exactly."""
    import scaling_baselines

    law = lambda x: 0.1 + 3.0 * x**-0.1 * (1 + (x / 1e8) ** 2) ** -0.15  # noqa: E731
    x, x_new = np.geomspace(4e6, 1.5e9, 40), np.geomspace(1.6e9, 3e9, 10)
    pred = scaling_baselines.fit_bnsl(x, law(x))(x_new)
    assert _rmse_of_log(pred, law(x_new)) < 1e-6


def test_inner_split_reads_only_the_fit_rows():
    x = 2.0 ** (np.arange(13) / 2)  # log2 x = 0, 0.5, ..., 6
    nan = np.array([np.nan])
    s = holdout.Split("c", "m", "ViT", x, x / 100, nan, nan)  # held-out rows: never read
    a = holdout.inner_split(s)  # the last doubling of the fit rows held out
    np.testing.assert_array_equal(a.x_fit, x[x <= 32])
    np.testing.assert_array_equal(a.x_held, x[x > 32])
    np.testing.assert_array_equal(a.y_held, x[x > 32] / 100)
    b = holdout.inner_split(s, before=2.0)  # the doubling before it
    np.testing.assert_array_equal(b.x_fit, x[x <= 16])
    np.testing.assert_array_equal(b.x_held, x[(x > 16) & (x <= 32)])
    assert holdout.inner_split(s, before=16.0) is None  # 3 points before the cut


def test_split_at_holds_out_the_end_of_the_log_range():
    x = np.geomspace(1, 1e4, 9)  # log10 x = 0, 0.5, ..., 4
    y = np.linspace(0.1, 0.9, 9)  # given in decreasing x
    s = holdout.split_at("c", x[::-1], y, fraction=0.3, metric="m")
    np.testing.assert_array_equal(s.x_fit, x[:6])  # log10 x <= 2.8
    np.testing.assert_array_equal(s.x_held, x[6:])
    np.testing.assert_array_equal(s.y_held, y[2::-1])
    with pytest.raises(ValueError, match="fraction must lie in"):
        holdout.split_at("c", x, x / 1e5, fraction=1.0, metric="m")


def test_score_and_summary():
    x = np.geomspace(1e6, 1e9, 40)
    y = 0.1 + 0.8 * (x / 1e6) ** -0.3
    curve = holdout.split_at("a", x, y, fraction=0.2, metric="m", family="ViT")
    scores, failures = holdout.evaluate(
        [curve, holdout.split_at("b", x[:5], y[:5], fraction=0.5, metric="m")]
    )
    assert list(failures) == ["b m"] and "distinct x" in failures["b m"]
    (s,) = scores
    pred, lo, hi = holdout.predict(curve)
    assert s.rmse == pytest.approx(_rmse_of_log(pred, curve.y_held))
    assert s.n_fit + s.n_held == 40 and s.reach == pytest.approx(x[-1] / curve.x_fit.max())
    summary = holdout.summarise([s, s])
    assert summary["rmse_by_family"] == {"ViT": s.rmse} and summary["curves"] == 2
    assert summary["coverage_pooled"] == pytest.approx(s.coverage)
    assert "2 curves" in holdout.summary_lines(summary)[0]


def test_power_law_estimator_is_the_frontier_fit_with_its_band():
    x = np.geomspace(1e6, 1e9, 30)
    y = 0.1 + 0.8 * (x / 1e6) ** -0.3
    curve = holdout.split_at("a", x, y, fraction=0.2, metric="m")
    pred, lo, hi = holdout.predict(curve, estimator="power-law", bootstrap=20)
    assert np.all(lo <= pred + 1e-12) and np.all(pred <= hi + 1e-12)
    assert _rmse_of_log(pred, curve.y_held) < 0.01  # its own law
    with pytest.raises(ValueError, match="unknown estimator 'M4'; valid: extrapolate, power-law"):
        holdout.predict(curve, estimator="M4")


def test_frontier_splits_use_each_groups_frontier():
    cells = pd.DataFrame(
        {
            "family": ["ViT"] * 6,
            "exaflops": [1, 2, 3, 4, 5, 6],
            "acc": [10, 20, 15, 30, 40, 50],  # the third run is dominated
        }
    )
    (s,) = holdout.frontier_splits(cells, metric="acc", x="exaflops", by="family", fraction=0.1)
    np.testing.assert_array_equal(np.concatenate([s.x_fit, s.x_held]), [1, 2, 4, 5, 6])
    assert s.family == "ViT" and s.y_held == pytest.approx([0.5])
