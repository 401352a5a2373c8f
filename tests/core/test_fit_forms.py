"""dwtune.core.fit.forms and .loo: the law's form tested (AIC/BIC, LR), leave-one-pair-out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dwtune.core.fit import TransitionObservation, fit_law
from dwtune.core.fit.forms import LINEAR, POWER, QUADRATIC, compare_forms, fit_form, optimal_depth
from dwtune.core.fit.loo import leave_one_pair_out
from dwtune.core.projection import LEVINE2020
from dwtune.core.projection import optimal_depth as lambert_depth
from tests.helpers.fit_sim import PAIRS, planted_log_n, simulate_study

MANY_PAIRS = tuple((d - 6, d) for d in (12, 18, 24, 30, 36, 42, 48))


def _rate(flags) -> tuple[float, float]:
    flags = np.asarray(flags, dtype=float)
    return flags.mean(), 3.0 * math.sqrt(max(flags.mean() * (1 - flags.mean()), 0.01) / flags.size)


def test_no_curvature_is_not_over_detected():
    rng = np.random.default_rng(20)
    runs = [compare_forms(simulate_study(rng, pairs=MANY_PAIRS)) for _ in range(500)]
    lr_rate, _ = _rate([r.curvature_detected for r in runs])
    # The LR test is exact here (Gaussian errors, known σ): its size is 5%.
    assert abs(lr_rate - 0.05) < 3.0 * math.sqrt(0.05 * 0.95 / 500)
    aic_rate = np.mean([r.best("aic") == "quadratic" for r in runs if r.lr_statistic > 0])
    # AIC prefers the extra parameter when LR > 2: P(χ²₁ > 2) = 0.157.
    assert abs(aic_rate - 0.157) < 3.0 * math.sqrt(0.157 * 0.843 / 500)


def test_planted_curvature_is_detected():
    rng = np.random.default_rng(21)
    runs = [compare_forms(simulate_study(rng, c=-0.0012, pairs=MANY_PAIRS)) for _ in range(200)]
    assert np.mean([r.curvature_detected for r in runs]) > 0.9
    assert np.mean([r.best("aic") == "quadratic" for r in runs]) > 0.9
    fit = next(f for f in runs[0].fits if f.form == "quadratic")
    assert fit.params["c"] == pytest.approx(-0.0012, abs=4 * fit.se["c"])


def _exact(log_n_of) -> list[TransitionObservation]:
    return [
        TransitionObservation(f"{s}-{d}", s, d, "bracketed", log_n_of(d), 0.1) for s, d in PAIRS
    ]


def test_power_law_recovers_k_and_p_and_projects_k_times_n_to_the_p():
    k, p = 0.05, 0.4  # L_opt = k·N^p  <=>  ln N* = (ln L - ln k) / p
    fit = fit_form(_exact(lambda d: (math.log(d) - math.log(k)) / p), POWER, [1e12])
    assert fit.params["p"] == pytest.approx(p, rel=1e-9)
    assert fit.params["k"] == pytest.approx(k, rel=1e-9)
    assert fit.projections[1e12][0] == pytest.approx(k * 1e12**p, rel=1e-8)
    comparison = compare_forms(_exact(lambda d: (math.log(d) - math.log(k)) / p))
    assert comparison.best("bic") == "power"


def test_linear_form_projects_like_the_lambert_w_solution():
    fit = fit_form(_exact(planted_log_n), LINEAR, [1.75e11, 1e12])
    theta = np.array([fit.params["a"], fit.params["b"]])
    for budget in (1.75e11, 1e12):
        assert optimal_depth(LINEAR, theta, budget) == pytest.approx(
            lambert_depth(LEVINE2020, budget), rel=1e-8
        )
        assert fit.projections[budget][0] == pytest.approx(lambert_depth(LEVINE2020, budget))


def test_a_form_with_too_few_pairs_is_skipped_with_the_reason():
    comparison = compare_forms(_exact(planted_log_n)[:3])  # the quadratic needs 4
    assert [f.form for f in comparison.fits] == ["linear", "power"]
    assert comparison.skipped[0][0] == QUADRATIC.name
    assert "at least 4 bracketed transitions" in comparison.skipped[0][1]
    assert math.isnan(comparison.lr_p_value)


def test_loo_has_one_row_per_pair_and_each_row_is_the_fit_without_it():
    obs = simulate_study(np.random.default_rng(22))
    obs.append(TransitionObservation("48-60", 48, 60, "non_monotone", math.nan))
    rows = leave_one_pair_out(obs)
    assert [r.pair for r in rows] == [o.label for o in obs]
    without_third = fit_law(obs[:2] + obs[3:])
    assert rows[2].a == pytest.approx(without_third.a, rel=1e-12)
    assert rows[-1].note.startswith("Δ changes sign") and rows[-1].projections == {}
    full = lambert_depth(LEVINE2020.__class__("f", fit_law(obs).a, fit_law(obs).b), 1e12)
    depth, _, shift = rows[2].projections[1e12]
    assert shift == pytest.approx(depth - full, rel=1e-9)


def test_loo_finds_the_pair_that_carries_the_answer():
    obs = _exact(planted_log_n)
    obs[-1] = TransitionObservation("36-48", 36, 48, "bracketed", planted_log_n(48) + 1.0, 0.1)
    rows = leave_one_pair_out(obs)
    shifts = [abs(r.projections[1.75e11][2]) for r in rows]
    assert int(np.argmax(shifts)) == len(rows) - 1
