"""A pair's points from trial records: paired evaluation error, unstable trainings, one rule for
the loop and the report, the decided statement (pure)."""

import dataclasses
import math

import numpy as np
import pytest

from dwtune.core import vocabulary
from dwtune.core.records import TrialRecord
from dwtune.core.refine.first_points import (
    PairStart,
    extended_trend,
    extension_budgets,
    on_extended_trend,
    pair_start,
    retrended,
)
from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.points import (
    UNTESTED,
    PairPoint,
    deltas_from_losses,
    make_point,
    mark_unstable,
    merge_points,
    paired_eval_error,
    with_early_ends,
)
from dwtune.core.refine.signs import noise_prior, pair_noise, usable_groups
from dwtune.core.refine.transition import make_transition
from dwtune.core.refine.trend import SizeTrend
from dwtune.core.spec import RefineConfig

# the quickstart's layout: depths 1 and 2, three budgets, two paired seeds, max_seeds 2
QUICK = RefineConfig(pairs=((1, 2),), seeds=2, max_seeds=2, max_rounds=1, noise_prior=0.003)
BUDGETS = (1e5, 3e5, 1e6)


def _record(depth, budget, seed, loss, windows=(), se=math.nan, status="finished"):
    return TrialRecord(
        trial_id=f"{depth}-{budget:g}-{seed}", stage="grid", depth=depth,
        width=int(math.sqrt(budget / (12 * depth))), heads=2, budget=budget,
        params_non_embedding=int(budget), params_total=int(budget), seed=seed, status=status,
        best_val_loss=loss, val_windows=list(windows), val_loss_se=se,
    )  # fmt: skip


def test_identical_windows_give_a_paired_evaluation_error_below_the_quadrature():
    # Both nets scored on the same 128 windows: a window that is hard for one is hard for the
    # other, so the se of their per-window difference is far below the two se's in quadrature.
    rng = np.random.default_rng(0)
    hardness = rng.normal(2.0, 0.5, size=128)  # per-window difficulty shared by both nets
    deep = [_record(2, 1e6, s, 0, hardness + 0.02 + 0.01 * rng.normal(size=128)) for s in (0, 1)]
    shallow = [_record(1, 1e6, s, 0, hardness + 0.01 * rng.normal(size=128)) for s in (0, 1)]
    for record in (*deep, *shallow):
        record.best_val_loss = float(np.mean(record.val_windows))
        record.val_loss_se = float(np.std(record.val_windows, ddof=1) / math.sqrt(128))
    paired = paired_eval_error(deep, shallow)
    quadrature = np.mean([r.val_loss_se**2 for r in deep]) + np.mean(
        [r.val_loss_se**2 for r in shallow]
    )
    assert math.sqrt(paired) < 0.1 * math.sqrt(quadrature)
    assert math.sqrt(paired) == pytest.approx(0.01 / math.sqrt(128), rel=0.3)
    # records without window losses fall back to the quadrature
    for record in (*deep, *shallow):
        record.val_windows = []
    assert paired_eval_error(deep, shallow) == pytest.approx(quadrature)


def _quick_grid(losses: dict) -> PairStart:
    """The quickstart's grid from {(depth, budget, seed): loss}."""
    records = [_record(d, b, s, loss) for (d, b, s), loss in losses.items()]
    return pair_start(records, (1, 2), BUDGETS, (0, 1))


QUICK_LOSSES = {  # the shape of the quickstart's measured losses (nats)
    (1, 1e5, 0): 2.453, (1, 1e5, 1): 2.461, (2, 1e5, 0): 2.547, (2, 1e5, 1): 2.548,
    (1, 3e5, 0): 2.102, (1, 3e5, 1): 2.121, (2, 3e5, 0): 2.186, (2, 3e5, 1): 2.180,
    (1, 1e6, 0): 1.773, (1, 1e6, 1): 1.781, (2, 1e6, 0): 1.813, (2, 1e6, 1): 1.823,
}  # fmt: skip


def test_an_unstable_training_at_one_size_leaves_the_other_sizes_decisions_unchanged():
    clean = decide_points(list(_quick_grid(QUICK_LOSSES).points), QUICK)
    wild = dict(QUICK_LOSSES)
    wild[(1, 1e6, 1)] = 2.034  # seed 1 of the 1-layer net went unstable at 1e6
    marked = decide_points(list(_quick_grid(wild).points), QUICK)
    assert marked[2].unstable_shallow == (1,) and marked[2].failures_shallow == 1
    for before, after in zip(clean[:2], marked[:2], strict=True):
        assert after.decision.sign == before.decision.sign == 1
        assert after.decision.sd == pytest.approx(before.decision.sd, rel=0.2)
    # without the rule, its 0.26-nat gap is seed noise for every size: nothing is decided
    groups = usable_groups([p.delta_point() for p in _quick_grid(wild).points])
    unflagged = pair_noise(
        [dataclasses.replace(p.delta_point()) for p in _quick_grid(wild).points],
        noise_prior(QUICK),
    )
    assert groups[2].size == 2 and unflagged.sd[0] > 5 * marked[0].decision.sd


