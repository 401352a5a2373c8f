"""The noise of paired Δ learned from the seeds: a prior worth pseudo-observations, local pooling
along ln N, unstable trainings that set no one's noise (pure)."""

import math

import numpy as np
import pytest

from dwtune.core import vocabulary
from dwtune.core.refine.noise import NoisePrior, robust_twin_sd, unstable_trainings
from dwtune.core.refine.signs import DeltaPoint, pair_noise

GUESS = NoisePrior(0.003, 0.5)


def _noise(points, prior=GUESS):
    return pair_noise(points, prior)


def test_the_prior_is_pseudo_observations_never_a_known_value():
    # no two seeds anywhere: the guess alone, on its own few degrees of freedom
    alone = _noise([DeltaPoint(1e6, (0.01,)), DeltaPoint(1e7, (0.02,))])
    assert alone.source == vocabulary.NOISE_PRIOR and alone.measured_dof == 0
    assert np.allclose(alone.sd, 0.003) and np.allclose(alone.dof, 0.5)
    # one point of two seeds: the pool (ss + ν₀·prior²)/(ν + ν₀) on ν + ν₀ dof, which the
    # point's local variance shrinks towards by min(SHRINK_DOF, ν + ν₀) dof
    pair = [DeltaPoint(1e6, (0.0, 0.01))]
    one = _noise(pair, NoisePrior(0.003, 2.0))
    ss = 0.01**2 / 2
    pool = (ss + 2.0 * 0.003**2) / 3.0
    assert one.sd[0] == pytest.approx(math.sqrt((ss + 3.0 * pool) / (1.0 + 3.0)))
    assert one.dof[0] == pytest.approx(3.0)  # never more than the pool's own
    assert one.source == vocabulary.NOISE_MEASURED and one.measured_dof == 1


def test_a_wrong_prior_is_outweighed_as_seeds_come_in():
    rng = np.random.default_rng(2)
    true_sd, guess = 0.015, 0.003  # the quickstart's paired sd against the default guess
    for seeds, tolerance in ((3, 0.5), (20, 0.15)):
        points = [
            DeltaPoint(math.exp(14 + 0.2 * i), tuple(true_sd * rng.standard_normal(seeds)))
            for i in range(4)
        ]
        found = _noise(points, NoisePrior(guess, 0.5)).sd
        assert np.all(np.abs(found / true_sd - 1) < tolerance), (seeds, found)


def test_noise_follows_size_locally():
    rng = np.random.default_rng(5)
    quiet = [DeltaPoint(math.exp(10 + i), tuple(0.001 * rng.normal(size=4))) for i in range(4)]
    loud = [DeltaPoint(math.exp(20 + i), tuple(0.02 * rng.normal(size=4))) for i in range(4)]
    found = _noise(quiet + loud)
    assert found.source == vocabulary.NOISE_MEASURED
    assert found.sd[:4].max() < 0.7 * found.sd[4:].min()  # the sd follows the size
    assert np.all(found.dof <= found.measured_dof + 0.5 + 1e-9)  # pooling makes no information


def test_an_unstable_training_is_flagged_by_its_twins_and_only_upwards():
    twins = [[1.771, 1.773], [1.802, 1.794], [1.650, 1.661], [1.700, 1.690], [1.773, 2.034]]
    scale = robust_twin_sd(twins)
    assert 0.005 < scale < 0.02  # the wild pair does not inflate a median
    flags = unstable_trainings(twins, scale)
    assert flags[-1] == [False, True] and not any(any(row) for row in flags[:-1])
    # only the worse of the two is flagged: a training far *better* than its twin is not
    assert unstable_trainings([[2.034, 1.773]], scale) == [[True, False]]
    # too few twins to measure a scale: nothing is flagged
    assert math.isnan(robust_twin_sd(twins[:2]))
    assert unstable_trainings(twins[:2], math.nan) == [[False, False], [False, False]]
