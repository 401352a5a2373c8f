"""Brackets, sign decisions and proposals of the refine stage (pure logic, no training)."""

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest

from dwtune.core.errors import InputError
from dwtune.core.refine.first_points import pair_start
from dwtune.core.refine.outcome import decide_points, outcome_of
from dwtune.core.refine.points import Decision, PairPoint
from dwtune.core.refine.signs import noise_prior, pair_noise, sign_rule
from dwtune.core.refine.steps import WIDTH_RESOLUTION, seed_sequence, seeds_wanted
from dwtune.core.refine.stick import PROFILE_REACH
from dwtune.core.refine.transition import make_transition
from dwtune.core.spec import RefineConfig
from tests.helpers.refine_points import REFINE, next_step, point, record


def _spread(log_n: float, mean: float, sd: float, n: int) -> PairPoint:
    """A point of ``n`` seeds whose Δ have exactly mean ``mean`` and sample sd ``sd``."""
    z = np.linspace(-1.0, 1.0, n)
    deltas = tuple(mean + sd * z / np.std(z, ddof=1))
    base = point(log_n, mean, n=n, decided=False)
    return dataclasses.replace(base, deltas=deltas)


def test_a_sign_is_decided_only_beyond_the_rules_boundary():
    # one rule: |mean|/se beyond the α-spent t boundary of the point's look on the noise's dof
    rule = sign_rule(REFINE)
    for mean in (0.001, 0.003, 0.006, -0.006):
        decided = decide_points([_spread(15, mean, 0.004, 3)], REFINE)[0]
        noise = pair_noise([decided.delta_point()], noise_prior(REFINE))
        boundary = rule.boundary(3, float(noise.dof[0]))
        assert decided.decision.boundary == pytest.approx(boundary)
        beyond = abs(decided.decision.mean) > boundary * decided.decision.se
        assert decided.decision.decided == beyond
        assert decided.decision.sign == (int(np.sign(mean)) if beyond else 0)
    assert not decide_points([_spread(15, 0.002, 0.004, 3)], REFINE)[0].decision.decided
    assert decide_points([_spread(15, -0.02, 0.004, 3)], REFINE)[0].decision.sign == -1


def test_seeds_wanted_jumps_to_what_the_mean_needs_within_the_cap():
    close = Decision(0.003, 0.002, 0.002, False, boundary=2.0)  # (2·0.002/0.003)² = 1.8 -> 2
    assert seeds_wanted(close, 1, REFINE) == 2
    tiny = Decision(0.0002, 0.002, 0.002, False, boundary=2.0)
    assert seeds_wanted(tiny, 1, REFINE) == REFINE.max_seeds


def test_seed_sequence_starts_with_the_grid_seeds():
    assert seed_sequence((0, 1), 4) == (0, 1, 2, 3)
    assert seed_sequence((5,), 3) == (5, 6, 7)
    assert seed_sequence((0, 1, 2), 2) == (0, 1, 2)


def test_outcomes_bracket_or_censor_by_the_first_negative_delta():
    up = [point(15, 0.02), point(16, 0.01), point(17, -0.01), point(18, -0.02)]
    bracketed = outcome_of(up, REFINE.max_seeds)
    assert (bracketed.status, bracketed.low, bracketed.high) == ("bracketed", 16, 17)
    high = outcome_of(up[:2], REFINE.max_seeds)
    assert (high.status, high.low) == ("censored_high", 16)
    low = outcome_of(up[2:], REFINE.max_seeds)
    assert (low.status, low.high) == ("censored_low", 17)
    noisy_top = [*up[:2], point(17, -0.0005, decided=False, n=4)]
    undecided = outcome_of(noisy_top, REFINE.max_seeds)
    assert (undecided.status, undecided.low, undecided.high) == ("undecided", 16, 17)


