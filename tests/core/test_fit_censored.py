"""dwtune.core.fit.censored: censored pairs stay in the fit (interval-censored likelihood)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from dwtune.core.errors import InputError
from dwtune.core.fit import TransitionObservation, fit_law, fit_transitions
from dwtune.core.fit.censored import linear_design, negative_log_likelihood, prepare
from tests.helpers.fit_sim import A, B, planted_log_n, rule_coverage, simulate_study

# ln N of the top of the simulated range: pair 36-48's N* (ln ≈ 21.8) lies above it about half
# the time and pair 30-36's (ln ≈ 21.0) about 1% of the time.
UPPER = planted_log_n(48)


def _bracketed(obs):
    kept = [o for o in obs if o.status == "bracketed"]
    depth = np.array([o.depth_deep for o in kept])
    width = np.exp([o.log_width for o in kept])
    return fit_transitions(depth, width, width * np.array([o.sigma_log_width for o in kept]))


def test_without_censoring_equals_weighted_least_squares():
    obs = simulate_study(np.random.default_rng(1))
    mle, wls = fit_law(obs), _bracketed(obs)
    np.testing.assert_allclose([mle.a, mle.b], [wls.a, wls.b], rtol=1e-12)
    np.testing.assert_allclose(mle.cov_matrix, wls.cov_matrix, rtol=1e-10)
    assert mle.chi2_red == pytest.approx(wls.chi2_red, rel=1e-10)
    assert mle.method == "censored_mle" and mle.censored_fitted == ()


def _with_last(status: str, log_n: float):
    obs = simulate_study(np.random.default_rng(2))[:5]
    return [*obs, TransitionObservation("36-48", 36, 48, status, log_n)]


def test_censored_high_pair_pulls_the_slope_up_and_censored_low_down():
    line_at_48 = planted_log_n(48)
    base = _bracketed(_with_last("censored_high", line_at_48)).b  # the 5 bracketed pairs only
    up = fit_law(_with_last("censored_high", line_at_48 + 1.0))  # N* above a bound above the line
    down = fit_law(_with_last("censored_low", line_at_48 - 1.0))
    assert up.b > base + 0.2 * up.se_b
    assert down.b < base - 0.2 * down.se_b
    assert up.censored_fitted == ("36-48",) and up.n_points == 5


def test_a_bound_far_on_the_uninformative_side_changes_nothing():
    # "N* above 1e3 parameters" says nothing the line does not already imply.
    loose = fit_law(_with_last("censored_high", planted_log_n(48) - 15.0))
    base = _bracketed(_with_last("censored_high", 0.0))
    assert loose.b == pytest.approx(base.b, abs=1e-9)


def test_gradient_and_hessian_match_finite_differences():
    obs = _with_last("censored_high", planted_log_n(48) + 0.1)
    data = prepare(obs)
    design = linear_design(data.depth)
    theta = np.array([A + 0.01, B - 0.001])
    _, grad, hess = negative_log_likelihood(theta, design, data)
    num_grad = optimize.approx_fprime(
        theta, lambda t: negative_log_likelihood(t, design, data)[0], 1e-7
    )
    np.testing.assert_allclose(grad, num_grad, rtol=1e-4, atol=1e-4)
    num_hess = np.array(
        [
            optimize.approx_fprime(
                theta, lambda t, i=i: negative_log_likelihood(t, design, data)[1][i], 1e-7
            )
            for i in range(2)
        ]
    )
    np.testing.assert_allclose(hess, num_hess, rtol=1e-4)


def test_non_monotone_and_undecided_are_excluded_with_their_reason():
    obs = [
        *simulate_study(np.random.default_rng(3))[:4],
        TransitionObservation("30-36", 30, 36, "non_monotone", math.nan),
        TransitionObservation("36-48", 36, 48, "undecided", math.nan),
    ]
    fit = fit_law(obs)
    assert dict(fit.excluded) == {
        "30-36": "Δ changes sign more than once: no single N* to fit",
        "36-48": "Δ within noise at every decided size: the pair bounds no N*",
    }
    assert fit.n_points == 4 and fit.dof == 2


def test_an_estimated_transition_needs_a_sigma():
    obs = simulate_study(np.random.default_rng(4))
    obs[2] = TransitionObservation("18-24", 18, 24, "bracketed", obs[2].log_n, math.nan)
    with pytest.raises(InputError, match="sigma_ln at 18-24: got nan"):
        fit_law(obs)


def test_too_few_estimated_pairs_is_an_input_error():
    obs = [TransitionObservation(f"p{d}", d - 6, d, "censored_high", 20.0) for d in (12, 18)]
    obs += [TransitionObservation(f"q{d}", d - 6, d, "bracketed", 18.0, 0.1) for d in (24, 30)]
    with pytest.raises(InputError, match=r"at least 3 bracketed .* got 2 at depth.* 2 censored"):
        fit_law(obs)


def _monte_carlo(reps: int, seed: int):
    """Per simulated study: (censored pairs, WLS b, MLE b, MLE a/b inside their 95% CI, dof)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(reps):
        obs = simulate_study(rng, upper=UPPER)
        mle = fit_law(obs)
        (a_lo, a_hi), (b_lo, b_hi) = mle.interval("a"), mle.interval("b")
        censored = sum(o.status == "censored_high" for o in obs)
        held = (a_lo <= A <= a_hi, b_lo <= B <= b_hi)
        rows.append((censored, _bracketed(obs).b, mle.b, *held, mle.dof))
    return np.array(rows, dtype=float)


