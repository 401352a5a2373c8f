"""dwtune.core.fit.bootstrap: the study bootstrap draws seeds jointly across pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from dwtune.core.fit import TransitionObservation
from dwtune.core.fit.bootstrap import (
    PairPoints,
    bootstrap_fit,
    build_replicates,
    resample_seeds,
    study_replicate,
)
from tests.helpers.fit_sim import PAIRS, A, B, planted_log_n

SEEDS = tuple(range(8))
LOG_SIZES = np.linspace(-1.5, 1.5, 7)  # ln N − ln N*: a pair's points around its transition
GAP, SCALE, NOISE = 0.05, 0.5, 0.004  # nats, e-folds, nats


@dataclass(frozen=True)
class StandInPoint:
    """The DeltaPoint fields the bootstrap touches (INTERFACES.md §1)."""

    n: float
    deltas: tuple[float, ...]
    seeds: tuple[int, ...] = ()


def stand_in_estimate(points, *, noise_prior=None, n_boot=0, seed=0):
    """Zero of mean Δ by linear interpolation in ln N; σ from the se at the two ends."""
    x = np.log([p.n for p in points])
    mean = np.array([np.mean(p.deltas) for p in points])
    se = np.array([np.std(p.deltas, ddof=1) / math.sqrt(len(p.deltas)) for p in points])
    if (mean > 0).all():
        return SimpleNamespace(status="censored_high", n_star=None, sigma_ln=None)
    if (mean < 0).all():
        return SimpleNamespace(status="censored_low", n_star=None, sigma_ln=None)
    i = int(np.argmax(mean < 0))
    if i == 0:
        return SimpleNamespace(status="censored_low", n_star=None, sigma_ln=None)
    slope = (mean[i] - mean[i - 1]) / (x[i] - x[i - 1])
    zero = x[i - 1] - mean[i - 1] / slope
    sigma = max(se[i - 1], se[i]) / abs(slope)
    return SimpleNamespace(status="bracketed", n_star=math.exp(zero), sigma_ln=sigma)


def synthetic_study(rng, *, shared: float, per_pair: float) -> list[PairPoints]:
    """Six pairs, 7 sizes, 8 seeds; a seed's effect on Δ is ``shared`` (the same in every pair:
    correlated pairs) plus ``per_pair`` (independent between pairs); NOISE per training."""
    seed_effect = rng.normal(0.0, shared, len(SEEDS))
    pairs = []
    for shallow, deep in PAIRS:
        own = rng.normal(0.0, per_pair, len(SEEDS))
        points = []
        for dx in LOG_SIZES:
            mean = -GAP * math.tanh(dx / SCALE)
            deltas = mean + seed_effect + own + rng.normal(0.0, NOISE, len(SEEDS))
            points.append(StandInPoint(math.exp(planted_log_n(deep) + dx), tuple(deltas), SEEDS))
        pairs.append(PairPoints(f"{shallow}-{deep}", shallow, deep, tuple(points)))
    return pairs


MEAN_DEPTH = float(np.mean([d for _, d in PAIRS]))  # 28 layers: the line's level


def _spreads(pairs, joint: bool) -> tuple[float, float]:
    """Bootstrap sd of the line's level (ln dx* at the mean depth) and of the slope b."""
    replicates = build_replicates(
        pairs, 150, seed=1, estimator=stand_in_estimate, joint=joint, points=False
    )
    result = bootstrap_fit(replicates)
    return result.spread_at(MEAN_DEPTH), result.sd[1]


def test_joint_seeds_widen_the_level_and_narrow_the_slope_when_pairs_share_seed_noise():
    # A seed effect shared by every pair moves every N* together: the level of the line is
    # uncertain as one pair (sd ratio → √6 ≈ 2.4 against independent pairs), the slope is
    # not moved by a common shift at all. Independence would get both wrong.
    pairs = synthetic_study(np.random.default_rng(30), shared=0.01, per_pair=0.0)
    (level_joint, slope_joint), (level_apart, slope_apart) = (
        _spreads(pairs, joint=True),
        _spreads(pairs, joint=False),
    )
    assert level_joint > 1.5 * level_apart
    assert slope_joint < slope_apart / 1.5


def test_joint_seeds_change_nothing_when_pairs_are_independent():
    pairs = synthetic_study(np.random.default_rng(31), shared=0.0, per_pair=0.01)
    joint, apart = _spreads(pairs, joint=True), _spreads(pairs, joint=False)
    for mine, theirs in zip(joint, apart, strict=True):
        assert 0.75 < mine / theirs < 1.33  # sd of 150 replicates: ±6% each


def test_points_with_the_same_seeds_draw_the_same_seed_ids():
    pairs = synthetic_study(np.random.default_rng(32), shared=0.0, per_pair=0.01)
    study = study_replicate(pairs, np.random.default_rng(0), joint=True, points=False)
    drawn = {tuple(p.seeds) for pair in study for p in pair}
    assert len(drawn) == 1 and len(set(next(iter(drawn)))) < len(SEEDS)
    apart = study_replicate(pairs, np.random.default_rng(0), joint=False, points=False)
    assert len({tuple(pair[0].seeds) for pair in apart}) > 1


def test_a_resampled_point_keeps_its_size_and_pairs_each_delta_with_its_seed():
    point = StandInPoint(1e7, (0.3, 0.1, 0.2), (7, 3, 5))
    out = resample_seeds(point, np.array([0.99, 0.0, 0.5]))
    assert out.seeds == (7, 3, 5) and out.deltas == (0.3, 0.1, 0.2)  # sorted ids 3, 5, 7
    single = StandInPoint(1e7, (0.3,), (0,))
    assert resample_seeds(single, np.array([0.7])) == single


def test_point_resampling_keeps_every_pair_and_its_label():
    pairs = synthetic_study(np.random.default_rng(33), shared=0.0, per_pair=0.005)
    replicates = build_replicates(pairs, 20, seed=2, estimator=stand_in_estimate, points=True)
    assert len(replicates) == 20
    assert all([o.label for o in rep] == [p.label for p in pairs] for rep in replicates)


def test_noise_free_replicates_give_the_planted_law_and_projection():
    exact = [
        TransitionObservation(f"{s}-{d}", s, d, "bracketed", planted_log_n(d), 0.1)
        for s, d in PAIRS
    ]
    result = bootstrap_fit([exact] * 10, budgets=[1.75e11])
    assert result.a == pytest.approx((A, A, A)) and result.b == pytest.approx((B, B, B))
    depth = result.projections[1.75e11]["depth"]
    assert depth[1] == depth[2] == pytest.approx(80.4, abs=0.5)  # the paper's ≈ 80 at 175B


def test_replicates_that_cannot_be_fitted_are_counted():
    good = [
        TransitionObservation(f"{s}-{d}", s, d, "bracketed", planted_log_n(d), 0.1)
        for s, d in PAIRS
    ]
    bad = [TransitionObservation(o.label, 6, o.depth_deep, "non_monotone", math.nan) for o in good]
    result = bootstrap_fit([good, good, bad])
    assert (result.n_replicates, result.n_fitted) == (3, 2)
    assert sum(result.failures.values()) == 1
