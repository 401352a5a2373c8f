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


def interval_quantile(level: float, chi2_red: float, dof: int) -> float:
    """``max(z, t_dof·sqrt(χ²_red))`` at ``level``: the normal quantile where the fit has no
    degrees of freedom or no valid χ² (a law read without them), else the wider of the two."""
    z = z_value(level)
    if dof <= 0 or not math.isfinite(chi2_red) or chi2_red < 0:
        return z
    return max(z, float(stats.t.ppf(0.5 + level / 2.0, dof)) * math.sqrt(chi2_red))


def line_with_se(
    a: float, b: float, cov: np.ndarray, depths: float | Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``a + b·L`` and its standard error ``sqrt([1, L] cov [1, L]ᵀ)`` at each depth."""
    depth = np.asarray(depths, dtype=float)
    value = a + b * depth
    variance = cov[0, 0] + 2.0 * depth * cov[0, 1] + depth * depth * cov[1, 1]
    return value, np.sqrt(np.maximum(variance, 0.0))