def test_censored_mle_removes_most_of_the_low_bias_of_wls_on_bracketed_pairs():
    rows = _monte_carlo(400, seed=10)
    assert 0.3 < np.mean(rows[:, 0] >= 1) < 0.7  # 1-2 of 6 pairs censored in about half
    mc = rows[:, 1:3].std(axis=0) / math.sqrt(len(rows))
    wls_bias, mle_bias = rows[:, 1].mean() - B, rows[:, 2].mean() - B
    assert wls_bias < -3 * mc[0]  # biased low, by more than three Monte Carlo errors
    # The likelihood keeps a small finite-sample bias (about +0.1 sd of b̂ on 6 pairs:
    # benchmarks/fit_coverage.py), well under half of what dropping the censored pairs gives.
    assert abs(mle_bias) < 0.5 * abs(wls_bias)


def test_intervals_cover_at_the_rules_rate_with_censoring():
    # With exact σ the rule (t scaled by the scatter) holds the truth at a known rate near 95%
    # (96-97% on 3-4 dof: fit_sim.rule_coverage); censored pairs must not pull it below that.
    rows = _monte_carlo(600, seed=11)
    censored = rows[:, 0] >= 1
    rate = {dof: rule_coverage(0.95, int(dof)) for dof in set(rows[:, 5])}
    expected = np.array([rate[dof] for dof in rows[:, 5]])
    for mask in (censored, np.ones_like(censored)):
        share = expected[mask].mean()
        tolerance = 3.0 * math.sqrt(share * (1.0 - share) / mask.sum())
        for column in (3, 4):  # a, b
            assert abs(rows[mask, column].mean() - share) < tolerance


def test_chi2_red_is_near_one_when_sigma_describes_the_scatter():
    rng = np.random.default_rng(12)
    values = [fit_law(simulate_study(rng)).chi2_red for _ in range(300)]
    # χ²₄/4 has mean 1 and sd 1/√2; the mean of 300 is within 3·0.041 of 1.
    assert abs(np.mean(values) - 1.0) < 3 * math.sqrt(2 / 4) / math.sqrt(300)
    assert stats.kstest(np.array(values) * 4, "chi2", args=(4,)).pvalue > 1e-3
