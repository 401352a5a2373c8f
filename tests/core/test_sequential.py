"""The α-spending sign test: boundaries and the false-sign bound over repeated looks (pure)."""

import dataclasses
import math

import numpy as np
import pytest

from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.points import Decision, PairPoint
from dwtune.core.refine.sequential import boundaries, t_boundary
from dwtune.core.refine.steps import seeds_wanted
from dwtune.core.spec import RefineConfig

REFINE = RefineConfig(pairs=((6, 12),), seeds=1, max_seeds=4, alpha=0.05, noise_prior=0.002)
SD = 0.002  # nats: paired noise of the Monte Carlo points


def test_boundaries_spend_alpha_over_the_looks():
    one = boundaries(1, 0.05)
    assert one[0] == pytest.approx(1.96, abs=0.005)  # a single look is the fixed-sample test
    four = boundaries(4, 0.05)
    assert all(c > 1.96 for c in four)  # repeated looks need wider boundaries
    rng = np.random.default_rng(0)
    sums = np.cumsum(rng.standard_normal((200_000, 4)), axis=1) / np.sqrt(np.arange(1, 5))
    rate = float((np.abs(sums) > np.array(four)).any(axis=1).mean())
    assert abs(rate - 0.05) <= 3 * math.sqrt(0.05 * 0.95 / 200_000)


def test_an_estimated_noise_widens_the_boundary_like_a_student_t():
    assert t_boundary(2.0, math.inf) == 2.0
    assert t_boundary(2.0, 5) > t_boundary(2.0, 50) > 2.0


def _point(log_n: float, deltas) -> PairPoint:
    return PairPoint(
        budget=math.exp(log_n), log_n=log_n, width_deep=100, width_shallow=120,
        seeds=tuple(range(len(deltas))), deltas=tuple(deltas),
        decision=Decision(math.nan, math.nan, SD, False), kind="bisect", requested=len(deltas),
    )  # fmt: skip


def _sign_at_zero(rng, refine, decide, true_sd=SD) -> int:
    """The refine loop at one point whose true Δ is 0 beside single-seed grid points (which
    measure no noise): seeds added until decided or max_seeds."""
    context = [_point(10 + k, true_sd * rng.standard_normal(1) + 0.05) for k in range(3)]
    noise = true_sd * rng.standard_normal(refine.max_seeds)
    wanted = 2  # a bisect or verify step starts with two seeds
    while True:
        point = decide(context, _point(20, noise[:wanted]), refine)
        if point.decision.decided or wanted >= refine.max_seeds:
            return point.decision.sign
        wanted = seeds_wanted(point.decision, wanted, refine)


def _one_rule(context, point, refine):
    return decide_points([*context, point], refine)[-1]


@pytest.mark.parametrize("ratio", [0.5, 1.0, 2.0, 5.0])
def test_the_false_sign_rate_holds_alpha_whatever_the_noise_guess(ratio):
    # The spec's guess is SD; the seeds' true paired sd is ratio × SD. The guess is worth
    # refine.noise_prior_dof pseudo-observations, so a wrong guess widens the t boundary
    # instead of faking a known noise: the rate at a true Δ of 0 stays within α.
    trials = 1500
    margin = 3 * math.sqrt(REFINE.alpha * (1 - REFINE.alpha) / trials)  # binomial sd × 3
    rng = np.random.default_rng(7)
    signed = sum(
        _sign_at_zero(rng, REFINE, _one_rule, true_sd=ratio * SD) != 0 for _ in range(trials)
    )
    assert signed / trials <= REFINE.alpha + margin


def test_a_guess_taken_as_known_fails_when_the_noise_is_larger():
    # The same Monte Carlo catches the rule this replaced: a guess five times too small worth
    # a thousand observations (as good as known) gives signs far above α at a true Δ of 0.
    trials = 1500
    margin = 3 * math.sqrt(REFINE.alpha * (1 - REFINE.alpha) / trials)
    known = dataclasses.replace(REFINE, noise_prior=SD, noise_prior_dof=1000.0)
    rng = np.random.default_rng(7)
    signed = sum(_sign_at_zero(rng, known, _one_rule, true_sd=5 * SD) != 0 for _ in range(trials))
    assert signed / trials > REFINE.alpha + margin
