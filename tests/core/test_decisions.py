"""Issue 10's decision rules: re-verification, every sign run, failures as outcomes, total size."""

import dataclasses
import math

import pytest

from dwtune.core import vocabulary
from dwtune.core.refine.first_points import pair_start
from dwtune.core.refine.outcome import decide_points, outcome_of
from dwtune.core.refine.points import PairPoint, paired_deltas
from dwtune.core.refine.transition import make_transition
from dwtune.core.refine.trend import SizeTrend
from dwtune.core.spec import RefineConfig
from tests.helpers.refine_points import REFINE as SCANNING
from tests.helpers.refine_points import next_step, point, record

REFINE = dataclasses.replace(SCANNING, scan_spacing=0)  # these tests are about decisions


def test_the_ends_of_a_closing_bracket_are_re_verified_with_twice_their_seeds():
    # support beside each end, five points within 0.3 e-folds: it may close
    low, high = point(14.8, 0.03), point(15.2, -0.03)
    narrow = [low, point(15, 0.02, verified=False), point(15.04, -0.02, verified=False), high]
    narrow.append(point(15.3, -0.04))
    step = next_step(narrow, REFINE, rounds=3)
    assert (step.kind, step.reason, step.point.log_n, step.seeds) == ("verify", "re-verify", 15, 2)
    both = [low, point(15, 0.02), point(15.04, -0.02, verified=False), high, narrow[-1]]
    assert next_step(both, REFINE, rounds=3).point.log_n == 15.04
    done = next_step(
        [low, point(15, 0.02), point(15.04, -0.02), high, narrow[-1]], REFINE, rounds=3
    )
    assert (done.kind, done.reason) == ("done", "tolerance reached")
    full = [
        low,
        point(15, 0.02, n=4, verified=False),
        point(15.04, -0.02, n=4, verified=False),
        high,
        narrow[-1],
    ]
    assert next_step(full, REFINE, rounds=3).kind == "done"  # max_seeds already


def test_a_re_verified_end_that_loses_its_sign_reopens_the_bracket():
    before = [point(15, 0.02), point(16, 0.01), point(16.04, -0.01), point(17, -0.02)]
    assert outcome_of(before, REFINE.max_seeds).low == 16
    flipped = [before[0], point(16, 0.0002, decided=False, n=4), *before[2:]]
    outcome = outcome_of(flipped, REFINE.max_seeds)
    assert (outcome.status, outcome.low, outcome.high) == ("bracketed", 15, 16.04)
    step = next_step(flipped, REFINE, rounds=2)
    assert step.kind == "bisect" and 15 < step.log_n < 16.04


def test_the_outcome_uses_every_point_and_reports_a_second_sign_change():
    # old rule: the first negative point closed the bracket at (16, 17) and hid the rest
    signs = [0.03, 0.02, -0.02, -0.02, 0.02, 0.03, -0.03]
    points = [point(15 + i, m, se=0.001) for i, m in enumerate(signs)]
    outcome = outcome_of(points, REFINE.max_seeds)
    assert outcome.status == vocabulary.TransitionStatus.NON_MONOTONE
    assert {p.log_n for p in outcome.decisive} == {16, 17, 18, 19, 20, 21}
    assert next_step(points, REFINE, rounds=0).reason == "non_monotone"


def _pair(losses_deep, losses_shallow, *, budget=1e7, statuses=None):
    statuses = statuses or {}
    deep = {
        s: record(12, budget, int(budget), s, loss, status=statuses.get((12, s), "finished"))
        for s, loss in enumerate(losses_deep)
    }
    shallow = {
        s: record(6, budget, int(budget), s, loss, status=statuses.get((6, s), "finished"))
        for s, loss in enumerate(losses_shallow)
    }
    return deep, shallow


def test_a_diverged_training_counts_against_its_depth_never_absent():
    deep, shallow = _pair(
        [3.00, 3.02, math.nan], [3.01, 3.01, 3.01], statuses={(12, 2): "diverged"}
    )
    paired = paired_deltas(deep, shallow, SizeTrend([], []))
    assert paired.seeds == (0, 1, 2) and paired.failures_deep == 1
    assert paired.deltas[2] == pytest.approx(3.02 - 3.01)  # the worst loss depth 12 completed
    all_failed = {(12, s): "diverged" for s in range(2)}
    deep, shallow = _pair([math.nan] * 2, [3.0, 3.1], statuses=all_failed)
    paired = paired_deltas(deep, shallow, SizeTrend([], []))
    assert paired.deltas == (math.inf, math.inf) and paired.failures_deep == 2
    both = {(12, 0): "failed", (6, 0): "diverged"}
    deep, shallow = _pair([math.nan, 3.0], [math.nan, 3.1], statuses=both)
    paired = paired_deltas(deep, shallow, SizeTrend([], []))
    assert paired.seeds == (1,) and (paired.failures_deep, paired.failures_shallow) == (1, 1)


