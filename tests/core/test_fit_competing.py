"""dwtune.core.fit.competing: published laws on the same pairs, and which the data prefer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from dwtune.core.fit import TransitionObservation
from dwtune.core.fit.competing import (
    LEVINE,
    SEPARABLE,
    LawComparison,
    LawFit,
    compare_laws,
    fit_competing,
    separable_log_width,
    separable_optimum,
)
from dwtune.core.projection import LEVINE2020
from dwtune.core.projection import optimal_depth as lambert_depth
from tests.helpers.fit_sim import PAIRS, planted_log_n, simulate_study

BUDGETS = (1.75e11, 1e12)
# σ(ln N*) of the planted studies: half the fit tests' default, where 400 of 400 studies of
# either law prefer it (at 0.2, 395 of 400: docs/method.md, competing laws)
SIGMA = 0.1
C = 3.2  # ln(A/B) of the planted separable law


def separable_loss(width: float, depth: float, c: float = C) -> float:
    """A/dx + B/L with B = 1 (E drops out of every difference)."""
    return math.exp(c) / width + 1.0 / depth


def separable_log_n(shallow: float, deep: float, c: float = C) -> float:
    """The closed-form crossing of the module doc, on the N axis."""
    log_width = c + separable_log_width(np.array([shallow]), np.array([deep]))[0]
    return math.log(12.0 * deep) + 2.0 * log_width


def separable_study(rng: np.random.Generator, sigma: float = SIGMA):
    return [
        TransitionObservation(
            f"{s}-{d}", s, d, "bracketed", separable_log_n(s, d) + sigma * rng.normal(), sigma
        )
        for s, d in PAIRS
    ]


@pytest.mark.parametrize("pair", [(6, 12), (12, 18), (24, 48)])
def test_the_closed_form_crossing_is_where_equal_n_losses_meet_and_the_deeper_wins_above(pair):
    shallow, deep = pair

    def delta(log_n: float) -> float:  # loss(deeper) − loss(shallower) at equal N
        n = math.exp(log_n)
        return separable_loss(math.sqrt(n / (12 * deep)), deep) - separable_loss(
            math.sqrt(n / (12 * shallow)), shallow
        )

    root = optimize.brentq(delta, 0.0, 60.0, xtol=1e-12)
    assert root == pytest.approx(separable_log_n(shallow, deep), abs=1e-9)
    assert delta(root - 1.0) > 0 > delta(root + 1.0)  # the deeper net loses below N*, wins above


@pytest.mark.parametrize("budget", [1e6, 1.75e11, 1e12])
def test_the_separable_optimum_is_the_numeric_minimum_at_fixed_n(budget):
    depth, width = separable_optimum(C, budget)
    assert 12 * depth * width**2 == pytest.approx(budget)
    assert width / depth == pytest.approx(math.exp(C) / 2)  # the same aspect ratio at every N

    def loss_at(log_depth: float) -> float:
        d = math.exp(log_depth)
        return separable_loss(math.sqrt(budget / (12 * d)), d)

    found = optimize.minimize_scalar(loss_at, bounds=(-5, 15), method="bounded",
                                     options={"xatol": 1e-10})  # fmt: skip
    assert math.exp(found.x) == pytest.approx(depth, rel=1e-4)


def test_the_levine_projection_is_the_lambert_w_solution():
    fit = fit_competing(LEVINE, simulate_study(np.random.default_rng(5), sigma=1e-3), BUDGETS)
    assert fit.params["a"] == pytest.approx(LEVINE2020.a, abs=0.01)
    for budget, (depth, width) in fit.projections.items():
        assert depth == pytest.approx(lambert_depth(LEVINE2020, budget), rel=0.01)
        assert 12 * depth * width**2 == pytest.approx(budget)


def test_transitions_from_a_levine_law_prefer_it():
    preferred = [
        compare_laws(simulate_study(np.random.default_rng(s), sigma=SIGMA), BUDGETS)
        for s in range(20)
    ]
    assert all(c.preferred == "levine2020" for c in preferred)
    first = preferred[0]
    by_law = {f.law: f for f in first.fits}
    assert first.criterion == "aicc" and by_law["levine2020"].n == len(PAIRS)
    assert by_law["levine2020"].loo_rms_ln_n < by_law["separable"].loo_rms_ln_n


def test_transitions_from_the_separable_law_prefer_it_and_recover_c():
    recovered = []
    for seed in range(20):
        comparison = compare_laws(separable_study(np.random.default_rng(seed)), BUDGETS)
        assert comparison.preferred == "separable"
        fit = next(f for f in comparison.fits if f.law == "separable")
        recovered.append(abs(fit.params["c"] - C) / fit.se["c"])
        assert fit.loo_pairs == len(PAIRS)
    assert np.mean(np.array(recovered) < 1.96) >= 0.8  # its 95% interval holds the planted c


def test_censored_pairs_enter_both_laws():
    obs = simulate_study(np.random.default_rng(1), upper=planted_log_n(36) - 0.1)
    assert sum(o.status == "censored_high" for o in obs) == 2
    comparison = compare_laws(obs, BUDGETS)
    assert {f.n for f in comparison.fits} == {len(PAIRS)}  # every pair in the likelihood
    assert {f.loo_pairs for f in comparison.fits} == {len(PAIRS) - 2}  # only bracketed held out


def test_three_pairs_are_compared_by_aic_and_two_are_not_compared():
    obs = simulate_study(np.random.default_rng(2))
    three = compare_laws(obs[:3], BUDGETS)
    assert three.criterion == "aic"  # AICc of a 2-parameter law needs a fourth pair
    assert len(three.fits) == 2
    two = compare_laws(obs[:2], BUDGETS)
    assert not two.fits and {law for law, _ in two.skipped} == {"levine2020", "separable"}


def _fit(law: str, log_likelihood: float, k: int) -> LawFit:
    return LawFit(law, "", "", {}, {}, log_likelihood, k, 6, math.nan, 0, {})


def test_a_difference_under_two_prefers_neither_law():
    close = LawComparison((_fit("levine2020", 0.0, 2), _fit("separable", -0.4, 1)), (), "aic")
    # AIC 4.0 against 2.8: separable ahead by 1.2, under the threshold of 2
    assert close.margin == pytest.approx(1.2) and close.preferred is None
    assert close.ranked()[0].law == "separable"
    far = LawComparison((_fit("levine2020", 3.0, 2), _fit("separable", -0.4, 1)), (), "aic")
    assert far.preferred == "levine2020" and far.margin == pytest.approx(4.8)


def test_a_pairs_n_star_depends_on_both_its_depths_under_the_separable_law():
    # What it predicts that levine2020 cannot: pairs sharing a deeper depth differ in N*.
    assert separable_log_n(6, 24) < separable_log_n(18, 24)
    assert SEPARABLE.params == ("c",) and LEVINE.params == ("a", "b")