def test_an_undecided_bracket_end_is_verified_before_bisecting():
    points = [point(15, 0.02), point(16, 0.001, decided=False), point(17, -0.02)]
    step = next_step(points, REFINE, rounds=0)
    assert step.kind == "verify" and step.point.log_n == 16


def test_bisection_proposes_the_midpoint_in_log_n_until_tolerance_or_rounds():
    points = [point(15, 0.02), point(17, -0.02)]
    step = next_step(points, REFINE, rounds=0)
    assert (step.kind, step.log_n) == ("bisect", 16)
    # a bracket closes once its kink correction has points beside each end (support probes)
    # (and the reported N*'s line five points within 0.3 e-folds, two a side)
    supported = [point(14.7, 0.03), point(14.85, 0.025), *points, point(17.3, -0.03)]
    assert next_step(supported, REFINE, rounds=REFINE.max_rounds).reason.startswith("max_rounds")
    narrow = [point(14.8, 0.03), point(15, 0.02), point(15.04, -0.02), point(15.2, -0.03)]
    narrow.append(point(15.3, -0.035))  # the reported N*'s fifth point within 0.3 e-folds
    # e^0.04 - 1 = 4.1% <= 5%
    assert next_step(narrow, REFINE, rounds=0).reason == "tolerance reached"


def test_with_no_rounds_a_bracket_closes_on_its_own_points_without_support_probes():
    # max_rounds 0 (search_spaces/cpu_transition.yaml): the stage verifies the grid's signs and
    # trains no new size, not even a support probe beside a bracket end (there, one would have
    # gone to 1.8e6, next to the size whose 1-layer net collapsed)
    points = [point(15, 0.02), point(17, -0.02)]
    step = next_step(points, REFINE, rounds=REFINE.max_rounds)
    assert step.kind == "scan"  # with rounds left, a support probe beside an end
    none = dataclasses.replace(REFINE, max_rounds=0)
    closed = next_step(points, none, rounds=0)
    assert closed.kind == "done" and closed.reason.startswith("max_rounds (0)")


def test_a_support_probe_whose_seeds_all_failed_is_not_proposed_again():
    # Its point has no Δ and counts for nothing beside the bracket, but the size was tried:
    # proposing it again trained the same nets for ever where no width rounding tells sizes
    # apart (benchmarks/coverage.py's divergences surface, refine.tolerance 0.2).
    below, above = [point(14.68, 0.03), point(15, 0.02)], [point(15.1, -0.02), point(15.3, -0.03)]
    points = [*below, *above]  # one point within the stick's reach (0.3) below the bracket
    first = next_step(points, REFINE, rounds=REFINE.max_rounds)
    assert first.kind == "scan" and first.log_n == pytest.approx(14.85)  # a support probe
    failed = dataclasses.replace(
        point(first.log_n, 0.0, decided=False), deltas=(), seeds=(), kind="scan"
    )
    tried = sorted([*points, failed], key=lambda p: p.log_n)
    again = next_step(tried, REFINE, rounds=REFINE.max_rounds)
    assert again.kind == "done" or again.log_n != pytest.approx(first.log_n)


def test_a_bracket_closes_only_once_the_reported_line_has_five_points_two_a_side():
    # The kink correction's stick is content (two a side within 0.3 e-folds of a 0.1-wide
    # bracket), but the line of the reported N* wants five points within 0.3: with four the
    # pair would report the chord, so the side with fewer (here a tie: below) gets a probe.
    four = [point(14.8, 0.03), point(15, 0.02), point(15.1, -0.02), point(15.3, -0.03)]
    step = next_step(four, REFINE, rounds=REFINE.max_rounds)
    assert step.kind == "scan" and step.log_n == pytest.approx(15 - 0.5 * PROFILE_REACH)
    five = sorted([*four, point(step.log_n, 0.025)], key=lambda p: p.log_n)
    assert next_step(five, REFINE, rounds=REFINE.max_rounds).kind == "done"
    # a wide bracket's stick takes points a bracket's width away; the line takes them within
    # 0.3 only, so one side gets a probe 0.15 beside its end although the stick has its two
    # (gaps within refine.scan_spacing, 0.35, so no scan probe comes first)
    wide = [point(14.66, 0.03), point(15, 0.02), point(16, -0.02), point(16.3, -0.03)]
    wide += [point(15.33, 0.0001, decided=False, n=4), point(15.66, -0.0001, decided=False, n=4)]
    step = next_step(sorted(wide, key=lambda p: p.log_n), REFINE, rounds=1)
    assert step.kind == "scan" and step.log_n == pytest.approx(15 - 0.15)


