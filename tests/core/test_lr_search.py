"""Best-rate selection and ln-width interpolation of the per-shape learning-rate search."""

from __future__ import annotations

import math

import pytest

from dwtune.core.errors import InputError
from dwtune.core.lr_search import SearchOutcome, best_rate, interpolate_rate, ln_slope


def test_the_best_rate_is_the_lowest_loss_among_trials_that_trained_the_full_steps():
    outcomes = [
        SearchOutcome(1e-3, "finished", 3.10, 100),
        SearchOutcome(3e-3, "finished", 3.05, 100),
        SearchOutcome(1e-2, "early_stopped", 3.00, 20),  # stopped early: not comparable
        SearchOutcome(3e-2, "diverged", math.nan, 40),
    ]
    assert best_rate(outcomes, 100) == 3e-3


def test_the_vertex_of_a_parabola_in_ln_lr_averages_the_noise_of_several_trials():
    best = 2e-3  # loss = 3 + 0.02·ln²(lr / best), plus a noise the lowest single loss picks up
    rates = [5e-4, 1e-3, 1.8e-3, 3e-3, 6e-3, 1.2e-2]
    noise = [0.0, 0.001, 0.002, -0.002, 0.001, 0.0]
    outcomes = [
        SearchOutcome(r, "finished", 3 + 0.02 * math.log(r / best) ** 2 + e, 100)
        for r, e in zip(rates, noise, strict=True)
    ]
    assert min(outcomes, key=lambda o: o.final_val_loss).lr == 3e-3  # the noisy argmin
    assert abs(math.log(best_rate(outcomes, 100) / best)) < abs(math.log(3e-3 / best))


def test_stopped_trials_count_only_when_none_finished_and_nothing_usable_gives_none():
    stopped = [
        SearchOutcome(1e-3, "early_stopped", 3.2, 20),
        SearchOutcome(2e-3, "early_stopped", 3.1, 40),
    ]
    assert best_rate(stopped, 100) == 2e-3
    assert best_rate([SearchOutcome(1e-3, "failed", math.nan, 0)], 100) is None


def test_interpolation_is_a_power_law_in_width_between_and_beyond_the_known_widths():
    known = [(100.0, 1e-2), (400.0, 2.5e-3)]  # lr ∝ 1/width
    assert interpolate_rate(known, 200.0) == pytest.approx(5e-3)
    assert interpolate_rate(known, 800.0) == pytest.approx(1.25e-3)
    assert interpolate_rate(known, 50.0) == pytest.approx(2e-2)
    assert interpolate_rate([(100.0, 1e-3)], 300.0) == 1e-3


def test_interpolation_without_searched_rates_is_an_input_error():
    with pytest.raises(InputError, match=r"train\.lr\.refine"):
        interpolate_rate([], 100.0)


def test_ln_slope_recovers_a_power():
    assert ln_slope([64, 128, 256], [2.0, 4.0, 8.0]) == pytest.approx(1.0)
    assert math.isnan(ln_slope([64, 64], [1.0, 2.0]))
