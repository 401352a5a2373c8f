"""dwtune.core.analysis.loss_law: the separable law fitted to a table's losses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dwtune.core.analysis.loss_law import fit_separable_losses
from dwtune.core.analysis.table import RunTable
from dwtune.core.fit import TransitionObservation, fit_law
from dwtune.core.fit.competing import separable_log_width

A_WIDTH, B_DEPTH, E_FLOOR = 120.0, 4.0, 2.5
PAIRS = ((6, 12), (12, 18), (18, 24), (24, 30))


def runs(loss) -> RunTable:
    depth, budget = np.meshgrid([6.0, 12.0, 18.0, 24.0, 30.0], np.geomspace(1e6, 1e9, 7))
    depth = depth.ravel()
    width = np.sqrt(budget.ravel() / (12 * depth))
    return RunTable(depth, width, 12 * depth * width**2, loss(width, depth),
                    np.arange(1, depth.size + 1))  # fmt: skip


def crossings(c: float, sigma: float = 0.05) -> list[TransitionObservation]:
    out = []
    for s, d in PAIRS:
        log_n = math.log(12 * d) + 2 * (c + separable_log_width(np.array([s]), np.array([d]))[0])
        out.append(TransitionObservation(f"{s}-{d}", s, d, "bracketed", log_n, sigma))
    return out


def test_planted_separable_losses_are_recovered_and_their_crossings_are_the_tables():
    table = runs(lambda w, d: A_WIDTH / w + B_DEPTH / d + E_FLOOR)
    observations = crossings(math.log(A_WIDTH / B_DEPTH))
    result = fit_separable_losses(table, observations, fit_law(observations))
    assert result is not None and result.runs == 35 and result.pairs == len(PAIRS)
    assert (result.a_width, result.b_depth, result.e_floor) == pytest.approx(
        (A_WIDTH, B_DEPTH, E_FLOOR)
    )
    assert result.rms_residual < 1e-9 and result.rms_ln_n_error < 1e-9
    assert result.levine_rms_ln_n_error > 0.01  # the straight line in L misses these N*


def test_losses_without_a_depth_term_have_no_crossing():
    table = runs(lambda w, d: A_WIDTH / w + E_FLOOR - 0.5 / d)  # deeper always worse
    observations = crossings(3.0)
    result = fit_separable_losses(table, observations, fit_law(observations))
    assert result is not None and math.isnan(result.rms_ln_n_error)
    assert "not positive" in result.reason