def test_a_budget_where_the_deeper_net_always_failed_stays_in_the_pair_and_is_counted():
    budgets = (1e6, 1e7, 1e8)
    records = [record(6, b, int(b), s, 3.0 + 0.002 * s) for b in budgets for s in (0, 1)]
    records += [record(12, 1e6, int(1e6), s, 3.05 - 0.001 * s) for s in (0, 1)]
    records += [record(12, 1e7, int(1e7), s, 3.04 + 0.001 * s) for s in (0, 1)]
    records += [record(12, 1e8, int(1e8), s, math.nan, status="diverged") for s in (0, 1)]
    grid = pair_start(records, (6, 12), budgets, (0, 1))
    assert [p.budget for p in grid.points] == list(budgets)
    assert grid.points[-1].deltas == (math.inf, math.inf) and grid.points[-1].failures_deep == 2
    two = RefineConfig(pairs=((6, 12),), seeds=2, max_seeds=2)  # failures decide at max_seeds
    t = make_transition((6, 12), list(grid.points), two, trials=0, rounds=0, simulated=False)
    assert (t.failures_deep, t.failures_shallow) == (2, 0)
    assert t.status == vocabulary.TransitionStatus.CENSORED_HIGH  # the failure counts as losing
    assert t.n_star_low == pytest.approx(1e8)


def test_total_size_convention_compares_at_equal_total_size():
    def loss(total: float) -> float:  # one law in the total size: Δ is 0 at equal total N
        return 3.0 - 0.25 * math.log(total / 1e6)

    budgets = (1e6, 1e7, 1e8)
    # non-embedding sizes equal, total sizes differ (the shallower net has a wider embedding)
    shallow = [record(6, b, int(b), 0, loss(b * 1.10), total=int(b * 1.10)) for b in budgets]
    deep = [record(12, b, int(b), 0, loss(b * 1.02), total=int(b * 1.02)) for b in budgets]
    total = pair_start(shallow + deep, (6, 12), budgets, (0,), "total")
    assert all(abs(p.deltas[0]) < 1e-6 for p in total.points)
    assert total.points[0].log_n == pytest.approx(math.log(1.02e6), abs=1e-6)
    paper = pair_start(shallow + deep, (6, 12), budgets, (0,), "non_embedding")
    assert all(p.deltas[0] > 0.01 for p in paper.points)  # the old correction: a false Δ


def test_points_from_journals_written_before_issue_10_still_load():
    old = {  # a PairPoint as the refine stage stored it before (no failure or verify fields)
        "budget": 1e7, "log_n": 16.1, "width_deep": 300, "width_shallow": 420,
        "seeds": [0, 1], "deltas": [0.01, 0.012],
        "decision": {"mean": 0.011, "se": 0.0014, "sd": 0.002, "decided": True},
        "kind": "bisect", "requested": 2,
    }  # fmt: skip
    loaded = PairPoint.from_dict(old)
    assert loaded.deltas == (0.01, 0.012) and not loaded.verified and loaded.failures_deep == 0
    [redecided] = decide_points([loaded], REFINE)
    assert not redecided.losses and redecided.deltas == (0.01, 0.012)  # no instability rule
    assert redecided.decision.boundary > 2.0  # decided anew by today's rule


def test_refine_alpha_must_be_a_probability_below_one_half():
    from dwtune.core.errors import InputError
    from dwtune.core.spec import RefineConfig

    with pytest.raises(InputError, match=r"refine.alpha: got 0.7; expected a number in \(0, 0.5\)"):
        RefineConfig(alpha=0.7)


def test_the_size_trend_knows_how_far_its_slope_may_be_off_between_budgets():
    x = [10.0, 11.0, 12.0, 13.0]
    straight = SizeTrend(x, [3.0 - 0.2 * (v - 10) for v in x])
    assert straight.slope_at(11.5) == pytest.approx(-0.2)
    assert straight.slope_sd_at(11.5) == pytest.approx(0.0, abs=1e-12)
    # a bend at 12: secants -0.2, -0.2, -0.4; half their differences 0, 0.1 (ends copy)
    bent = SizeTrend(x, [3.0, 2.8, 2.6, 2.2])
    assert [bent.slope_sd_at(v) for v in x] == pytest.approx([0.0, 0.0, 0.1, 0.1])
    assert bent.slope_sd_at(11.5) == pytest.approx(0.05)
    assert SizeTrend(x[:2], [3.0, 2.8]).slope_sd_at(10.5) == 0.0  # two sizes show no bend


def test_the_size_trend_error_joins_the_points_shared_error():
    deep_size, shallow_size = 1.00e7, 1.03e7  # rounded widths: 3% apart
    deep = {
        0: record(12, 1e7, int(deep_size), 0, 3.00),
        1: record(12, 1e7, int(deep_size), 1, 3.01),
    }
    shallow = {
        0: record(6, 1e7, int(shallow_size), 0, 3.02),
        1: record(6, 1e7, int(shallow_size), 1, 3.02),
    }
    x = [math.log(v) for v in (1e6, 1e7, 1e8)]
    gap = abs(math.log(deep_size / shallow_size))
    for losses, sd in (([3.5, 3.0, 2.5], 0.0), ([3.5, 3.0, 2.0], 0.25 / math.log(10))):
        trend = SizeTrend(x, losses)
        paired = paired_deltas(deep, shallow, trend)
        assert paired.extra_sd == pytest.approx(trend.slope_sd_at(math.log(shallow_size)) * gap)
        assert trend.slope_sd_at(math.log(shallow_size)) == pytest.approx(sd, rel=0.05)
        moved = trend.slope_at(math.log(shallow_size)) * math.log(deep_size / shallow_size)
        assert paired.deltas[0] == pytest.approx(3.00 - 3.02 - moved)
