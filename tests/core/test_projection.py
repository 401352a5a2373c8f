"""dwtune.core.projection: optimal depth and width for a budget, transition size for a depth."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from dwtune.core.errors import InputError
from dwtune.core.fit import fit_transitions
from dwtune.core.projection import (
    LEVINE2020,
    DepthWidthLaw,
    optimal_depth,
    parse_budget,
    project_budget,
    project_depth,
    reference,
    transition_size,
)
from tests.helpers.fit_sim import rule_coverage

# The paper's published projections (Levine et al. 2020, section 5).
PUBLISHED_TOLERANCE = 0.02


def test_reference_175b_gives_depth_about_80():
    assert project_budget(LEVINE2020, 1.75e11).depth == pytest.approx(80, rel=PUBLISHED_TOLERANCE)


def test_reference_1t_gives_width_about_30k():
    assert project_budget(LEVINE2020, 1e12).width == pytest.approx(30e3, rel=PUBLISHED_TOLERANCE)


def test_reference_96_layers_give_transition_size_about_1_17e12():
    assert project_depth(LEVINE2020, 96).n_star == pytest.approx(1.17e12, rel=PUBLISHED_TOLERANCE)


def test_reference_is_looked_up_by_name():
    assert reference("levine2020") is LEVINE2020
    expected = r"got 'kaplan2020'; expected a published fit: levine2020$"
    with pytest.raises(InputError, match=expected):
        reference("kaplan2020")


@pytest.mark.parametrize("budget", [1e3, 3e5, 1e8, 1.75e11, 1e13, 1e16])
def test_lambert_w_solution_solves_the_equation(budget):
    depth = optimal_depth(LEVINE2020, budget)
    assert transition_size(LEVINE2020, depth) == pytest.approx(budget, rel=1e-12)
    # Independent check with a bracketing root finder on ln N*(L) = ln N.
    root = optimize.brentq(
        lambda d: math.log(transition_size(LEVINE2020, d)) - math.log(budget), 1e-9, 1e3, xtol=1e-14
    )
    assert depth == pytest.approx(root, rel=1e-10)


def test_width_at_the_optimum_is_consistent_with_the_size_convention():
    p = project_budget(LEVINE2020, 1.75e11)
    assert p.width == pytest.approx(math.sqrt(1.75e11 / (12 * p.depth)), rel=1e-12)
    assert 12 * p.depth * p.width**2 == pytest.approx(1.75e11, rel=1e-12)


def test_reference_without_covariance_has_no_intervals():
    p = project_budget(LEVINE2020, 1e12)
    assert all(math.isnan(v) for v in (p.depth_lo, p.depth_hi, p.width_lo, p.width_hi))
    q = project_depth(LEVINE2020, 96)
    assert math.isnan(q.n_lo) and math.isnan(q.width_hi)


def test_zero_covariance_gives_a_point_interval():
    law = DepthWidthLaw("exact", 5.039, 0.0555, ((0.0, 0.0), (0.0, 0.0)))
    p = project_budget(law, 1e12)
    assert p.depth_lo == p.depth_hi == p.depth


def test_intervals_contain_the_estimate_and_are_asymmetric():
    law = DepthWidthLaw("study", 5.039, 0.0555, ((2.5e-3, -8e-5), (-8e-5, 3e-6)))
    p = project_budget(law, 1.75e11)
    assert p.depth_lo < p.depth < p.depth_hi
    assert p.width_lo < p.width < p.width_hi
    # Extrapolating a line in L through exp and Lambert W is not symmetric in depth.
    assert p.depth_hi - p.depth != pytest.approx(p.depth - p.depth_lo, rel=1e-3)
    # The ends are where the transition-size band meets the budget.
    assert project_depth(law, p.depth_lo).n_hi == pytest.approx(1.75e11, rel=1e-8)
    assert project_depth(law, p.depth_hi).n_lo == pytest.approx(1.75e11, rel=1e-8)


def test_insignificant_slope_gives_an_unbounded_depth():
    # b = 0.01 ± 0.05: the data cannot rule out that any depth is still too shallow.
    law = DepthWidthLaw("weak", 5.0, 0.01, ((1e-3, 0.0), (0.0, 2.5e-3)))
    p = project_budget(law, 1e9)
    assert p.depth_hi == math.inf and p.width_lo == 0.0
    assert 0.0 < p.depth_lo < p.depth


def _in_confidence_set(law: DepthWidthLaw, budget: float, depths: np.ndarray) -> np.ndarray:
    """Depths whose 95 % transition-size interval contains the budget, computed directly."""
    cov = np.array(law.cov)
    se_line = np.sqrt(cov[0, 0] + 2 * depths * cov[0, 1] + depths**2 * cov[1, 1])
    log_n = np.log(12 * depths) + 2 * (law.a + law.b * depths)
    return np.abs(log_n - math.log(budget)) <= 1.959964 * 2 * se_line


@pytest.mark.parametrize(
    "law",
    [
        DepthWidthLaw("strong", 5.039, 0.0555, ((2.5e-3, -8e-5), (-8e-5, 3e-6))),
        DepthWidthLaw("weak", 4.9, 0.062, ((0.76, -0.032), (-0.032, 1.46e-3))),
    ],
)
@pytest.mark.parametrize("budget", [1e6, 1e8, 1.75e11])
def test_depth_interval_holds_the_whole_confidence_set(law, budget):
    p = project_budget(law, budget)
    depths = np.geomspace(1e-3, 1e5, 20001)
    inside = depths[_in_confidence_set(law, budget, depths)]
    assert p.depth_lo <= inside.min() * (1 + 1e-3)
    assert inside.max() <= p.depth_hi * (1 + 1e-3)
    if math.isfinite(p.depth_hi):  # a significant slope: the set is exactly the interval
        assert inside.min() == pytest.approx(p.depth_lo, rel=2e-3)
        assert inside.max() == pytest.approx(p.depth_hi, rel=2e-3)


def test_non_positive_slope_is_an_input_error():
    with pytest.raises(InputError, match=r"slope b = -0\.01 is not positive"):
        project_budget(DepthWidthLaw("bad", 5.0, -0.01), 1e9)


@pytest.mark.parametrize("budget", [0.0, -1e9, math.nan, math.inf])
def test_bad_budget_values_are_input_errors(budget):
    with pytest.raises(InputError, match="budget"):
        project_budget(LEVINE2020, budget)


def test_bad_depth_is_an_input_error():
    with pytest.raises(InputError, match="--depth: got 0"):
        project_depth(LEVINE2020, 0)


def test_absurd_depth_saturates_instead_of_overflowing():
    assert project_depth(LEVINE2020, 1e5).n_star == math.inf


DEPTHS = np.array([12.0, 18.0, 24.0, 30.0, 36.0])
SIGMA = np.array([0.02, 0.03, 0.025, 0.04, 0.05])


def _noisy_law(rng: np.random.Generator) -> DepthWidthLaw:
    widths = np.exp(LEVINE2020.a + LEVINE2020.b * DEPTHS + rng.normal(0.0, SIGMA))
    return DepthWidthLaw.from_fit(fit_transitions(DEPTHS, widths, SIGMA * widths))


def test_projection_intervals_cover_the_truth_at_the_fits_rate():
    # Far extrapolation (depths 12-36 fitted, 175B projected): the band inversion keeps the
    # fit's own coverage (its rule, t scaled by the scatter, holds 96.9% at 95% with exact σ:
    # fit_sim.rule_coverage) where a delta method would not. 2000 draws; 4 binomial sd.
    rng = np.random.default_rng(2006)
    true_depth = optimal_depth(LEVINE2020, 1.75e11)
    true_n96 = transition_size(LEVINE2020, 96)
    hits_depth = hits_n = 0
    for _ in range(2000):
        law = _noisy_law(rng)
        p, q = project_budget(law, 1.75e11), project_depth(law, 96)
        hits_depth += p.depth_lo <= true_depth <= p.depth_hi
        hits_n += q.n_lo <= true_n96 <= q.n_hi
    expected = rule_coverage(0.95, dof=DEPTHS.size - 2)
    tolerance = 4.0 * math.sqrt(expected * (1.0 - expected) / 2000)
    assert hits_depth / 2000 == pytest.approx(expected, abs=tolerance)
    assert hits_n / 2000 == pytest.approx(expected, abs=tolerance)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.75e11", 1.75e11),
        ("175B", 1.75e11),
        ("1T", 1e12),
        ("50M", 5e7),
        ("300k", 3e5),
        ("1.5T", 1.5e12),
        (" 2e6 ", 2e6),
        (1e9, 1e9),
    ],
)
def test_parse_budget_accepts_numbers_and_suffixes(text, value):
    assert parse_budget(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text", ["", "abc", "1.7.5", "-5", "0", "nan", "1e400", "5X", "B", True])
def test_parse_budget_rejects_garbage(text):
    with pytest.raises(InputError, match="budget: got"):
        parse_budget(text)