def test_points_within_noise_split_the_bracket_then_stop_it():
    ends = [point(15, 0.02), point(17, -0.02)]
    one = [*ends, point(16.5, 0.0001, decided=False, n=4, kind="bisect")]
    step = next_step(sorted(one, key=lambda p: p.log_n), REFINE, rounds=1)
    assert step.kind == "bisect" and step.log_n == pytest.approx(15.75)  # wider side
    support = [point(14.7, 0.03), point(17.3, -0.03)]  # beside each end: the pair may close
    two = [*one, *support, point(16.2, 0.0001, decided=False, n=4, kind="bisect")]
    step = next_step(sorted(two, key=lambda p: p.log_n), REFINE, rounds=2)
    assert step.kind == "done" and step.reason.startswith("noise floor")
    assert (step.outcome.low, step.outcome.high) == (15, 17)


def test_grid_pair_refuses_a_depth_without_finished_grid_trials():
    records = [record(6, 1e6, 1_000_000, 0, 4.0), record(6, 1e7, 10_000_000, 0, 3.4)]
    with pytest.raises(InputError) as info:
        pair_start(records, (6, 12), (1e6, 1e7), (0,))
    assert str(info.value) == (
        "refine pair [6, 12]: depth 12 has no finished grid trials (its records were "
        "removed, or all failed); rerun `dwtune run SPEC` to train its grid (finished trials "
        "are kept)"
    )


def test_delta_is_compared_at_equal_size_along_the_shallow_trend():
    def loss(params: float) -> float:  # the same size law for both depths: Δ is 0 at equal N
        return 3.0 - 0.25 * math.log(params / 1e6)

    budgets = (1e6, 1e7, 1e8)
    shallow = [record(6, b, int(b * 1.03), 0, loss(b * 1.03)) for b in budgets]
    deep = [record(12, b, int(b * 0.98), 0, loss(b * 0.98)) for b in budgets]
    grid = pair_start(shallow + deep, (6, 12), budgets, (0,))
    raw = [d.best_val_loss - s.best_val_loss for d, s in zip(deep, shallow, strict=True)]
    assert all(r > 0.01 for r in raw)  # width rounding alone makes the deeper net look worse
    assert all(abs(p.deltas[0]) < 1e-6 for p in grid.points)


def test_a_censored_transition_has_no_n_star_but_keeps_its_bound():
    points = [_spread(15, 0.03, 0.002, 3), _spread(16, 0.02, 0.002, 3)]
    t = make_transition((6, 12), points, REFINE, trials=0, rounds=0, simulated=False)
    assert t.status == "censored_high"
    assert math.isnan(t.n_star) and math.isnan(t.width_deep) and math.isnan(t.n_star_high)
    assert t.n_star_low == pytest.approx(math.exp(16))


