"""The oracle floor (pure): each pair's two depths x seeds trained once at the reference N*."""

from __future__ import annotations

import math

import pytest

from dwtune.core import oracle_floor as floor
from dwtune.core.budget import ModelShape, flops_per_token
from dwtune.core.projection import LEVINE2020
from dwtune.core.spec import ExperimentSpec
from tests.helpers.specs import small_simulated

# Levine et al.'s published constants, written out: the floor must not borrow them from the code.
A, B = 5.039, 0.0555


def _spec(**sections) -> ExperimentSpec:
    return ExperimentSpec.from_dict(small_simulated(**sections))


def _shape(depth: int, width: int) -> ModelShape:
    return ModelShape(depth=depth, width=width, heads=2, vocab_size=2000, seq_len=128)


def test_the_floor_of_one_pair_is_its_two_nets_at_the_reference_n_star_times_its_seeds():
    spec = _spec(refine={"pairs": [[6, 12]], "seeds": 2})
    oracle = floor.oracle_floor(spec, LEVINE2020)
    (pair,) = oracle.pairs
    n_star = 12 * 12 * math.exp(2 * (A + B * 12))  # 1.299e7
    assert pair.n_star == pytest.approx(n_star, rel=1e-12)
    # widths on a step of 8 closest to sqrt(N*/(12·L)): 424.8 -> 424 (L6), 300.4 -> 304 (L12)
    assert (pair.width_shallow, pair.width_deep) == (424, 304)
    tokens = 400 * 8 * 128  # steps x batch x sequence
    by_hand = 2 * tokens * (flops_per_token(_shape(6, 424)) + flops_per_token(_shape(12, 304)))
    assert oracle.flops == pytest.approx(by_hand, rel=1e-12)
    assert (oracle.seeds, oracle.trainings, oracle.trainings_per_pair) == (2, 4, 4)


def test_every_pair_adds_its_own_share_and_a_custom_price_is_used():
    spec = _spec(space={"depths": [6, 12, 18]}, refine={"pairs": [[6, 12], [12, 18]], "seeds": 3})
    oracle = floor.oracle_floor(spec, LEVINE2020, flops_of=lambda cell: 1.0)
    assert [(p.shallow, p.deep) for p in oracle.pairs] == [(6, 12), (12, 18)]
    assert oracle.flops == 2 * 2 * 3  # pairs x depths x seeds at one FLOP each
    deeper = oracle.pairs[1]
    assert deeper.n_star == pytest.approx(12 * 18 * math.exp(2 * (A + B * 18)), rel=1e-12)


def test_without_refine_pairs_the_grid_decides_consecutive_depths_at_space_seeds():
    spec = _spec(space={"depths": [6, 12, 18], "seeds": 5})
    oracle = floor.oracle_floor(spec, LEVINE2020, flops_of=lambda cell: 1.0)
    assert [(p.shallow, p.deep) for p in oracle.pairs] == [(6, 12), (12, 18)]
    assert oracle.seeds == 5 and oracle.trainings == 20


def test_eta_is_floor_over_spent_and_undefined_when_nothing_was_spent():
    assert floor.efficiency(2.0, 8.0) == 0.25
    assert math.isnan(floor.efficiency(2.0, 0.0))


def test_spent_flops_prices_each_training_by_its_tokens_and_skips_unknown_counts():
    template = _shape(1, 2)
    trials = [(6, 424, 2, 1000.0), (12, 304, 2, 50.0), (12, 304, 2, math.nan), (6, 8, 2, 0.0)]
    by_hand = 1000 * flops_per_token(_shape(6, 424)) + 50 * flops_per_token(_shape(12, 304))
    assert floor.spent_flops(template, trials) == pytest.approx(by_hand, rel=1e-12)


def test_an_n_star_below_the_narrowest_legal_net_prices_the_narrowest():
    raw = small_simulated(space={"depths": [1, 2], "budgets": [1e7, 1e8]})
    raw["model"] = {"head_dim": 512, "width_multiple": 8}  # depth 1: at least 12·512² = 3.1e6
    oracle = floor.oracle_floor(ExperimentSpec.from_dict(raw), LEVINE2020)
    (pair,) = oracle.pairs
    assert pair.n_star == pytest.approx(12 * 2 * math.exp(2 * (A + B * 2)), rel=1e-12)  # 7.1e5
    assert (pair.width_shallow, pair.width_deep) == (512, 512)
