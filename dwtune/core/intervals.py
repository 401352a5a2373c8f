"""Interval arithmetic of a fitted line ``a + b·L`` (pure: numpy, scipy).

Shared by the fit (:mod:`dwtune.core.fit`, whose intervals these are) and the projection
(:mod:`dwtune.core.projection`, which carries a fit's intervals to any budget): kept below both,
so that the fit's checks may project (leave-one-pair-out, the study bootstrap) while the
projection never imports the fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from dwtune.core.errors import InputError


def z_value(level: float) -> float:
    """Two-sided normal quantile: 0.95 -> 1.96, 0.6827 -> 1.0."""
    if not 0.0 < level < 1.0:
        raise InputError(f"level: got {level!r}; expected a probability between 0 and 1")
    return float(stats.norm.ppf(0.5 + level / 2.0))


# The fit's trust in its transitions' stated σ(ln N*), in pseudo-observations of their scatter
# about the law (:func:`interval_quantile`). Why a quarter of one: the refine stage's σ are
# conservative, and at 0.5 and 1 the law's 95% intervals held the planted law in 97-98% and
# 98-99% of 300 simulated studies; at 0 (Student's t alone) in 89-95%, as the pairs' σ
# overstate their errors unevenly (docs/method.md, "The fit's interval rule").
SCALE_PRIOR_DOF = 0.25


def interval_quantile(level: float, chi2_red: float, dof: int) -> float:
    """Half-width of a ``level`` interval in std. errors: ``t_n·s`` with ``n = ν₀ + dof`` and
    ``s² = (ν₀ + dof·χ²_red) / n`` (ν₀ = :data:`SCALE_PRIOR_DOF`), the posterior of the scale of
    the stated σ after the transitions' scatter about the law (χ²_red on ``dof``) has updated a
    prior of scale 1 worth ν₀ pseudo-observations. So the intervals narrow where the
    transitions scatter less than their σ say and widen where they scatter more. The normal
    quantile where the fit has no degrees of freedom or no valid χ² (a law read without them)."""
    z = z_value(level)  # validates level
    if dof <= 0 or not math.isfinite(chi2_red) or chi2_red < 0:
        return z
    n = SCALE_PRIOR_DOF + dof
    scale = math.sqrt((SCALE_PRIOR_DOF + dof * chi2_red) / n)
    return float(stats.t.ppf(0.5 + level / 2.0, n)) * scale


def line_with_se(
    a: float, b: float, cov: np.ndarray, depths: float | Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``a + b·L`` and its standard error ``sqrt([1, L] cov [1, L]ᵀ)`` at each depth."""
    depth = np.asarray(depths, dtype=float)
    value = a + b * depth
    variance = cov[0, 0] + 2.0 * depth * cov[0, 1] + depth * depth * cov[1, 1]
    return value, np.sqrt(np.maximum(variance, 0.0))