def test_the_reported_status_uses_the_loops_signs_and_never_a_single_seed():
    grid = list(_quick_grid(QUICK_LOSSES).points)
    decided = decide_points(grid, QUICK)
    t = make_transition((1, 2), grid, QUICK, trials=0, rounds=0, simulated=False)
    assert [p.decision.sign for p in decided] == [1, 1, 1]
    assert t.status == vocabulary.TransitionStatus.CENSORED_HIGH
    assert t.n_star_low == pytest.approx(math.exp(decided[-1].log_n))
    # one seed per size: the loop's rule (two seeds first) decides nothing, nor does the report
    single = {k: v for k, v in QUICK_LOSSES.items() if k[2] == 0}
    records = [_record(d, b, s, loss) for (d, b, s), loss in single.items()]
    one = pair_start(records, (1, 2), BUDGETS, (0,)).points
    four = dataclasses.replace(QUICK, seeds=1, max_seeds=4)
    assert not any(p.decision.decided for p in decide_points(list(one), four))
    t = make_transition((1, 2), list(one), four, trials=0, rounds=0, simulated=False)
    assert t.status == vocabulary.TransitionStatus.UNDECIDED and math.isnan(t.n_star_low)


def test_an_undecided_pair_keeps_the_bound_its_decided_points_give():
    # 1e5 and 3e5 decided positive, 1e6 within noise: undecided, with N* > 3e5
    noisy = dict(QUICK_LOSSES)
    noisy[(2, 1e6, 0)], noisy[(2, 1e6, 1)] = 1.773 + 0.004, 1.781 - 0.006
    grid = list(_quick_grid(noisy).points)
    t = make_transition((1, 2), grid, QUICK, trials=0, rounds=0, simulated=False)
    assert t.status == vocabulary.TransitionStatus.UNDECIDED
    assert t.n_star_low == pytest.approx(math.exp(grid[1].log_n)) and math.isnan(t.n_star_high)
    assert t.statement.startswith(f"N* > {math.exp(grid[1].log_n):.3g} at 95%")
    assert "the 2-layer net loses to the 1-layer net" in t.statement
    assert "within noise" in t.statement


def test_the_statement_names_a_bracketed_n_star_with_its_interval():
    losses = dict(QUICK_LOSSES)
    losses[(2, 1e6, 0)], losses[(2, 1e6, 1)] = 1.740, 1.751  # the 2-layer net wins at 1e6
    grid = list(_quick_grid(losses).points)
    t = make_transition((1, 2), grid, QUICK, trials=0, rounds=0, simulated=False)
    assert t.status == vocabulary.TransitionStatus.BRACKETED
    assert t.statement.startswith(f"N* = {t.n_star:.3g}, 95% interval [{t.n_star_low:.3g}")
    assert "loses to the 1-layer net of the same size below it" in t.statement


def test_points_keep_their_losses_through_a_journal():
    point = _quick_grid(QUICK_LOSSES).points[0]
    loaded = PairPoint.from_dict(point.to_dict())
    assert loaded == point and loaded.losses[0][1:] == (2.547, 2.453)
    assert mark_unstable([loaded]) == mark_unstable([point])


def test_a_failed_training_takes_its_depths_worst_stable_loss():
    losses = [(2.0, 1.9), (math.nan, 1.95), (2.1, math.nan)]
    kept, deltas, failed_deep, failed_shallow = deltas_from_losses(losses, 0.0)
    assert kept == [0, 1, 2] and (failed_deep, failed_shallow) == (1, 1)
    assert deltas == pytest.approx([0.1, 2.1 - 1.95, 2.1 - 1.95])
    flagged = deltas_from_losses(losses, 0.0, [(False, False), (False, True), (False, False)])
    assert flagged[3] == 2  # the flagged shallow training counts as a failure too
    assert SizeTrend([], []).slope_at(1.0) == 0.0


def _four_seed_point() -> PairPoint:
    return PairPoint(
        budget=1e7, log_n=math.log(1e7), width_deep=64, width_shallow=90, seeds=(0, 1, 2, 3),
        deltas=(0.01, 0.02, 0.03, 0.04), decision=UNTESTED, requested=4,
        losses=((0, 3.0, 2.99), (1, 3.0, 2.98), (2, 3.0, 2.97), (3, 3.0, 2.96)),
    )  # fmt: skip


def test_an_early_batch_among_more_seeds_keeps_their_deltas_and_drops_the_early_sign():
    point = with_early_ends(_four_seed_point(), (0, 1), (-0.5, -0.6), -1)
    assert point.seeds == (0, 1, 2, 3)
    assert point.deltas == (-0.5, -0.6, 0.03, 0.04)
    assert point.early_sign == 0  # seeds trained to the end: the end-of-training rule decides
    assert point.losses == ()  # partial losses are no one's twins


def test_a_point_of_its_early_batch_alone_keeps_the_early_sign():
    two = dataclasses.replace(
        _four_seed_point(), seeds=(0, 1), deltas=(0.01, 0.02), requested=2, losses=()
    )
    point = with_early_ends(two, (1, 0), (0.2, 0.1), +1)
    assert point.deltas == (0.1, 0.2)  # aligned with the sorted seeds
    assert point.early_sign == 1


