"""Noise of a table of one run per shape, from its checkpoints' jitter (dwtune.core.analysis)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dwtune.core import vocabulary
from dwtune.core.analysis import (
    RunTable,
    analyse_pair,
    jitter_model,
    select_checkpoints,
    size_groups,
)
from dwtune.core.analysis.jitter import JITTER_DEGREE, curve_residuals

CHECKPOINTS = 20
TOKENS = 2e9
SIZES = np.geomspace(1e6, 1e9, 9)


def runs_table(jitter: dict, sizes=SIZES, spike=None, seed=0) -> RunTable:
    """One run per (depth, size) with CHECKPOINTS evaluations on a smooth curve in tokens
    (0.1·((T/t)^0.5 − 1) above its end) plus independent N(0, jitter[depth]²) noise;
    ``spike``: (depth, size index, nats) added to that run's last quarter but its end."""
    rng = np.random.default_rng(seed)
    tokens = np.linspace(TOKENS / CHECKPOINTS, TOKENS, CHECKPOINTS)
    curve = 0.1 * ((TOKENS / tokens) ** 0.5 - 1.0)
    columns = {k: [] for k in ("depth", "params", "tokens", "loss", "run")}
    for depth, sd in jitter.items():
        for k, n in enumerate(sizes):
            loss = 3.0 + curve + sd * rng.standard_normal(CHECKPOINTS)
            if spike is not None and spike[:2] == (depth, k):
                loss[-CHECKPOINTS // 4 : -1] += spike[2]
            columns["depth"] += [depth] * CHECKPOINTS
            columns["params"] += [n] * CHECKPOINTS
            columns["tokens"] += list(tokens)
            columns["loss"] += list(loss)
            columns["run"] += [f"L{depth}-{k}"] * CHECKPOINTS
    count = len(columns["loss"])
    arrays = {k: np.asarray(v, dtype=float) for k, v in columns.items() if k != "run"}
    return RunTable(
        width=np.full(count, 64.0), row=np.arange(1, count + 1), run=np.array(columns["run"]),
        **arrays,
    )  # fmt: skip


def test_the_curve_leaves_no_residual_on_a_cubic_in_ln_tokens():
    x = np.log(np.linspace(1e9, 2e9, 10))
    ss, dof = curve_residuals(x, 3.0 + 0.2 * x - 0.01 * x**2 + 1e-4 * x**3)
    assert ss == pytest.approx(0.0, abs=1e-16) and dof == 10 - (JITTER_DEGREE + 1)
    assert curve_residuals(x[:4], x[:4]) is None  # no residual degree of freedom


def test_jitter_recovers_the_planted_sd_per_depth():
    # 9 runs per depth, 10 checkpoints each fitted (the later half), 6 dof each: 54 dof per
    # depth, so the pooled sd is within about 10% (1 sd) of the truth; 25% is ~2.5 sd.
    planted = {6: 0.002, 24: 0.006}
    model = jitter_model(runs_table(planted))
    assert model.order == "tokens" and model.runs_measured == model.runs_total == 18
    by_depth = {d.depth: d for d in model.depths}
    for depth, sd in planted.items():
        assert by_depth[depth].sd == pytest.approx(sd, rel=0.25)
        assert by_depth[depth].dof == 9 * (10 - JITTER_DEGREE - 1)
        assert not by_depth[depth].flagged


def test_the_noise_of_a_delta_adds_the_two_runs_variances():
    table = runs_table({6: 0.002, 12: 0.004})
    model = jitter_model(table)
    used, _ = select_checkpoints(table)
    pair = analyse_pair(size_groups(used), (6.0, 12.0), 0.25, jitter=model, n_boot=50)
    sd6, sd12 = (d.sd for d in model.depths)
    assert pair.noise.source == vocabulary.NOISE_CHECKPOINT_JITTER
    assert np.allclose(pair.noise.sd, math.hypot(sd6, sd12))
    pool = 9 * (10 - JITTER_DEGREE - 1)  # Welch-Satterthwaite: between one pool's and both
    assert np.all(pair.noise.dof > pool) and np.all(pair.noise.dof < 2 * pool)
    assert pair.delta_err == pytest.approx(list(pair.noise.sd))  # one run, equal sizes


def test_a_run_with_a_loss_spike_is_flagged_and_does_not_set_its_depths_noise():
    planted = {6: 0.002, 12: 0.002}
    clean = jitter_model(runs_table(planted))
    spiked = jitter_model(runs_table(planted, spike=(12, 4, 0.05)))
    depth12 = spiked.depths[1]
    assert [r.name for r in depth12.flagged] == ["L12-4"]
    assert depth12.sd == pytest.approx(0.002, rel=0.3)
    assert depth12.sd < 1.2 * clean.depths[1].sd  # the pool is what the other runs measure
    row = depth12.flagged[0].row
    assert math.sqrt(spiked.by_row[row][0]) > 5 * depth12.sd  # it keeps its own, larger sd


def test_replicates_are_preferred_and_nothing_to_measure_falls_back_to_the_prior():
    # Two seeds per shape as separate rows without a run column or tokens: replicates.
    depth = np.array([6, 6, 12, 12] * 3, dtype=float)
    params = np.repeat([1e6, 1e7, 1e8], 4).astype(float)
    loss = 3.0 + np.array([0, 0.002, 0.03, 0.031, 0, 0.001, 0, 0.002, 0, 0.002, -0.03, -0.029])
    table = RunTable(depth, np.full(12, 64.0), params, loss, np.arange(1, 13),
                     seed=np.array([0, 1] * 6))  # fmt: skip
    assert jitter_model(table) is None  # no tokens or steps: no curve to measure
    pair = analyse_pair(size_groups(table), (6.0, 12.0), 0.25, n_boot=50)
    assert pair.noise.source == vocabulary.NOISE_MEASURED
    single = table.take(np.flatnonzero(table.seed == 0))
    alone = analyse_pair(size_groups(single), (6.0, 12.0), 0.25, n_boot=50)
    assert alone.noise.source == vocabulary.NOISE_PRIOR
    assert alone.signs == (0, 0, 0)  # half a pseudo-observation decides nothing


def test_curves_without_any_jitter_measure_nothing():
    flat = runs_table({6: 0.0, 12: 0.0})
    flat = RunTable(**{**flat.__dict__, "loss": np.full(len(flat), 3.0)})
    assert jitter_model(flat) is None
