"""The interval's calibration: learnt from finished curves, scored out of fold on the JFT
reference curves, and recovering a known law."""

import numpy as np
import pytest
from scipy.stats import t

from analysis import calibration, extrapolation
from analysis.reference import jft


@pytest.fixture(scope="module")
def corpus():
    splits = jft.splits()
    curves = [
        extrapolation.predictive(s.x_fit, s.y_fit, s.x_held).residuals(s.y_held) for s in splits
    ]
    return curves, [s.metric.split("/")[1] for s in splits]


def _coverage(cal, c, level):
    half = t.ppf(0.5 + level / 2, cal.dof) * cal.scale(c.noise, c.s, c.outside)
    return np.mean(np.abs(c.errors) <= half)


def test_the_shipped_calibration_is_learnt_from_the_jft_curves_and_holds_out_of_fold(corpus):
    curves, datasets = corpus
    assert calibration.learn(curves) == calibration.JFT
    folds = calibration.out_of_fold(curves, datasets)
    assert len({(f.noise, f.dof) for f in folds}) == 4  # one per left-out dataset
    for level, quoted in calibration.JFT_OUT_OF_FOLD.items():
        got = np.mean([_coverage(f, c, level) for f, c in zip(folds, curves, strict=True)])
        assert got == pytest.approx(quoted, abs=0.006)
    assert 0.92 <= calibration.JFT_OUT_OF_FOLD[0.95] <= 0.98
    # calibrated per curve too: MSCE (Lee et al. 2025) below MCMC-M4's 0.0381
    levels = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
    cov = np.array(
        [[_coverage(f, c, v) for v in levels] for f, c in zip(folds, curves, strict=True)]
    )
    assert np.mean((cov - levels) ** 2) == pytest.approx(0.0361, abs=0.0005)
    # the curve's scatter at face value (a Gaussian of its own noise) covers far less
    own = calibration.Calibration(noise=1.0, dof=1e6, reach=1.0)
    assert np.mean([_coverage(own, c, 0.95) for c in curves]) < 0.7


def test_learn_recovers_a_known_scale_and_tails():
    rng = np.random.default_rng(0)
    noise = rng.uniform(0.005, 0.05, 300)
    curves = [
        calibration.Residuals(
            noise=n, s=0.1, errors=2.0 * n * rng.standard_t(4, 30), outside=np.full(30, 0.5)
        )
        for n in noise
    ]
    got = calibration.learn(curves)
    assert got.noise == pytest.approx(2.0, rel=0.05)
    assert got.dof == pytest.approx(4.0, rel=0.3)


def test_learn_needs_a_corpus():
    one = calibration.Residuals(noise=0.01, s=0.1, errors=np.zeros(3), outside=np.ones(3))
    with pytest.raises(ValueError, match="at least 3 finished curves, got 2"):
        calibration.learn([one, one])
