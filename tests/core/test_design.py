"""The law design (core/refine/design.py) and the refine steps it drives (core/refine/steps.py)."""

import dataclasses
import math

import pytest

from dwtune.core.errors import InputError
from dwtune.core.fit.censored import running_law
from dwtune.core.projection import reference, transition_size
from dwtune.core.refine.design import (
    GUARD,
    PLAN_Z,
    design_for,
    extension,
    interpolated_cut,
    law_sizes,
)
from dwtune.core.refine.steps import decide_seeds
from dwtune.core.refine.stick import PROFILE_REACH
from dwtune.core.spec import RefineConfig
from tests.helpers.refine_points import REFINE, next_step, point

LAW = dataclasses.replace(REFINE, design="law", reach=0.5)
SPAN = (12.0, 24.0)  # ln of space.budgets' range


def test_law_sizes_sit_reach_e_folds_either_side_of_the_laws_n_star():
    law = reference("levine2020")
    low, high = law_sizes(law, 18, 0.5)
    assert math.log(high / low) == pytest.approx(1.0)
    assert math.sqrt(low * high) == pytest.approx(transition_size(law, 18))


def test_an_extension_goes_one_first_span_beyond_its_points_in_the_censored_direction():
    assert extension([16.0, 17.0], +1, 0.5, SPAN) == pytest.approx(18.0)
    # one first span (2·reach) beyond, no longer the doubled span (20): the trend's spacing
    assert extension([16.0, 17.0, 18.0], +1, 0.5, SPAN) == pytest.approx(19.0)
    assert extension([16.0, 17.0], -1, 0.5, SPAN) == pytest.approx(15.0)
    assert extension([16.0, 16.2], +1, 0.5, SPAN) == pytest.approx(17.2)  # 2·reach


def test_an_extension_stops_at_the_budget_range():
    assert extension([22.0, 23.5], +1, 0.5, SPAN) == pytest.approx(24.0)
    assert extension([23.0, 24.0], +1, 0.5, SPAN) is None
    assert extension([12.0, 13.0], -1, 0.5, SPAN) is None
    assert extension([16.0, 17.0], 0, 0.5, SPAN) is None


def test_a_cut_lies_beside_the_interpolated_root_on_the_wider_side():
    # the line through +0.03 at 10 and -0.01 at 11 has its root at 10.75 (slope 0.04 / e-fold)
    assert interpolated_cut(10.0, 11.0, 0.03, -0.01) == pytest.approx(0.75 + 10.0)
    # PLAN_Z·se / slope e-folds toward the wider (lower) side of the root
    se = 0.001
    expected = 10.75 - PLAN_Z * se / 0.04
    assert interpolated_cut(10.0, 11.0, 0.03, -0.01, se) == pytest.approx(expected)
    # upper side wider: the cut moves up from the root
    upper = interpolated_cut(10.0, 11.0, 0.01, -0.03, se)
    assert upper == pytest.approx(10.25 + PLAN_Z * se / 0.04)


def test_a_cut_keeps_its_guard_from_the_ends_and_falls_back_to_the_midpoint():
    near_end = interpolated_cut(10.0, 11.0, 0.0001, -0.1)
    assert near_end == pytest.approx(10.0 + GUARD)
    assert interpolated_cut(10.0, 11.0, math.inf, -0.01) == pytest.approx(10.5)
    assert interpolated_cut(10.0, 11.0, -0.01, -0.02) == pytest.approx(10.5)


def test_the_law_design_extends_a_censored_pair_and_the_grid_design_closes_it():
    deeper_loses = [point(16, 0.02), point(17, 0.01)]  # N* above both points
    step = next_step(deeper_loses, LAW, rounds=0, span=SPAN)
    assert (step.kind, step.log_n) == ("extend", pytest.approx(18.0))
    deeper_wins = [point(16, -0.01), point(17, -0.02)]
    step = next_step(deeper_wins, LAW, rounds=0, span=SPAN)
    assert (step.kind, step.log_n) == ("extend", pytest.approx(15.0))
    closed = next_step(deeper_loses, REFINE, rounds=0, span=SPAN)
    assert (closed.kind, closed.reason) == ("done", "censored_high")
    at_edge = next_step([point(23, 0.02), point(24, 0.01)], LAW, 0, span=SPAN)
    assert (at_edge.kind, at_edge.reason) == ("done", "censored_high")


