"""The pure analysis of a runs table: checkpoints, size matching, trends, Δ points, verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dwtune.core import vocabulary
from dwtune.core.analysis import (
    LawView,
    RunTable,
    agreement_test,
    analysis_rule,
    choose_pairs,
    match_sizes,
    pair_points,
    parse_pairs,
    point_verdict,
    select_checkpoints,
    size_groups,
    validate,
)
from dwtune.core.errors import InputError
from dwtune.core.projection import LEVINE2020, optimal_depth, transition_size
from dwtune.core.refine.noise import Noise
from dwtune.core.refine.signs import DeltaPoint, point_signs


def table(depth, params, loss, seed=None, tokens=None, failed=None) -> RunTable:
    arr = lambda v: None if v is None else np.asarray(v, dtype=float)  # noqa: E731
    return RunTable(
        depth=arr(depth),
        width=np.full(len(depth), 64.0),
        params=arr(params),
        loss=arr(loss),
        row=np.arange(1, len(depth) + 1),
        seed=None if seed is None else np.asarray(seed, dtype=np.int64),
        tokens=arr(tokens),
        failed=None if failed is None else np.asarray(failed, bool),
    )


def power_law(n: float) -> float:
    return (8.8e13 / n) ** 0.076


def test_last_checkpoint_and_nearest_to_tokens_pick_the_right_rows():
    # One run (depth 6, seed 0), checkpoints out of order; the loss encodes the tokens.
    tokens = [3e9, 1e9, 2e9, 4e9]
    t = table([6] * 4, [1e6] * 4, [10 + k / 1e9 for k in tokens], [0] * 4, tokens)
    last, info = select_checkpoints(t)
    assert last.tokens.tolist() == [4e9] and last.loss.tolist() == [14.0]
    assert info.rule == "last" and info.runs == 1 and info.rows == 4
    near, info = select_checkpoints(t, tokens=1.9e9)
    assert near.tokens.tolist() == [2e9] and near.row.tolist() == [3]
    assert "each run's checkpoint nearest to 1.9e+09 tokens" in info.describe()


def test_without_tokens_or_steps_every_row_is_a_run_and_repeats_are_replicates():
    t = table([6, 6, 6, 12], [1e6] * 4, [3.0, 3.1, 3.2, 3.0])
    used, info = select_checkpoints(t)
    assert len(used) == 4 and info.runs == 4
    [p] = pair_points(size_groups(used), (6.0, 12.0), 0.25)
    assert not p.paired and p.point.deltas == pytest.approx((3.0 - 3.1,))


def test_tokens_without_a_tokens_column_names_the_fix():
    t = table([6, 12], [1e6, 1e6], [3.0, 3.0])
    with pytest.raises(InputError, match="--columns tokens=COLUMN"):
        select_checkpoints(t, tokens=1e9)


def test_validate_names_the_column_and_row_of_a_non_finite_value():
    t = table([6, 12, 12], [1e6, 1e6, 2e6], [3.0, math.inf, 3.0])
    with pytest.raises(InputError, match=r"column loss row 2: got inf"):
        validate(t)
    # a failed run may have no loss
    validate(table([6, 12], [1e6, 1e6], [3.0, math.nan], failed=[False, True]))


def test_sizes_that_never_meet_name_the_nearest_and_the_window_that_pairs_them():
    t = table([6, 6, 12, 12], [1e6, 1e7, 2e6, 1.5e7], [3.0] * 4)
    groups = size_groups(t)
    with pytest.raises(InputError) as err:
        match_sizes(groups[12.0], groups[6.0], 0.25)
    message = str(err.value)
    assert "nearest are 1e+07 (depth 6) and 1.5e+07 (depth 12)" in message
    assert "--window 0.406 would pair them" in message  # ln 1.5 = 0.4055, rounded up
    assert len(match_sizes(groups[12.0], groups[6.0], 0.406)) == 1


def test_matching_uses_each_size_once_closest_first():
    t = table([6, 6, 12], [1.0e6, 1.1e6, 1.08e6], [3.0] * 3)
    groups = size_groups(t)
    [(_deep, shallow)] = match_sizes(groups[12.0], groups[6.0], 0.25)
    assert shallow.params == 1.1e6


def test_own_size_trend_removes_the_size_difference_and_carries_its_uncertainty():
    # No depth effect at all (Δ = 0 at equal N), but the deeper runs are 10% larger: without
    # the trend Δ would be about -0.076·S·ln 1.1 ≈ -0.02 nats.
    budgets = np.geomspace(1e6, 1e9, 7)
    rng = np.random.default_rng(1)
    rows = [(6, n, power_law(n) + 0.001 * rng.standard_normal()) for n in budgets]
    rows += [(12, 1.1 * n, power_law(1.1 * n)) for n in budgets]
    depth, params, loss = zip(*rows, strict=True)
    points = pair_points(size_groups(table(depth, params, loss)), (6.0, 12.0), 0.25)
    deltas = np.array([p.point.deltas[0] for p in points])
    assert {p.trend for p in points} == {"own"}
    assert np.all(np.abs(deltas) < 0.004)
    assert all(p.point.extra_sd > 0 for p in points)


def test_pooled_trend_when_the_shallower_depth_has_one_size():
    budgets = np.geomspace(1e6, 1e8, 5)
    rows = [(6, 1e7, power_law(1e7))] + [(12, 1.1 * n, power_law(1.1 * n)) for n in budgets]
    depth, params, loss = zip(*rows, strict=True)
    [point] = pair_points(size_groups(table(depth, params, loss)), (6.0, 12.0), 0.25)
    assert point.trend == "pooled"
    assert abs(point.point.deltas[0]) < 1e-3


def test_paired_seeds_and_failures_count_as_the_worst_outcome():
    # seed 1: the deeper net failed, its depth completed 2.9 and 2.8 here -> takes 2.9;
    # seed 2: the shallower one failed -> takes 3.1; seed 3: both failed -> dropped.
    t = table(
        [6, 6, 6, 6, 12, 12, 12, 12],
        [1e6] * 8,
        [3.0, 3.1, math.nan, math.nan, 2.9, math.nan, 2.8, math.nan],
        seed=[0, 1, 2, 3, 0, 1, 2, 3],
        failed=[False, False, True, True, False, True, False, True],
    )
    [p] = pair_points(size_groups(t), (6.0, 12.0), 0.25)
    assert p.paired and p.trend == "none"
    assert p.point.seeds == (0, 1, 2)
    assert p.point.deltas == pytest.approx((-0.1, 2.9 - 3.1, 2.8 - 3.1))
    assert (p.point.failures_deep, p.point.failures_shallow) == (2, 2)


def test_a_depth_that_failed_at_every_seed_of_a_size_loses_there():
    t = table(
        [6, 6, 12, 12],
        [1e6] * 4,
        [3.0, 3.1, math.nan, math.nan],
        seed=[0, 1, 0, 1],
        failed=[False, False, True, True],
    )
    [p] = pair_points(size_groups(t), (6.0, 12.0), 0.25)
    assert p.point.deltas == (math.inf, math.inf)


def test_duplicate_seed_at_one_size_is_an_error():
    t = table([6, 6, 12], [1e6, 1e6, 1e6], [3.0, 3.1, 3.0], seed=[0, 0, 0])
    with pytest.raises(InputError, match=r"seed 0: two runs \(rows 1 and 2\)"):
        size_groups(t)


def test_unpaired_groups_add_the_shallower_means_error():
    t = table([6, 6, 12, 12], [1e6] * 4, [3.0, 3.2, 2.9, 3.0], seed=[0, 1, 5, 6])
    [p] = pair_points(size_groups(t), (6.0, 12.0), 0.25)
    assert not p.paired and p.point.seeds == ()
    assert p.point.deltas == pytest.approx((-0.2, -0.1))
    assert p.point.extra_sd == pytest.approx(np.std([3.0, 3.2], ddof=1) / math.sqrt(2))


def test_pairs_parsing_and_choice():
    assert parse_pairs("6-12, 12-18") == ((6.0, 12.0), (12.0, 18.0))
    assert choose_pairs([12.0, 6.0, 18.0]) == ((6.0, 12.0), (12.0, 18.0))
    with pytest.raises(InputError, match="shallower depth first"):
        parse_pairs("12-6")
    with pytest.raises(InputError, match="depth 24 has no usable run; depths present: 6, 12"):
        choose_pairs([6.0, 12.0], ((12.0, 24.0),))
    with pytest.raises(InputError, match="depth 6 is the only depth"):
        choose_pairs([6.0])


ADJACENT = LawView("levine2020", 1e7, math.nan, math.nan)


@pytest.mark.parametrize(
    ("n", "sign", "expected"),
    [
        (1e6, +1, vocabulary.AGREEMENT_AGREES),  # below the law's N*: deeper loses
        (1e8, -1, vocabulary.AGREEMENT_AGREES),
        (1e8, +1, vocabulary.AGREEMENT_DISAGREES),
        (1e8, 0, vocabulary.AGREEMENT_WITHIN_NOISE),  # no sign decided: not a disagreement
    ],
)
def test_point_verdict(n, sign, expected):
    assert point_verdict(n, sign, ADJACENT) == expected


def test_no_prediction_inside_a_fitted_laws_interval():
    law = LawView("study", 1e7, 5e6, 2e7)
    assert point_verdict(1.5e7, -1, law) == vocabulary.AGREEMENT_NO_PREDICTION
    assert point_verdict(4e6, -1, law) == vocabulary.AGREEMENT_DISAGREES
    assert point_verdict(3e7, -1, law) == vocabulary.AGREEMENT_AGREES


def test_a_sign_needs_the_rules_boundary_not_a_fixed_two_se():
    # Noise known to many dof: the boundary is the normal 1.96 at alpha 0.05, 3.29 at 0.001.
    se = 0.002
    points = [DeltaPoint(n, (z * se,)) for n, z in ((1e8, 1.5), (2e8, 2.5), (4e8, 4.0))]
    noise = Noise.uniform(3, se, 1e6, "test")
    signs = point_signs(points, noise, analysis_rule(0.05))
    assert signs.bounds == pytest.approx([stats.norm.isf(0.025)] * 3, rel=1e-3)
    assert signs.signs.tolist() == [0, 1, 1]
    assert point_signs(points, noise, analysis_rule(0.001)).signs.tolist() == [0, 0, 1]
    # the law says the deeper net wins above 1e7: 1.5 se against it is within noise, 4 se
    # against it is a disagreement
    verdicts = [point_verdict(p.n, s, ADJACENT) for p, s in zip(points, signs.signs, strict=True)]
    assert verdicts == ["within_noise", "disagrees", "disagrees"]
    # few dof widen it: Student t, not normal
    few = point_signs(points, Noise.uniform(3, se, 4, "test"), analysis_rule(0.05))
    assert few.bounds[0] == pytest.approx(stats.t.isf(0.025, 4), rel=1e-3)
    assert few.signs.tolist() == [0, 0, 1]


def test_a_non_adjacent_pair_is_judged_through_the_laws_optimal_depth():
    # Pair 6-24 of a table with depths 6, 12, 18, 24: the deeper net loses where every link
    # loses (N < N*(12), optimal depth below 12), wins where every link wins (N > N*(24),
    # optimal depth above 24), and the law is silent between.
    law = LEVINE2020
    view = LawView(
        law.name, transition_size(law, 24), math.nan, math.nan,
        12.0, transition_size(law, 12), math.nan, math.nan,
    )  # fmt: skip
    for n in np.geomspace(1e6, 1e10, 41):
        depth = optimal_depth(law, n)
        expected = -1 if depth > 24 else 1 if depth < 12 else 0
        assert view.predicted(n) == expected, (n, depth)
    silent = transition_size(law, 18)  # optimal depth 18: between the pair's depths
    assert point_verdict(silent, +1, view) == vocabulary.AGREEMENT_NO_PREDICTION
    assert point_verdict(silent, -1, view) == vocabulary.AGREEMENT_NO_PREDICTION
    assert point_verdict(1e6, +1, view) == vocabulary.AGREEMENT_AGREES
    assert point_verdict(1e6, -1, view) == vocabulary.AGREEMENT_DISAGREES
    assert point_verdict(1e10, +1, view) == vocabulary.AGREEMENT_DISAGREES
    # an adjacent pair: the law's N*(Ld) rule, silent nowhere but at N*(Ld) itself
    adjacent = LawView(law.name, transition_size(law, 12), math.nan, math.nan)
    star = transition_size(law, 12)
    assert [adjacent.predicted(star * f) for f in (0.99, 1.0, 1.01)] == [1, 0, -1]


def test_the_agreement_summary_is_a_binomial_test_of_disagreements():
    right = ["agrees"] * 38 + ["disagrees"] + ["within_noise"] + ["no_prediction"] * 5
    kept = agreement_test(right, "levine2020", 0.05)
    assert (kept.predicted, kept.disagree, kept.no_prediction) == (40, 1, 5)
    assert kept.p_value == pytest.approx(stats.binom.sf(0, 40, 0.025))
    assert not kept.rejected and "consistent with levine2020 at α = 0.05" in kept.summary
    wrong = ["agrees"] * 34 + ["disagrees"] * 6
    rejected = agreement_test(wrong, "levine2020", 0.05)
    assert rejected.p_value == pytest.approx(stats.binom.sf(5, 40, 0.025))
    assert rejected.rejected and "the law is rejected: p = " in rejected.summary
    # the same 6 disagreements among many more predicted points are what a right law gives
    assert not agreement_test(wrong + ["agrees"] * 400, "levine2020", 0.05).rejected
