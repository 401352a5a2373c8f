"""A group-sequential sign test with α-spending (pure: numpy, scipy).

The refine stage tests the sign of a point's mean paired Δ after every added seed, up to
``refine.max_seeds`` looks. Repeating a fixed ``|z| > 2`` test at each look inflates the chance
of declaring a sign when the true Δ is 0 (9.7% over 4 looks instead of 4.55%). Here look ``k``
(``k`` seeds, information fraction ``t_k = k / K`` with ``K = max_seeds``) rejects "Δ = 0" when
``|mean Δ| / se > c_k``. The boundaries ``c_1..c_K`` spend the two-sided α with the Lan-DeMets
Pocock-type function

    α(t) = α · ln(1 + (e − 1) · t),

so that P(any |Z_k| > c_k | Δ = 0) = α exactly for independent unit-variance increments (one per
seed) and known noise. They are found look by look: the density of the running sum ``S_k`` (a
sum of ``k`` standard normals, kept only where no earlier look rejected) is propagated on a grid
by convolution with the normal density, and ``c_k`` is the root of "mass beyond ±c_k·√k equals
α(t_k) − α(t_{k−1})". Looks that are skipped (several seeds added at once, or a grid point that
starts with several seeds) only lower the false-sign rate, since every boundary stays where it
is. The noise sd is estimated, not known: each ``c_k`` is converted to the Student-t quantile of
the same tail probability with the noise's degrees of freedom (:func:`t_boundary`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

GRID_STEP = 0.01  # spacing of the running-sum grid (standard-normal units)


def spent(alpha: float, fraction: float) -> float:
    """α(t) of the Pocock-type spending function (module doc)."""
    return alpha * math.log(1.0 + (math.e - 1.0) * min(fraction, 1.0))


@lru_cache(maxsize=64)
def boundaries(max_looks: int, alpha: float) -> tuple[float, ...]:
    """z boundaries ``c_1..c_K`` of K equally spaced looks at two-sided level α (module doc)."""
    reach = stats.norm.isf(alpha / 1e3) * math.sqrt(max_looks) + 8.0
    s = np.arange(-reach, reach + GRID_STEP / 2, GRID_STEP)
    kernel = stats.norm.pdf(np.arange(-8.0, 8.0 + GRID_STEP / 2, GRID_STEP)) * GRID_STEP
    density = None
    result = []
    for k in range(1, max_looks + 1):
        if density is None:
            density = stats.norm.pdf(s) * GRID_STEP  # S_1 ~ N(0, 1)
        else:
            density = np.convolve(density, kernel, mode="same")
        target = spent(alpha, k / max_looks) - spent(alpha, (k - 1) / max_looks)

        def excess(
            c: float, density: np.ndarray = density, k: int = k, target: float = target
        ) -> float:
            return float(density[np.abs(s) > c * math.sqrt(k)].sum()) - target

        c = optimize.brentq(excess, 0.1, reach / math.sqrt(k) - 1e-6, xtol=1e-6)
        result.append(c)
        density = np.where(np.abs(s) > c * math.sqrt(k), 0.0, density)
    return tuple(result)


def t_boundary(z: float, dof: float) -> float:
    """The Student-t(dof) boundary with the same two-sided tail as ``z``; z for dof = inf."""
    if not math.isfinite(dof):
        return z
    return _t_quantile(float(z), float(max(dof, 1.0)))


# Every sign test asks this of a handful of (z, dof) pairs (the boundaries of K looks, the
# noise's few degrees of freedom), tens of thousands of times a study: scipy's generic
# quantile machinery costs about 0.4 ms a call, so the answers are kept (same floats).
@lru_cache(maxsize=4096)
def _t_quantile(z: float, dof: float) -> float:
    return float(stats.t.isf(stats.norm.sf(z), dof))


def boundary(looks: int, max_looks: int, alpha: float, dof: float = math.inf) -> float:
    """The boundary of the test after ``looks`` seeds (capped at the last look)."""
    table = boundaries(max_looks, alpha)
    return t_boundary(table[min(max(looks, 1), max_looks) - 1], dof)