def test_the_law_design_widens_a_pair_whose_first_points_are_all_within_noise():
    # Both first sizes so near N* that Δ stays within noise at max_seeds: the grid design closes
    # the pair undecided; the law design widens towards the side the mean Δ leans to, by the
    # span its points cover (at least 2·reach), and brackets from there as a censored pair.
    def near(log_n: float, mean: float):
        return point(log_n, mean, decided=False, n=LAW.max_seeds)

    leans_up = [near(16, 0.0004), near(17, -0.0001)]  # mean Δ positive: N* above
    closed = next_step(leans_up, REFINE, rounds=0, span=SPAN)
    assert (closed.kind, closed.reason) == ("done", "undecided")
    step = next_step(leans_up, LAW, rounds=0, span=SPAN)
    assert (step.kind, step.log_n) == ("extend", pytest.approx(18.0))
    leans_down = [near(16, 0.0001), near(16.2, -0.0004)]
    step = next_step(leans_down, LAW, rounds=0, span=SPAN)
    assert (step.kind, step.log_n) == ("extend", pytest.approx(15.0))  # 2·reach below
    # the widened point decided negative: N* lies below it, among or under the first points
    widened = [*leans_up, point(18, -0.02, n=2)]
    step = next_step(widened, LAW, rounds=0, span=SPAN)
    # one first span (2·reach) below the lowest point, no longer the doubled span (16 − 2)
    assert (step.kind, step.log_n) == ("extend", pytest.approx(16.0 - 1.0))


def test_the_law_design_cuts_beside_the_root_where_the_grid_design_bisects():
    ends = [point(15, 0.03), point(17, -0.01)]
    grid = next_step(ends, REFINE, rounds=0)
    law = next_step(ends, LAW, rounds=0)
    assert grid.log_n == pytest.approx(16.0)
    se = 0.002 / math.sqrt(decide_seeds(LAW))  # the helper's sd over √seeds
    assert law.kind == "bisect"
    assert law.log_n == pytest.approx(interpolated_cut(15, 17, 0.03, -0.01, se))
    assert law.log_n != pytest.approx(16.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"design": "dense"}, "refine.design: got 'dense'"),
        ({"reach": 0.0}, "refine.reach"),
    ],
)
def test_design_settings_out_of_range_are_refused(changes, message):
    with pytest.raises(InputError, match=message):
        RefineConfig(pairs=((6, 12),), **changes)


def test_the_law_design_grid_trains_each_pairs_two_depths_at_its_two_sizes():
    from dwtune.core.spec import load_spec

    shipped = load_spec("search_spaces/paper.yaml")
    assert shipped.refine.design == "law"  # as shipped
    spec = shipped.with_overrides("refine.waves=1")  # every pair in the grid stage
    dense = spec.with_overrides("refine.design=grid")  # every depth at every budget
    assert len(dense.grid()) == len(dense.space.depths) * len(dense.space.budgets)
    pairs = spec.refine.pairs
    cells = {(c.depth, round(c.budget)) for c in spec.grid()}
    wanted = {
        (d, round(n)) for pair in pairs for n in design_for(spec).pair_budgets(pair) for d in pair
    }
    # the shallowest depth, a shallower net at two sizes only, is trained at its pair's law N*
    # too, so that its size trend shows a bend (LawDesign.depth_budgets)
    first = min(pairs)
    centre = (first[0], round(transition_size(reference(spec.fit.reference), first[1])))
    assert cells == wanted | {centre} and len(cells) == 2 * 2 * len(pairs) + 1
    first_sizes = {*design_for(spec).pair_budgets(first), design_for(spec).law_centre(first)}
    assert design_for(spec).depth_budgets(first[0]) == tuple(sorted(first_sizes))
    middle = pairs[1][0]  # shallower in one pair, deeper in another: four sizes already
    assert len(design_for(spec).depth_budgets(middle)) == 4
    assert design_for(dense).depth_budgets(middle) == tuple(sorted(dense.space.budgets))


def test_waves_rank_the_pairs_by_depth_and_the_grid_trains_the_first_wave_alone():
    from dwtune.core.spec import load_spec

    spec = load_spec(
        "search_spaces/simulated.yaml",
        [
            "refine.design=law",
            "refine.waves=2",
            "refine.pairs=[[24, 30], [6, 12], [30, 36], [12, 18], [18, 24]]",
        ],
    )
    first, second = design_for(spec).waves()
    assert first == ((6, 12), (12, 18), (18, 24))  # the shallower three, the larger run
    assert second == ((24, 30), (30, 36))  # in refine.pairs' order
    assert {c.depth for c in spec.grid()} == {6, 12, 18, 24}
    assert spec.grid() == design_for(spec).wave_cells(first)
    # a later wave's cells at another law's sizes; a depth the earlier waves gave two sizes
    # needs no third (its pair's law N*) for its size trend
    law = dataclasses.replace(reference("levine2020"), b=0.07)
    cells = design_for(spec).wave_cells(second, law, {24: {1.0, 2.0}})
    assert {(c.depth, c.budget) for c in cells} == {
        (d, n) for pair in second for d in pair for n in design_for(spec).pair_budgets(pair, law)
    }
    alone = design_for(spec).wave_cells(second, law)  # depth 24 trained nowhere before: its N* too
    assert len(alone) == len(cells) + 1
    # the grid design trains every depth at every budget first: one wave, whatever is asked
    dense = spec.with_overrides("refine.design=grid")
    assert design_for(dense).waves() == (dense.refine.pairs,)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["refine.design=law", "refine.waves=7"], r"refine\.waves: got 7 for 6 refine pair"),
        (["refine.design=law", "refine.waves=0"], r"refine\.waves"),
    ],
)
def test_waves_a_spec_cannot_run_are_refused_with_their_fix(overrides, message):
    from dwtune.core.spec import load_spec

    with pytest.raises(InputError, match=message):
        load_spec("search_spaces/simulated.yaml", overrides)


