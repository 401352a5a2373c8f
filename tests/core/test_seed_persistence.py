"""Seeds as random effects: a seed's luck persisting across sizes (dwtune.core.refine.noise,
the bootstrap of dwtune.core.refine.estimate)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dwtune.core.refine.estimate import estimate_crossing
from dwtune.core.refine.noise import (
    NoisePrior,
    effective_share,
    estimate_noise,
    seed_effects_p,
    seed_persistence,
)
from dwtune.core.refine.signs import DeltaPoint, pair_noise, seeded_groups, usable_groups


def persistent_points(rng, c, seeds=4, count=10, sd=0.002, truth=17.45, spacing=0.05):
    """Points of Δ = 0.05·tanh((truth − x)/0.5) near the crossing, ``seeds`` paired seeds each
    (the same seeds everywhere, as the refine stage counts them up), a seed's deviation
    correlated ``c`` between sizes."""
    luck = rng.normal(size=seeds)
    xs = truth + spacing * (np.arange(count) - count / 2 + 0.5)
    points = []
    for x in xs:
        own = rng.normal(size=seeds)
        noise = sd * (math.sqrt(c) * luck + math.sqrt(1 - c) * own)
        mean = 0.05 * np.tanh((truth - x) / 0.5)
        points.append(DeltaPoint(math.exp(x), tuple(mean + noise), seeds=tuple(range(seeds))))
    return points


def test_a_persistent_seed_is_measured_and_an_independent_one_is_not_counted():
    rng = np.random.default_rng(0)
    found = [seed_persistence(seeded_groups(persistent_points(rng, 0.8)))[0] for _ in range(40)]
    assert np.median(found) == pytest.approx(0.8, abs=0.15)
    none = [seed_persistence(seeded_groups(persistent_points(rng, 0.0)))[0] for _ in range(200)]
    assert np.mean(np.array(none) > 0) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 200)  # the F gate


def test_the_f_test_of_seed_effects_holds_its_level_where_no_luck_persists():
    rng = np.random.default_rng(1)
    ps = [seed_effects_p(seeded_groups(persistent_points(rng, 0.0))) for _ in range(400)]
    assert np.mean(np.array(ps) < 0.05) == pytest.approx(0.05, abs=3 * math.sqrt(0.05 * 0.95 / 400))
    rng = np.random.default_rng(2)
    ps = [seed_effects_p(seeded_groups(persistent_points(rng, 0.5))) for _ in range(100)]
    assert np.mean(np.array(ps) < 0.05) > 0.8  # power where half the variance persists


def test_persistence_costs_degrees_of_freedom_not_variance():
    points = persistent_points(np.random.default_rng(3), 0.8)
    x = np.log([p.n for p in points])
    groups = usable_groups(points)
    plain = estimate_noise(x, groups, NoisePrior())
    shared = estimate_noise(x, groups, NoisePrior(), seeded_groups(points))
    assert shared.persistence > 0.5
    share = effective_share(plain.measured_dof, *seed_persistence(seeded_groups(points)))
    assert shared.measured_dof == pytest.approx(plain.measured_dof * share)
    assert shared.measured_dof < 0.5 * plain.measured_dof  # 4 seeds: little more than 3 dof
    assert np.allclose(shared.sd, plain.sd, rtol=0.05)  # the shrinkage weight moves it a hair


def test_without_recorded_seeds_the_noise_is_what_it_was():
    points = persistent_points(np.random.default_rng(4), 0.8)
    anonymous = [DeltaPoint(p.n, p.deltas) for p in points]
    noise = pair_noise(anonymous, NoisePrior())
    assert noise.persistence == 0.0
    x = np.log([p.n for p in points])
    old = estimate_noise(x, usable_groups(points), NoisePrior())
    assert np.array_equal(noise.sd, old.sd) and np.array_equal(noise.dof, old.dof)


def test_the_bootstrap_draws_a_seeds_luck_once_for_every_size(monkeypatch):
    # With the luck shared, every point's mean moves together: the crossing moves by the shift
    # over Δ's slope, which independent draws average away. The same points and noise (its dof
    # cut alike), with the bootstrap's seeds taken away, give narrower intervals.
    rng = np.random.default_rng(5)
    cases = [persistent_points(rng, 0.8, count=12, spacing=0.03) for _ in range(10)]
    shared = [estimate_crossing(points, n_boot=400) for points in cases]
    monkeypatch.setattr(
        "dwtune.core.refine.estimate.seeded_groups", lambda points: [{} for _ in points]
    )
    alone = [estimate_crossing(points, n_boot=400) for points in cases]
    wider = 0
    for a, b in zip(shared, alone, strict=True):
        assert a.status == b.status
        if a.n_star is None:
            continue
        wider += a.n_star_high / a.n_star_low > b.n_star_high / b.n_star_low
    assert wider >= 7
