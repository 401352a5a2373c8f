"""The early sign rule: error control over its looks, early calls of a clear Δ, its inputs."""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from dwtune.backends.simulated_surface import curve_excess
from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.records import grid_requests, record_from_result
from dwtune.core.refine.early import (
    NOT_SETTLED,
    EarlyRule,
    PointNoise,
    call_at,
    first_settled,
    paired_curves,
    planned_evals,
    point_call,
    trend_fit,
)
from dwtune.core.refine.outcome import decide_points
from dwtune.core.spec import SimulatedConfig, spec_from_dict
from tests.helpers.refine_points import REFINE, point
from tests.helpers.specs import small_simulated

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
    # every settled sign is false at Δ = 0; the union bound over its 28 looks keeps it under α
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


def test_a_point_settled_early_keeps_the_early_sign_in_the_pairs_decisions():
    # one seed's Δ says nothing to the end-of-training rule (it needs two); settled early, the
    # point is decided with the rule's sign, and a sign the Δ contradicts is not forced
    points = [
        point(15.0, 0.03, n=3),
        dataclasses.replace(point(16.0, -0.004, n=1, decided=False), early_sign=-1),
        dataclasses.replace(point(16.5, -0.004, n=1, decided=False), early_sign=1),
        point(17.0, -0.03, n=3),
    ]
    decided = decide_points(points, REFINE)
    assert decided[1].decision.decided and decided[1].decision.sign == -1
    assert not decided[2].decision.decided


def test_a_records_curve_gives_the_paired_delta_at_common_eval_steps():
    def curve(values: dict[int, float]) -> list[dict]:
        return [{vocabulary.STEP: s, vocabulary.VAL_LOSS: v} for s, v in values.items()]

    deep = [curve({25: 3.0, 50: 2.5, 75: 2.2}), curve({25: 3.1, 50: 2.6})]
    shallow = [curve({25: 2.9, 50: 2.45, 75: 2.3}), curve({25: 3.0, 50: 2.5, 75: 2.25})]
    steps, deltas = paired_curves(deep, shallow, upto=75)
    assert steps == [25, 50]  # the second seed's deeper net has not reported 75 yet
    assert np.allclose(deltas, [[0.1, 0.05], [0.1, 0.1]])


def test_an_early_stopped_record_keeps_its_stop_step_and_a_finished_one_zero():
    spec = spec_from_dict(small_simulated())
    request = grid_requests(spec)[0]
    curve = [{vocabulary.STEP: s, vocabulary.VAL_LOSS: 3.0 - s / 1000} for s in (100, 200)]
    stopped = record_from_result(request, spec, curve, vocabulary.STATUS_EARLY_STOPPED, 1.0)
    finished = record_from_result(request, spec, curve, vocabulary.STATUS_FINISHED, 1.0)
    assert (stopped.stopped_step, finished.stopped_step) == (200, 0)


@pytest.mark.parametrize("fraction", [0, 1, 1.5])
def test_a_minimum_fraction_outside_the_run_is_refused_naming_the_field(fraction):
    raw = small_simulated(refine={"pairs": [[6, 12]], "early_stop": True})
    raw["refine"]["early_min_fraction"] = fraction
    with pytest.raises(InputError, match=r"refine\.early_min_fraction: got .* expected"):
        spec_from_dict(raw)


def reported(losses: np.ndarray, upto: int | None = None) -> list[list[dict]]:
    """Reported curves (one per seed) of ``losses`` (seeds × STEPS), cut after step ``upto``."""
    return [
        [
            {vocabulary.STEP: step, vocabulary.VAL_LOSS: float(loss)}
            for step, loss in zip(STEPS, row, strict=True)
            if upto is None or step <= upto
        ]
        for row in losses
    ]


def point_curves(delta: float, seeds: int = 2):
    """(deep, shallow) reported curves whose paired Δ is a clear ``delta`` plus noise."""
    rng = np.random.default_rng(11)
    shallow = 3.0 - 0.5 * PROGRESS + EVAL_SD * rng.standard_normal((seeds, PROGRESS.size))
    deep = shallow + curves(rng, delta, seeds, transient=0.0)
    return deep, shallow


def test_a_points_call_is_the_rules_call_on_its_equal_n_delta():
    deep, shallow = point_curves(0.05)
    rule, step, correction = EarlyRule(), STEPS[20], 0.005
    look = point_call(
        rule, reported(deep), reported(shallow), step, STEPS, PointNoise(SD, 8.0, correction)
    )
    upto = STEPS.index(step) + 1
    expected = (deep - shallow)[:, :upto] - correction
    assert look is not None and look.steps == STEPS[:upto]
    np.testing.assert_allclose(look.deltas, expected)
    assert look.call == call_at(rule, STEPS[:upto], expected, STEPS, (SD, 8.0))
    assert look.call.sign == 1  # the clear Δ is settled at this look, the correction kept out


def test_a_points_call_cannot_be_made_before_every_curve_reaches_the_step():
    deep, shallow = point_curves(0.05)
    step = STEPS[20]
    behind = reported(shallow)
    behind[1] = reported(shallow[1:], upto=STEPS[19])[0]  # one seed's shallow net is behind
    noise = PointNoise(SD, 8.0, 0.0)
    assert point_call(EarlyRule(), reported(deep), behind, step, STEPS, noise) is None
    assert point_call(EarlyRule(), reported(deep), reported(shallow), step, STEPS, noise)


@pytest.mark.parametrize("sd", [math.nan, 0.0, -SD, math.inf])
def test_a_points_call_cannot_be_made_without_a_finite_positive_noise(sd):
    deep, shallow = point_curves(0.05)
    noise = PointNoise(sd, 8.0, 0.0)
    assert (
        point_call(EarlyRule(), reported(deep), reported(shallow), STEPS[20], STEPS, noise) is None
    )