def _observation(depth_shallow: int, depth_deep: int, law, sigma: float = 0.01):
    from dwtune.core.fit.censored import TransitionObservation

    log_n = math.log(transition_size(law, depth_deep))
    return TransitionObservation(
        f"pair {depth_shallow}-{depth_deep}", depth_shallow, depth_deep, "bracketed", log_n, sigma
    )


def test_the_running_law_is_the_fit_on_the_pairs_refined_so_far():
    planted = dataclasses.replace(reference("levine2020"), b=0.07)
    pairs = [(6, 12), (12, 18), (18, 24)]
    law = running_law([_observation(*p, planted) for p in pairs], reference("levine2020"))
    assert (law.a, law.b) == pytest.approx((planted.a, planted.b), rel=1e-6)
    assert law.name == "running fit" and "pair 12-18" in law.source
    assert transition_size(law, 48) == pytest.approx(transition_size(planted, 48), rel=1e-5)


def test_the_running_law_falls_back_where_the_pairs_determine_no_rising_law():
    fallback = reference("levine2020")
    planted = dataclasses.replace(fallback, b=0.07)
    assert running_law([_observation(6, 12, planted)], fallback) is fallback
    falling = dataclasses.replace(fallback, b=-0.05)
    pairs = [_observation(6, 12, falling), _observation(12, 18, falling)]
    assert running_law(pairs, fallback) is fallback


def test_the_law_design_without_pairs_is_refused_with_its_fix():
    from dwtune.core.spec import load_spec

    with pytest.raises(InputError, match=r"refine\.design: got 'law' without refine\.pairs"):
        load_spec("search_spaces/simulated.yaml", ("refine.design=law", "refine.pairs=[]"))


def test_a_bracket_closes_only_once_the_kink_correction_has_points_on_both_sides():
    """The estimate's kink-bias stick needs STICK_MIN_SIDE points (the end included) within
    its reach beside each bracket end, and the reported N*'s line ESTIMATE_MIN_POINTS within
    PROFILE_REACH: a support probe goes where they lack, then the pair closes (grid and law
    design alike)."""
    refine = dataclasses.replace(REFINE, scan_spacing=0)  # no scan: the support alone
    reach = PROFILE_REACH  # the bracket is narrower than the stick's reach
    ends = [point(15.0, 0.004, n=4), point(15.04, -0.004, n=4)]
    far = [point(13.0, 0.03, n=4), point(17.0, -0.03, n=4)]  # beyond the reach
    step = next_step([far[0], *ends, far[1]], refine, rounds=0)
    assert step.kind == "scan" and step.log_n == pytest.approx(15.0 - 0.5 * reach)
    below = point(step.log_n, 0.01)
    step = next_step([far[0], below, *ends, far[1]], refine, rounds=0)
    assert step.kind == "scan" and step.log_n == pytest.approx(15.04 + 0.5 * reach)
    above = point(step.log_n, -0.01)
    # two a side, but four within 0.3 e-folds: the reported N*'s line wants a fifth (the
    # side with fewer, a tie here: below, 0.5 of the reach taken, so 0.75)
    step = next_step([far[0], below, *ends, above, far[1]], refine, rounds=0)
    assert step.kind == "scan" and step.log_n == pytest.approx(15.0 - 0.75 * reach)
    fifth = point(step.log_n, 0.012)
    step = next_step([far[0], fifth, below, *ends, above, far[1]], refine, rounds=0)
    assert (step.kind, step.reason) == ("done", "tolerance reached")


def test_no_extension_lands_beyond_the_shallower_nets_trend_by_more_than_one_first_span():
    # first points 3 e-folds above N*: the pair extends down; each extension trains the
    # shallower net and joins its trend, whose sizes are the first points and the extensions.
    # Before this rule, the third extension jumped 2.8 e-folds (the span doubled), so the trend
    # slope between the last two sizes was a secant over e-folds no shallower net was trained in
    law = dataclasses.replace(REFINE, design="law", reach=0.35)
    truth, span = 17.0, (math.log(1e6), math.log(1e10))

    def delta(log_n: float) -> float:
        return 0.01 * (truth - log_n)

    points = [point(truth + 3.0 + d, delta(truth + 3.0 + d), n=3) for d in (-0.35, 0.35)]
    trend = [p.log_n for p in points]
    for _ in range(12):
        step = next_step(points, law, rounds=0, span=span)
        if step.kind != "extend":
            break
        assert min(trend) - 2 * law.reach - 1e-9 <= step.log_n <= max(trend) + 2 * law.reach
        trend.append(step.log_n)
        points = sorted([*points, point(step.log_n, delta(step.log_n), n=3,
                                        kind="extend")], key=lambda p: p.log_n)  # fmt: skip
    assert step.kind != "extend" and min(trend) < truth < max(trend)  # it bracketed N*
