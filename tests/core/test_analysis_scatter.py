"""Noise of a table with no replicates and no checkpoints, from Δ's scatter about its trend
(dwtune.core.analysis.scatter); what would decide an undecided pair."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dwtune.core import vocabulary
from dwtune.core.analysis import RunTable, analyse_pair, size_groups
from dwtune.core.analysis.scatter import (
    DOF_PER_RESIDUAL,
    MIN_RESIDUALS,
    pseudo_residuals,
    scatter_noise,
)
from dwtune.core.analysis.verdicts import to_decide
from tests.helpers.analysis_tables import scattered_sweep


def _table(frame) -> RunTable:
    return RunTable(
        frame.n_layer.to_numpy(float), frame.d_model.to_numpy(float),
        frame.n_params.to_numpy(float), frame.val_loss.to_numpy(float),
        np.arange(1, len(frame) + 1), seed=frame.seed.to_numpy(),
    )  # fmt: skip


def _tanh(x, truth=17.4, gap=0.05, scale=0.5):
    return gap * np.tanh((truth - x) / scale)


def test_the_pseudo_residuals_remove_any_straight_trend_on_any_spacing():
    x = np.sort(np.random.default_rng(0).uniform(14, 20, 15))
    d, c = pseudo_residuals(x)
    assert np.allclose(d @ (0.3 - 0.02 * x), 0.0)
    assert np.all(c >= 1.5)  # at least the point's own variance and half of two neighbours'


def test_the_scatter_about_a_tanh_recovers_the_planted_sd():
    # 40 sizes over 6 e-folds, Δ = 0.05·tanh: the bend near N* is trend, not noise.
    rng = np.random.default_rng(1)
    estimates = []
    for _ in range(40):
        x = np.sort(rng.uniform(14.0, 20.0, 40))
        noise = scatter_noise(x, _tanh(x) + 0.003 * rng.normal(size=x.size), np.zeros(x.size))
        estimates.append(noise.sd[0])
        assert noise.source == vocabulary.NOISE_TREND_SCATTER
    assert np.median(estimates) == pytest.approx(0.003, rel=0.1)
    # the stated dof describe the spread of the estimates: sd(σ̂)/σ ≈ 1/sqrt(2ν)
    dof = noise.dof[0]
    assert 0.3 * 38 < dof / DOF_PER_RESIDUAL <= 38
    assert np.std(estimates) / 0.003 == pytest.approx(1 / math.sqrt(2 * dof), rel=0.5)


def test_a_noiseless_trend_has_no_scatter_and_known_errors_are_not_counted_twice():
    x = np.linspace(14.0, 20.0, 30)
    assert scatter_noise(x, _tanh(x, scale=2.0), np.zeros(x.size)).sd[0] < 3e-4  # its bend
    rng = np.random.default_rng(2)
    extra = np.full(x.size, 0.003)  # the whole scatter is the known (trend) error
    noisy = _tanh(x, scale=2.0) + 0.003 * rng.normal(size=x.size)
    assert scatter_noise(x, noisy, extra).sd[0] < 0.0015


def test_too_few_sizes_measure_nothing():
    x = np.linspace(14.0, 20.0, MIN_RESIDUALS + 1)
    assert scatter_noise(x, _tanh(x), np.zeros(x.size)) is None


def test_a_table_without_replicates_states_its_scatter_and_decides_its_signs():
    # Before: no replicate, the 0.003-nats guess on 0.25 pseudo-observations (source prior).
    table = _table(scattered_sweep(noise=0.001, rng_seed=3))
    pair = analyse_pair(size_groups(table), (12.0, 18.0), 0.25, n_boot=200)
    assert all(len(m.point.deltas) == 1 for m in pair.points)  # no replicate anywhere
    assert pair.noise.source == vocabulary.NOISE_TREND_SCATTER
    assert pair.noise.sd[0] == pytest.approx(0.0014, rel=0.5)  # two runs of sd 0.001
    assert np.mean(np.array(pair.signs) != 0) > 0.9
    assert pair.status == vocabulary.ANALYSIS_CROSSES


def test_a_second_dip_is_still_flagged():
    table = _table(scattered_sweep(budgets=np.geomspace(1e6, 1e9, 19), dip=(1, 1.0, 0.08)))
    pair = analyse_pair(size_groups(table), (12.0, 18.0), 0.25, n_boot=200)
    assert pair.noise.source == vocabulary.NOISE_TREND_SCATTER
    assert pair.status == vocabulary.TransitionStatus.NON_MONOTONE


def test_an_undecided_pair_says_what_would_decide_it():
    # Δ within a few sd everywhere: the scatter measures the noise, the signs stay open.
    x = np.linspace(15.0, 19.0, 12)
    rng = np.random.default_rng(4)
    depth, params, loss = [], [], []
    for xi in x:
        delta = 0.002 + 0.004 * rng.normal()
        depth += [6.0, 12.0]
        params += [math.exp(xi)] * 2
        loss += [3.0, 3.0 + delta]
    table = RunTable(
        np.array(depth), np.full(len(depth), 64.0), np.array(params), np.array(loss),
        np.arange(1, len(depth) + 1),
    )  # fmt: skip
    pair = analyse_pair(size_groups(table), (6.0, 12.0), 0.25, n_boot=100)
    assert pair.noise.source == vocabulary.NOISE_TREND_SCATTER
    assert pair.estimate.status == vocabulary.TransitionStatus.UNDECIDED
    said = to_decide(pair)
    assert said is not None and said.startswith("seeds: at N = ")
    seeds = int(said.split("about ")[1].split(" seed")[0])
    open_points = [i for i, sign in enumerate(pair.signs) if sign == 0]
    best = max(open_points, key=lambda i: abs(pair.delta[i]) / pair.delta_err[i])
    sd, boundary = pair.noise.sd[best], pair.boundary[best]
    assert abs(pair.delta[best]) * math.sqrt(seeds) / sd >= boundary  # enough seeds
    assert abs(pair.delta[best]) * math.sqrt(seeds - 1) / sd < boundary  # and no more