def test_the_pure_modules_import_no_heavy_library():
    code = (
        "import sys, dwtune.core.refine.transition, dwtune.core.refine.steps, "
        "dwtune.core.refine.estimate, dwtune.core.refine.first_points, dwtune.backends.simulated; "
        "print(sorted(m for m in ('torch', 'ray', 'optuna', 'pyarrow') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_one_seed_never_decides_a_sign_however_large_its_delta():
    spike = point(15, 0.1, decided=False, n=1)  # a 50-sd loss spike at one seed
    decided = decide_points([spike, _spread(17, -0.02, 0.002, 3)], REFINE)
    assert not decided[0].decision.decided and decided[1].decision.decided
    two = [_spread(15, 0.1, 0.002, 2), _spread(17, -0.02, 0.002, 3)]
    assert decide_points(two, REFINE)[0].decision.decided
    alone = RefineConfig(pairs=((6, 12),), seeds=1, max_seeds=1)  # one seed is all there is
    assert decide_points([spike, *two[1:]], alone)[0].decision.decided


def test_a_bracketed_pair_is_scanned_beside_the_bracket_before_bisecting():
    points = [point(12, 0.04), point(13.2, 0.03), point(14.4, 0.02), point(15.6, -0.02)]
    step = next_step(points, REFINE, rounds=0)
    # the gap next to the bracket first, split into ceil(1.2 / 0.35) = 4 parts
    assert step.kind == "scan" and step.log_n == pytest.approx(13.2 + 1.2 / 4)
    assert step.seeds == REFINE.seeds  # one round of seeds: a provisional sign
    filled = [*points, *(point(13.2 + k * 0.3, 0.025) for k in (1, 2, 3))]
    filled += [point(12 + k * 0.3, 0.035) for k in (1, 2, 3)]
    step = next_step(sorted(filled, key=lambda p: p.log_n), REFINE, rounds=0)
    assert step.kind == "bisect" and step.log_n == pytest.approx(15.0)
    off = RefineConfig(pairs=((6, 12),), tolerance=0.05, seeds=1, max_seeds=4, scan_spacing=0)
    assert next_step(points, off, rounds=0).kind == "bisect"


def test_a_dip_the_scan_finds_makes_the_pair_non_monotone():
    points = [point(12, 0.04), point(13.2, 0.03), point(14.4, 0.02), point(15.6, -0.02)]
    dip = point(13.5, -0.02, n=2, kind="scan")  # decided negative between positive points
    outcome = outcome_of(sorted([*points, dip], key=lambda p: p.log_n), 4)
    assert outcome.status == "non_monotone"
    provisional = point(13.5, -0.02, decided=False, n=1, kind="scan")
    step = next_step(sorted([*points, provisional], key=lambda p: p.log_n), REFINE, 0)
    assert step.kind == "verify" and step.point.log_n == 13.5  # tested before it counts


def test_a_probe_that_would_repeat_a_width_is_skipped():
    points = [point(12, 0.04), point(13.2, 0.03), point(14.4, 0.02), point(15.6, -0.02)]
    widths = [p.width_deep for p in points]  # point() gives width 100·ln N

    def repeating(width: int, where):
        """Widths as point() gives them, except ``width`` wherever ``where(ln N)`` holds."""
        return lambda x: width if where(x) else int(100 * x)

    above = repeating(widths[1], lambda x: x > 13.2)
    step = next_step(points, REFINE, 0, width_of=above)
    assert step.kind == "scan" and step.log_n == pytest.approx(12 + 1.2 / 4)
    below = repeating(widths[0], lambda x: x < 14.4)  # every scan probe repeats a width
    step = next_step(points, REFINE, 0, width_of=below)
    assert step.kind == "bisect" and step.log_n == pytest.approx(15.0)
    # the bisection point too: nothing new can be trained, the pair closes
    everywhere = repeating(widths[0], lambda x: True)
    step = next_step(points, REFINE, 0, width_of=everywhere)
    assert step.kind == "done" and step.reason == WIDTH_RESOLUTION


@pytest.mark.parametrize(
    ("field", "value"), [("scan_spacing", -0.1), ("scan_reach", 1e9), ("scan_spacing", 0.01)]
)
def test_scan_settings_out_of_range_are_refused(field, value):
    with pytest.raises(InputError, match=f"refine.{field}"):
        RefineConfig(pairs=((6, 12),), **{field: value})
