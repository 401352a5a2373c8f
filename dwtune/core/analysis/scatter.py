"""The noise of Δ from its scatter about its own trend, for tables with no replicate runs and
no checkpoints (pure: numpy, scipy).

Input: a pair's points sorted by size, one Δ each at ``x = ln N`` (nats), each with its known
extra error ``e_i`` (the size trend's and an unpaired mean's, ``DeltaPoint.extra_sd``).
Output: the sd of one Δ (``σ``, the same at every size) with its degrees of freedom.

Rule (docs/statistics.md, "Noise from the scatter about the trend"). Δ is a smooth function
of ln N plus noise. Each interior point gives a difference-based pseudo-residual (Gasser,
Sroka and Jennen-Steinmetz 1986): the point minus the straight line through its two
neighbours,

    r_i = a_i·Δ_{i−1} + b_i·Δ_{i+1} − Δ_i,
    a_i = (x_{i+1} − x_i)/(x_{i+1} − x_{i−1}),   b_i = 1 − a_i

which removes any trend that is straight over three neighbouring points, whatever their
spacing, with ``Var r_i = c_i·σ² + k_i``, ``c_i = a_i² + b_i² + 1`` and ``k_i`` the same sum of
the known ``e²``. σ² solves ``median_i r_i² / (c_i·σ² + k_i) = q``, with ``q`` the median of
χ²₁ (0.4549): a median, so the few pseudo-residuals a bend puts beyond the noise (near N*,
where Δ turns, or at a second dip) do not set it (breakdown 50%). Its degrees of freedom are
those of a χ² with the same relative variance: the median of ``m`` independent χ²₁ values
estimates σ² with relative variance ``p(1−p)/(m·f(q)²·q²)`` = 5.44/m (``f`` the χ²₁ density),
so ``ν = 0.368·m_eff``, where ``m_eff = m² / Σ_ij ρ_ij²`` counts the pseudo-residuals as the
independent ones they are worth (neighbours share points: ``ρ`` their correlations under the
model's variances).

What it cannot show: seed-to-seed variation that moves a whole stretch of sizes together (a
seed's luck shared across sizes) looks like trend, not scatter, and is missed; a trend that
bends within three neighbouring points (points far apart beside a sharp turn) is counted as
noise, so the estimate errs large there (decisions are then fewer, never more). Replicate runs
measure σ directly and are always preferred.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

from dwtune.core import vocabulary
from dwtune.core.refine.noise import Noise
from dwtune.core.refine.signs import MIN_SE

MEDIAN_CHI2_1 = float(stats.chi2.ppf(0.5, 1))  # 0.4549: the median of χ²₁
# ν per effective pseudo-residual: 2·f(q)²·q²/(p·(1 − p)) at p = 1/2, q = MEDIAN_CHI2_1
DOF_PER_RESIDUAL = 2.0 * float(stats.chi2.pdf(MEDIAN_CHI2_1, 1)) ** 2 * MEDIAN_CHI2_1**2 / 0.25
MIN_RESIDUALS = 6  # pseudo-residuals the estimate needs (fewer: ν < 2, a t boundary past 4)


def pseudo_residuals(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The difference operator D (rows: interior points; r = D·Δ) and c_i = Σ_j D_ij²."""
    n = x.size
    d = np.zeros((max(n - 2, 0), n))
    for row, i in enumerate(range(1, n - 1)):
        a = (x[i + 1] - x[i]) / (x[i + 1] - x[i - 1])
        d[row, i - 1 : i + 2] = (a, -1.0, 1.0 - a)
    return d, (d**2).sum(axis=1)


def _sigma2(r2: np.ndarray, c: np.ndarray, k: np.ndarray) -> float:
    """σ² solving median(r²/(c·σ² + k)) = q; 0 where the known errors alone explain more."""

    def excess(s2: float) -> float:
        return float(np.median(r2 / (c * s2 + k))) - MEDIAN_CHI2_1

    floor = 1e-12  # nats²: below a micro-nat of sd the noise is nil for every sign here
    if excess(floor) <= 0:
        return 0.0
    high = float(np.median(r2 / c)) / MEDIAN_CHI2_1 + floor
    while excess(high) > 0:  # k ≥ 0 makes the median at σ² = high at most q: rarely needed
        high *= 2.0
    return float(optimize.brentq(excess, floor, high, xtol=1e-16))


def effective_count(d: np.ndarray, variance: np.ndarray) -> float:
    """m_eff = m² / Σ_ij ρ_ij² of the pseudo-residuals r = D·Δ with Var Δ = ``variance``."""
    cov = (d * variance[None, :]) @ d.T
    sd = np.sqrt(np.diag(cov))
    rho = cov / np.outer(sd, sd)
    return float(d.shape[0] ** 2 / np.sum(rho**2))


def scatter_noise(
    log_n: Sequence[float], deltas: Sequence[float], extra_sd: Sequence[float]
) -> Noise | None:
    """σ of one Δ and its dof from the scatter of the points about their trend (module doc);
    None where fewer than MIN_RESIDUALS + 2 finite points lie on the pair's axis."""
    x, y = np.asarray(log_n, dtype=float), np.asarray(deltas, dtype=float)
    e = np.asarray(extra_sd, dtype=float)
    keep = np.isfinite(y) & np.isfinite(x)
    x, y, e = x[keep], y[keep], e[keep]
    order = np.argsort(x, kind="stable")
    x, y, e = x[order], y[order], e[order]
    distinct = np.concatenate([[True], np.diff(x) > 0])  # equal sizes: the operator needs spacing
    x, y, e = x[distinct], y[distinct], e[distinct]
    if x.size < MIN_RESIDUALS + 2:
        return None
    d, c = pseudo_residuals(x)
    r2 = (d @ y) ** 2
    k = (d**2) @ (e**2)
    sigma2 = _sigma2(r2, c, k)
    dof = DOF_PER_RESIDUAL * effective_count(d, sigma2 + e**2 + MIN_SE**2)
    sd = max(math.sqrt(sigma2), MIN_SE)
    count = len(deltas)
    return Noise(np.full(count, sd), np.full(count, dof), dof, vocabulary.NOISE_TREND_SCATTER)