# --------------------------------------------------------------------------- extended trend


def _curved_loss(log_n: float) -> float:
    """A shallower net's loss bending with size: its slope in ln N halves over 1.4 e-folds."""
    return 2.0 + 0.3 * math.exp(-0.5 * (log_n - 16.0))


def _point_at(budget, log_n_shallow, kind, trend, gap=0.0):
    """Both nets at ``budget``; the deeper net ``gap`` nats above the shallower's loss moved
    to its size, so its true equal-N Δ is ``gap``."""
    log_n_deep = math.log(budget)
    deep_loss = _curved_loss(log_n_deep) + gap
    deep = {s: _record(2, budget, s, deep_loss) for s in (0, 1)}
    size = round(math.exp(log_n_shallow))
    shallow = {
        s: dataclasses.replace(
            _record(1, budget, s, _curved_loss(log_n_shallow)),
            params_non_embedding=size, params_total=size,
        )
        for s in (0, 1)
    }  # fmt: skip
    sizes = (log_n_deep, 100, 140)
    point = make_point(budget, sizes, deep, shallow, trend, kind, 2)
    return point


def test_an_extension_point_extends_the_trend_a_point_beyond_the_grid_sizes_is_moved_along():
    # The grid trained the shallower net at two sizes (the law design's first points); the
    # pair extended below them. A point there, its nets 6% apart in size, took the end
    # secant's slope; with the extension's shallow mean the slope there is interpolated.
    grid_x = (16.5, 17.2)
    trend = SizeTrend(list(grid_x), [_curved_loss(x) for x in grid_x])
    shallow_x = {math.exp(15.2): 15.2, math.exp(15.8): 15.8 - 0.06}
    extension = _point_at(math.exp(15.2), 15.2, vocabulary.PointKind.EXTEND, trend)
    near = _point_at(math.exp(15.8), 15.8 - 0.06, vocabulary.PointKind.CUT, trend)

    extended = extended_trend(trend, [extension, near], lambda b: shallow_x[b])
    assert list(extended.x) == [15.2, 16.5, 17.2]  # the extension's size, not the bisect's
    before = abs(np.mean(near.deltas))  # true Δ is 0
    shallow = shallow_x.__getitem__
    corrected, along = on_extended_trend([extension, near], trend, shallow)
    assert list(along.x) == list(extended.x)
    after_point = corrected[1]
    after = abs(np.mean(after_point.deltas))
    assert after < 0.5 * before
    # the correction's error is carried: three sizes show the loss curve's bend
    assert after_point.size_correction_sd > 0.0
    assert after_point.extra_sd >= after_point.size_correction_sd


def test_an_extension_point_verified_later_stays_in_the_trend():
    # Re-verified, an extension point is told again as a verify point at the same budget;
    # the pair's extension budgets keep its shallower net in the trend.
    grid_x = (16.5, 17.2)
    trend = SizeTrend(list(grid_x), [_curved_loss(x) for x in grid_x])
    shallow_x = {math.exp(15.2): 15.2, math.exp(15.8): 15.8 - 0.06}
    extension = _point_at(math.exp(15.2), 15.2, vocabulary.PointKind.EXTEND, trend)
    verified = dataclasses.replace(extension, kind=vocabulary.PointKind.VERIFY)
    near = _point_at(math.exp(15.8), 15.8 - 0.06, vocabulary.PointKind.CUT, trend)
    told = [extension, near, verified]
    merged = merge_points([], told)
    assert [p.kind for p in merged] == [vocabulary.PointKind.VERIFY, vocabulary.PointKind.CUT]
    extensions = extension_budgets(told)
    shallow = shallow_x.__getitem__
    extended = extended_trend(trend, merged, shallow, extensions)
    assert list(extended.x) == [15.2, 16.5, 17.2]
    assert extended_trend(trend, merged, shallow) is trend  # by kind alone: lost


def test_retrending_a_point_twice_changes_nothing_and_no_extension_keeps_the_points():
    trend = SizeTrend([16.5, 17.2], [_curved_loss(16.5), _curved_loss(17.2)])
    other = SizeTrend([15.0, 16.5, 17.2], [_curved_loss(x) for x in (15.0, 16.5, 17.2)])
    point = _point_at(math.exp(16.0), 15.95, vocabulary.PointKind.CUT, trend, gap=0.01)
    once = retrended(point, other, 15.95)
    assert once.deltas != point.deltas
    assert retrended(once, other, 15.95) == once
    back = retrended(once, trend, 15.95)
    # (the records' integer sizes put ln N within 1e-7 of the float one)
    assert back.deltas == pytest.approx(point.deltas, abs=1e-7)
    assert back.extra_sd == pytest.approx(point.extra_sd, abs=1e-7)
    assert on_extended_trend([point], trend, lambda b: 15.95) == ([point], trend)
    loaded = PairPoint.from_dict(once.to_dict())
    assert loaded == once
