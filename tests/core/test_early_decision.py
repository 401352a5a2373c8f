"""The early sign rule: error control over its looks, early calls of a clear Δ, its inputs."""

import math

import numpy as np
import pytest
from scipy import stats

from dwtune.backends.simulated_surface import curve_excess
from dwtune.core.early_decision import (
    NOT_SETTLED,
    EarlyRule,
    first_settled,
    planned_evals,
    trend_fit,
)
from dwtune.core.spec import SimulatedConfig

TOTAL = 1000
STEPS = planned_evals(TOTAL, 25)
PROGRESS = np.asarray(STEPS, float) / TOTAL
SD = 0.002  # paired end-Δ sd (nats)
EVAL_SD = 0.001  # per-eval sd (nats)
LATE = SimulatedConfig(curve="late_descent")


def curves(rng, delta: float, seeds: int, transient: float) -> np.ndarray:
    """Seeds × evals partial Δ: the end Δ of each seed, a late-descent transient scaled by
    ``transient`` nats of excess loss (0: none), independent eval noise (none at the end)."""
    end = delta + SD * rng.standard_normal(seeds)
    shape = transient * (curve_excess(PROGRESS, 12, LATE) - curve_excess(PROGRESS, 6, LATE))
    noise = EVAL_SD * rng.standard_normal((seeds, PROGRESS.size)) * math.sqrt(2)
    noise[:, -1] = 0.0
    return end[:, None] + shape[None, :] + noise


def false_rate(transient: float, points: int, seeds: int = 2, dof: float = 8.0) -> float:
    rng = np.random.default_rng(7)
    rule = EarlyRule(alpha=0.05)
    settled = 0
    for _ in range(points):
        sd = SD * math.sqrt(rng.chisquare(dof) / dof)  # the pair's learned noise
        _, call = first_settled(rule, STEPS, curves(rng, 0.0, seeds, transient), TOTAL, sd, dof)
        settled += call.settled
    return settled / points


@pytest.mark.parametrize("transient", [0.0, 4.0])
def test_a_true_delta_of_zero_is_settled_at_most_alpha_of_the_time(transient):
    # every settled sign is false at Δ = 0; the union bound over ~27 looks keeps it under α
    assert false_rate(transient, points=400) <= 0.05


def test_a_clear_delta_is_settled_early_with_its_sign():
    rng = np.random.default_rng(3)
    rule = EarlyRule(alpha=0.05, min_fraction=0.3)
    for delta in (-0.05, 0.05):  # the simulated gap far from N*: 25 paired sd
        step, call = first_settled(rule, STEPS, curves(rng, delta, 2, 4.0), TOTAL, SD, 8.0)
        assert call.sign == np.sign(delta)
        assert 0.3 * TOTAL <= step < TOTAL


def test_a_trend_towards_zero_is_not_settled_on_its_current_value():
    # Δ is 0.02 nats now but falls linearly to 0 at the end: the extrapolation sees it
    rule = EarlyRule(alpha=0.05)
    now = PROGRESS <= 0.5
    deltas = np.vstack([0.04 * (1.0 - PROGRESS[now])] * 2)
    deltas += 1e-4 * np.random.default_rng(0).standard_normal(deltas.shape)
    call = rule.call(PROGRESS[now], deltas, SD, 8.0, look=5, looks=20)
    assert call.current > 0.015 and abs(call.predicted) < 0.005
    assert not call.settled


def test_the_looks_spend_exactly_alpha_as_marginal_tails():
    rule = EarlyRule(alpha=0.05)
    looks = rule.look_steps(STEPS, TOTAL)
    dof = 6.0
    tails = [
        2 * stats.t.sf(rule.boundary(k, len(looks), dof), dof) for k in range(1, len(looks) + 1)
    ]
    assert math.isclose(sum(tails), 0.05, rel_tol=1e-6)


def test_looks_start_at_the_minimum_fraction_and_stop_before_the_last_eval():
    looks = EarlyRule(min_fraction=0.3).look_steps(STEPS, TOTAL)
    assert looks[0] == 300 and looks[-1] == 975 and TOTAL not in looks


def test_too_few_evals_or_a_missing_value_decide_nothing():
    assert trend_fit(PROGRESS[:2], np.zeros((2, 2))) is None
    deltas = np.full((2, 8), 0.05)
    deltas[1, 7] = math.nan
    assert EarlyRule().call(PROGRESS[:8], deltas, SD, 8.0, 1, 10) == NOT_SETTLED


def test_a_rule_outside_its_range_is_refused():
    with pytest.raises(ValueError, match="alpha"):
        EarlyRule(alpha=0.6)
    with pytest.raises(ValueError, match="min_fraction"):
        EarlyRule(min_fraction=1.0)
