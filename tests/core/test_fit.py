"""dwtune.core.fit: weighted least squares of ln dx* = a + b·L, its errors and its input checks."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import optimize, stats

from dwtune.core.errors import InputError
from dwtune.core.fit import (
    CensoredPair,
    chi2_tail,
    fit_transitions,
    interval_quantile,
    residual_z,
    z_value,
)
from dwtune.core.intervals import SCALE_PRIOR_DOF
from tests.helpers.fit_sim import rule_coverage

PAPER_DEPTHS = np.array([12.0, 18.0, 24.0, 30.0, 36.0])
A, B = 5.039, 0.0555
# Relative width uncertainties (= sigma of ln dx) differing per point, so weights matter.
SIGMA = np.array([0.02, 0.03, 0.025, 0.04, 0.05])


def planted_widths(depths: np.ndarray = PAPER_DEPTHS) -> np.ndarray:
    return np.exp(A + B * depths)


def test_noise_free_data_recovers_planted_law_to_1e_10():
    widths = planted_widths()
    fit = fit_transitions(PAPER_DEPTHS, widths, SIGMA * widths)
    assert abs(fit.a - A) < 1e-10
    assert abs(fit.b - B) < 1e-10
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit.chi2_red < 1e-16
    assert (fit.n_points, fit.dof) == (5, 3)
    assert fit.depths == tuple(PAPER_DEPTHS)


def test_matches_scipy_curve_fit_with_absolute_sigma():
    rng = np.random.default_rng(3)
    widths = planted_widths() * np.exp(rng.normal(0.0, SIGMA))
    fit = fit_transitions(PAPER_DEPTHS, widths, SIGMA * widths)
    popt, pcov = optimize.curve_fit(
        lambda x, a, b: a + b * x, PAPER_DEPTHS, np.log(widths), sigma=SIGMA, absolute_sigma=True
    )
    np.testing.assert_allclose([fit.a, fit.b], popt, rtol=1e-8)
    np.testing.assert_allclose(fit.cov_matrix, pcov, rtol=1e-6)
    assert fit.se_a == pytest.approx(math.sqrt(pcov[0, 0]), rel=1e-6)


def test_chi2_red_and_r2_by_hand():
    # Depths 0.5, 1.5, 2.5 with ln widths 0, 1.5, 2 and unit sigma: the line is a = -1/3, b = 1;
    # residuals -1/6, 1/3, -1/6 give chi² = 1/6 on 1 dof; the spread around the mean 7/6 is
    # 13/6, so R² = 1 - (1/6)/(13/6) = 12/13.
    widths = np.exp([0.0, 1.5, 2.0])
    fit = fit_transitions([0.5, 1.5, 2.5], widths, widths)
    assert fit.b == pytest.approx(1.0, rel=1e-12)
    assert fit.a == pytest.approx(-1.0 / 3.0, rel=1e-12)
    assert fit.chi2_red == pytest.approx(1.0 / 6.0, rel=1e-12)
    assert fit.r2 == pytest.approx(12.0 / 13.0, rel=1e-12)
    # Unit sigma on ln dx: cov = (XᵀX)⁻¹ for X = [1, L], L = 0.5, 1.5, 2.5.
    design = np.column_stack([np.ones(3), [0.5, 1.5, 2.5]])
    np.testing.assert_allclose(fit.cov_matrix, np.linalg.inv(design.T @ design), rtol=1e-12)


def test_a_point_with_a_huge_error_hardly_moves_the_fit():
    widths = planted_widths()
    errs = SIGMA * widths
    outlier = widths.copy()
    outlier[2] *= 3.0
    errs_outlier = errs.copy()
    errs_outlier[2] *= 1e6
    fit = fit_transitions(PAPER_DEPTHS, outlier, errs_outlier)
    assert fit.a == pytest.approx(A, abs=1e-6)
    assert fit.b == pytest.approx(B, abs=1e-7)


def _coverage(level: float, draws: int = 2000, understated: float = 1.0) -> dict[str, float]:
    """Share of noisy draws whose interval at ``level`` holds the planted a and b; the true
    scatter of ln dx* is ``understated`` times the σ the fit is given."""
    rng = np.random.default_rng(20200622)
    hits = {"a": 0, "b": 0}
    for _ in range(draws):
        widths = planted_widths() * np.exp(rng.normal(0.0, understated * SIGMA))
        fit = fit_transitions(PAPER_DEPTHS, widths, SIGMA * widths)
        for name, truth in (("a", A), ("b", B)):
            lo, hi = fit.interval(name, level)
            hits[name] += lo <= truth <= hi
    return {k: v / draws for k, v in hits.items()}


@pytest.mark.parametrize("understated", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("level", [0.6827, 0.95])
def test_intervals_cover_the_planted_values_at_the_rules_exact_rate(level, understated):
    # The rule t_n·s (intervals.interval_quantile) learns the scale of the σ from the scatter.
    # 2000 draws match its exact rate (fit_sim.rule_coverage) with the σ right, overstated and
    # understated twofold; 4 binomial sd of tolerance.
    expected = rule_coverage(level, dof=PAPER_DEPTHS.size - 2, understated=understated)
    tolerance = 4.0 * math.sqrt(expected * (1.0 - expected) / 2000)
    coverage = _coverage(level, understated=understated)
    assert coverage["a"] == pytest.approx(expected, abs=tolerance)
    assert coverage["b"] == pytest.approx(expected, abs=tolerance)


def test_a_wrong_sigma_moves_the_95_percent_coverage_by_points_not_tens_of_points():
    # The stated σ are a prior worth SCALE_PRIOR_DOF pseudo-observations, never taken as known:
    # σ twice too small leave a normal interval holding 68% (2Φ(1.96/2) − 1), the rule 94.6%;
    # σ twice too large leave a normal interval at 99.99%, the rule under 99.1%; and with
    # the σ right it holds 95-97% on 3 and 4 dof.
    for dof in (3, 4):
        assert rule_coverage(0.95, dof, understated=2.0) > 0.945
        assert rule_coverage(0.95, dof, understated=0.5) < 0.991
        assert 0.95 < rule_coverage(0.95, dof) < 0.97


def test_the_interval_follows_the_scatter_about_the_law():
    t = stats.t.ppf(0.975, 3 + SCALE_PRIOR_DOF)
    widths = planted_widths() * np.exp(np.array([1.0, -1.0, 0.5, -0.5, 1.0]) * 0.01 * SIGMA)
    tight = fit_transitions(PAPER_DEPTHS, widths, SIGMA * widths)
    # Transitions far closer to the law than their σ say: the interval narrows, down to the
    # prior's share of the scale, sqrt(ν₀ / (ν₀ + dof)).
    assert tight.chi2_red < 0.01
    floor = t * math.sqrt(SCALE_PRIOR_DOF / (3 + SCALE_PRIOR_DOF))
    assert floor < tight.quantile(0.95) < 0.75 * z_value(0.95)
    assert tight.quantile(0.95) == pytest.approx(floor, rel=0.05)
    scattered = planted_widths() * np.exp(np.array([3.0, -3.0, 3.0, -3.0, 3.0]) * SIGMA)
    loose = fit_transitions(PAPER_DEPTHS, scattered, SIGMA * scattered)
    scale = math.sqrt((SCALE_PRIOR_DOF + 3 * loose.chi2_red) / (3 + SCALE_PRIOR_DOF))
    assert loose.quantile(0.95) == pytest.approx(t * scale, rel=1e-9)
    assert loose.quantile(0.95) > 2.5 * z_value(0.95)
    lo, hi = loose.interval("b")
    assert hi - lo == pytest.approx(2 * t * scale * loose.se_b, rel=1e-9)
    assert interval_quantile(0.95, math.nan, 0) == pytest.approx(z_value(0.95))


def test_chi2_red_averages_one_when_uncertainties_are_right():
    rng = np.random.default_rng(11)
    values = []
    for _ in range(2000):
        widths = planted_widths() * np.exp(rng.normal(0.0, SIGMA))
        values.append(fit_transitions(PAPER_DEPTHS, widths, SIGMA * widths).chi2_red)
    # chi²/3 has sd sqrt(2/3); its mean over 2000 draws has sd 0.018; allow 4 of those.
    assert np.mean(values) == pytest.approx(1.0, abs=0.073)


def test_chi2_tail_is_uniform_when_uncertainties_are_right():
    # With exact σ the tail probability of χ² is uniform: about 5% of fits fall below 0.05.
    rng = np.random.default_rng(12)
    tails = []
    for _ in range(2000):
        widths = planted_widths() * np.exp(rng.normal(0.0, SIGMA))
        fit = fit_transitions(PAPER_DEPTHS, widths, SIGMA * widths)
        tails.append(chi2_tail(fit.chi2_red, fit.dof))
    # a share of 2000 draws at 0.05 has sd 0.005; allow 4 of those
    assert np.mean(np.asarray(tails) < 0.05) == pytest.approx(0.05, abs=0.02)
    # χ²₄'s tail has a closed form, e^(−x/2)·(1 + x/2): at x = 4 × 3.99 it is 0.00307
    x = 4 * 3.99
    assert chi2_tail(3.99, 4) == pytest.approx(math.exp(-x / 2) * (1 + x / 2), rel=1e-9)
    assert math.isnan(chi2_tail(1.0, 0))


def test_residual_z_finds_the_transition_the_law_misses():
    widths = planted_widths()
    widths[2] *= math.exp(3 * SIGMA[2])  # one transition 3σ above the law
    z = residual_z(A, B, PAPER_DEPTHS, widths, SIGMA * widths)
    np.testing.assert_allclose(z, [0, 0, 3, 0, 0], atol=1e-9)


def test_z_value():
    assert z_value(0.95) == pytest.approx(1.959964, rel=1e-6)
    with pytest.raises(InputError, match="level"):
        z_value(1.5)


def test_censored_pairs_are_listed_not_fitted():
    widths = planted_widths()
    censored = (CensoredPair("6-12", "censored_high", 6, 12, 1e9, math.nan, 3),)
    fit = fit_transitions(PAPER_DEPTHS, widths, SIGMA * widths, censored=censored)
    assert fit.censored == censored
    assert fit.n_points == 5


def test_censored_pair_bound_and_description():
    high = CensoredPair("1-2", "censored_high", 1, 2, 3e5, 1e6, 3)
    low = CensoredPair("1-2", "censored_low", 1, 2, math.nan, 3e4, 1)
    assert high.bound == 1e6 and low.bound == 3e4
    assert high.describe() == (
        "depth 2 never beat depth 1 up to N = 1e+06: transition above the range (3 seeds)"
    )
    assert low.describe() == (
        "depth 2 already beat depth 1 at N = 3e+04: transition below the range (1 seed)"
    )
    undecided = CensoredPair("1-2", "undecided", 1, 2, 1e5, 3e5, 2)
    assert math.isnan(undecided.bound)
    assert (
        undecided.describe()
        == "undecided: Δ within seed noise between N = 1e+05 and 3e+05 (2 seeds)"
    )


@pytest.mark.parametrize(
    ("depths", "widths", "errs", "message"),
    [
        ([12, 18], [300, 400], [5, 5], "at least 3 bracketed transitions .* got 2 at depth"),
        ([12, 12, 12], [300, 310, 305], [5, 5, 5], "2 or more distinct depths; got 3 at depth"),
        ([12, 18, 24], [300, 0, 500], [5, 5, 5], "width at point 2: got 0.0"),
        ([12, 18, 24], [300, -4, 500], [5, 5, 5], "width at point 2: got -4.0"),
        ([12, 18, 24], [300, 400, 500], [5, math.nan, 5], "width_err at point 2: got nan"),
        ([12, 18, 24], [300, 400, 500], [5, 0, 5], "width_err at point 2: got 0.0"),
        ([12, -18, 24], [300, 400, 500], [5, 5, 5], "depth at point 2: got -18.0"),
        ([12, 18, 24], [300, 400], [5, 5, 5], "lengths 3, 2, 3 differ"),
        ([12, 18, "x"], [300, 400, 500], [5, 5, 5], "depth: expected numbers"),
    ],
)
def test_bad_points_are_input_errors(depths, widths, errs, message):
    with pytest.raises(InputError, match=message):
        fit_transitions(depths, widths, errs)


def test_labels_name_the_bad_point():
    with pytest.raises(InputError, match="width_err at pair 12-18: got nan"):
        fit_transitions(
            [12, 18, 24], [300, 400, 500], [5, math.nan, 5], labels=["pair 6-12", "pair 12-18", "x"]
        )


def test_too_few_points_mentions_censored_pairs():
    censored = (CensoredPair("1-2", "censored_high", 1, 2),)
    with pytest.raises(InputError, match="1 pair\\(s\\) censored, not fitted"):
        fit_transitions([2, 4], [30, 40], [1, 1], censored=censored)


def test_pure_modules_import_only_numpy_and_scipy():
    script = (
        "import json, sys; import dwtune.core.fit, dwtune.core.projection; "
        "heavy = ('pandas', 'pyarrow', 'matplotlib', 'torch', 'ray', 'optuna'); "
        "print(json.dumps([m for m in heavy if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
