"""The saturating power law (analysis.scaling): recovery from noisy synthetic data."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from analysis.scaling import PowerLaw, fit_frontier, fit_power_law, plot_fit

TRUE = PowerLaw(a=0.5, b=0.35, c=0.08, d=2.0)


def _noisy(n=40, noise=0.01, seed=1):
    rng = np.random.default_rng(seed)
    x = np.geomspace(0.1, 1e4, n)  # exaFLOPs over five decades
    return x, TRUE.error(x) * np.exp(rng.normal(0, noise, n))


def test_recovers_known_parameters_with_intervals():
    x, err = _noisy()
    law, samples = fit_power_law(x, err, bootstrap=200, seed=0)
    assert law.b == pytest.approx(TRUE.b, abs=0.02)
    assert law.c == pytest.approx(TRUE.c, abs=0.003)
    assert law.a == pytest.approx(TRUE.a, rel=0.05)
    assert law.d == pytest.approx(TRUE.d, rel=0.2)
    assert samples.shape == (200, 4)
    lo, hi = np.percentile(samples, [2.5, 97.5], axis=0)
    truth = np.array(TRUE.as_tuple())
    assert np.all(lo <= truth) and np.all(truth <= hi)
    assert np.all(hi - lo < np.array([0.1, 0.05, 0.01, 1.0]))  # informative, not vacuous


def test_robust_to_an_outlier():
    x, err = _noisy()
    err[20] *= 3  # one run diverged
    law, _ = fit_power_law(x, err, bootstrap=0)
    assert law.b == pytest.approx(TRUE.b, abs=0.03)
    assert law.c == pytest.approx(TRUE.c, abs=0.005)


def test_bootstrap_is_seeded():
    x, err = _noisy(n=12)
    _, a = fit_power_law(x, err, bootstrap=30, seed=3)
    _, b = fit_power_law(x, err, bootstrap=30, seed=3)
    _, c = fit_power_law(x, err, bootstrap=30, seed=4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_fit_frontier_ignores_dominated_runs():
    x, err = _noisy(n=20, noise=0.0)
    frontier = pd.DataFrame({"exaflops": x, "acc": 100 * (1 - err)})
    worse = frontier.assign(acc=frontier["acc"] - 5, exaflops=frontier["exaflops"] * 1.5)
    fit = fit_frontier(pd.concat([frontier, worse]), metric="acc", bootstrap=50)
    assert fit.num_points == 20
    assert fit.law.b == pytest.approx(TRUE.b, abs=0.01)
    assert fit.x_range == pytest.approx((x.min(), x.max()))
    lo, hi = fit.band(x)
    assert np.all(lo <= hi)
    assert np.all(lo - 0.1 <= fit.law.accuracy(x)) and np.all(fit.law.accuracy(x) <= hi + 0.1)
    text = str(fit)
    assert "b = 0.35" in text and "95% intervals from 50 bootstrap refits" in text
    assert set(fit.as_dict()["intervals"]) == {"a", "b", "c", "d"}


def test_four_points_fit_without_intervals():
    x = np.array([1.0, 10.0, 100.0, 1000.0])
    fit_law, samples = fit_power_law(x, TRUE.error(x), bootstrap=100)
    assert samples.shape == (0, 4)
    np.testing.assert_allclose(fit_law.error(x), TRUE.error(x), rtol=1e-3)


@pytest.mark.parametrize(
    ("x", "err", "match"),
    [
        ([1, 2, 3], [0.5, 0.4, 0.3], "at least 4 distinct"),
        ([1, 2, 3, 4], [0.5, 0.4, 0.3, 1.5], r"error must lie in \(0, 1\]"),
        ([0, 2, 3, 4], [0.5, 0.4, 0.3, 0.2], "x must be positive"),
        ([1, 2, 3, 4], [0.5, 0.4, 0.3], "equally long"),
    ],
)
def test_bad_input(x, err, match):
    with pytest.raises(ValueError, match=match):
        fit_power_law(x, err)


def test_plot_fit_draws_curve_band_and_extrapolation():
    x, err = _noisy(n=15)
    fit = fit_frontier(
        pd.DataFrame({"c": x, "acc": 100 * (1 - err)}), metric="acc", x="c", bootstrap=30
    )
    fig, ax = plt.subplots()
    plot_fit(ax, fit, extrapolate=10)
    inside, beyond = [ln for ln in ax.lines if ln.get_gid() == "fit"]
    assert inside.get_xdata().max() == pytest.approx(x.max())
    assert beyond.get_xdata().max() == pytest.approx(10 * x.max())
    assert beyond.get_linestyle() == ":"
    assert [c.get_gid() for c in ax.collections] == ["fit-band"]
    plt.close(fig)
