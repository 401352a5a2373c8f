"""The noise of a pair's paired Δ, learned from its seeds (pure: numpy).

Input: a pair's points, each with one paired Δ per seed (nats). Output: :class:`Noise`, the sd
of one paired Δ at every point with its degrees of freedom.

Each point with two or more usable Δ gives a sum of squares ``ss_j`` on ``ν_j = k_j − 1``
degrees of freedom. The spec's guess (``refine.noise_prior``, nats) enters as ``ν₀ =
refine.noise_prior_dof`` pseudo-observations, never as a known value::

    σ²_pool = (Σ ss_j + ν₀ · prior²) / (Σ ν_j + ν₀)          on Σ ν_j + ν₀ dof

so a prior that is wrong by any factor is outweighed as seeds come in, and while few seeds have
been trained its degrees of freedom stay few: the sign test's Student-t boundary then widens.

Noise may change with size: at each point the variance is pooled locally along ln N, each
point's ``ss_j`` and ``ν_j`` weighed by a Gaussian kernel of ``NOISE_BANDWIDTH`` e-folds, and
shrunk towards the pair's pool by ``min(SHRINK_DOF, Σ ν_j + ν₀)`` degrees of freedom::

    σ²(N_i) = (Σ_j w_ij ss_j + S · σ²_pool) / (Σ_j w_ij ν_j + S),   dof_i = Σ_j w_ij ν_j + S

(capped at the pool's own dof: pooling never creates information).

Usable Δ: finite, and from two trainings that both finished stably. A failed or unstable
training (:func:`unstable_trainings`) still counts for the sign of its point
(:mod:`dwtune.core.refine.points`), but it says nothing about the seed-to-seed noise, so one
training that went astray at one size never sets the noise of every size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dwtune.core import vocabulary

DEFAULT_NOISE_PRIOR = 0.003  # nats: a paired-difference sd guess (the paper: "stable to the
# third digit")
# Pseudo-observations the guess is worth: a quarter of a degree of freedom, so the error
# control of the sign rule holds with the guess wrong by 2-5x once the first seeds' degree of
# freedom outweighs it: the guess steadies the sd, the seeds set it (the false-sign rates with
# the guess right and wrong: benchmarks/README.md, coverage.py; docs/statistics.md).
DEFAULT_PRIOR_DOF = 0.25


NOISE_BANDWIDTH = 1.0  # e-folds of N: the sd of the Gaussian kernel that pools variances locally


SHRINK_DOF = 4.0  # degrees of freedom the pair-wide pool weighs in each local variance


# An unstable training: its final loss exceeds its twins' (same shape, other seeds) by more
# than UNSTABLE_Z robust sd of such differences, measured over the pair's other twins. Why 8:
# under normal noise a difference beyond 8 sd has probability 1e-15; the robust sd from as few
# as MIN_TWIN_DIFFS differences can be 3x too small by chance, and 8/3 sd still leaves a
# normal twin flagged well under 1% of the time.
UNSTABLE_Z = 8.0


MIN_TWIN_DIFFS = 5  # twin differences the robust sd needs; fewer: nothing is flagged


MAD_HALF_NORMAL = 0.6744898  # median of |N(0, 1)|


@dataclass(frozen=True)
class NoisePrior:
    """The spec's guess of the paired-Δ sd and the pseudo-observations it is worth."""

    sd: float = DEFAULT_NOISE_PRIOR  # nats
    dof: float = DEFAULT_PRIOR_DOF

    def __post_init__(self) -> None:
        if not (self.sd > 0 and math.isfinite(self.sd)):
            raise ValueError(f"noise prior sd must be a positive number, got {self.sd}")
        if not (self.dof > 0 and math.isfinite(self.dof)):
            raise ValueError(f"noise prior dof must be a positive finite count, got {self.dof}")


@dataclass(frozen=True)
class Noise:
    """sd of one paired Δ at each point (nats), its degrees of freedom at each point, and
    how much of it the seeds measured."""

    sd: np.ndarray
    dof: np.ndarray  # per point, finite: the prior's pseudo-observations included
    measured_dof: float  # degrees of freedom the seeds gave (0: the prior alone)
    source: str  # vocabulary.NOISE_MEASURED, vocabulary.NOISE_PRIOR, or a table's own method

    def dof_at(self, indices: Sequence[int]) -> float:
        """The fewest degrees of freedom among ``indices`` (a bracket's two ends)."""
        return float(min(self.dof[i] for i in indices))

    @classmethod
    def uniform(cls, count: int, sd: float, dof: float, source: str) -> Noise:
        """The same sd and dof at every point (a table whose noise is estimated elsewhere)."""
        return cls(np.full(count, float(sd)), np.full(count, float(dof)), float(dof), source)


def sums_of_squares(groups: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(ss_j, ν_j) of each point's usable Δ."""
    dof = np.array([max(g.size - 1, 0) for g in groups], dtype=float)
    ss = np.array([float(np.sum((g - g.mean()) ** 2)) if g.size > 1 else 0.0 for g in groups])
    return ss, dof


def estimate_noise(
    log_n: Sequence[float] | np.ndarray, groups: Sequence[np.ndarray], prior: NoisePrior
) -> Noise:
    """The noise model of the module doc from each point's usable Δ (``groups``) at ``log_n``."""
    x = np.asarray(log_n, dtype=float)
    ss, dof = sums_of_squares(groups)
    measured = float(dof.sum())
    pool_dof = measured + prior.dof
    pool_var = (float(ss.sum()) + prior.dof * prior.sd**2) / pool_dof
    near = np.exp(-0.5 * ((x[:, None] - x[None, :]) / NOISE_BANDWIDTH) ** 2)
    shrink = min(SHRINK_DOF, pool_dof)
    local_ss, local_dof = near @ ss, near @ dof
    variance = (local_ss + shrink * pool_var) / (local_dof + shrink)
    point_dof = np.minimum(local_dof + shrink, pool_dof)
    source = vocabulary.NOISE_MEASURED if measured > 0 else vocabulary.NOISE_PRIOR
    return Noise(np.sqrt(variance), point_dof, measured, source)


def robust_twin_sd(groups: Sequence[Sequence[float]]) -> float:
    """Robust sd of one training's loss from every pairwise difference of twins (same shape,
    other seeds): median |difference| / (√2 · 0.6745); NaN with fewer than MIN_TWIN_DIFFS."""
    diffs = [
        abs(a - b)
        for group in groups
        for i, a in enumerate(group)
        for b in group[i + 1 :]
        if math.isfinite(a) and math.isfinite(b)
    ]
    if len(diffs) < MIN_TWIN_DIFFS:
        return math.nan
    return float(np.median(diffs)) / (math.sqrt(2.0) * MAD_HALF_NORMAL)


def unstable_trainings(groups: Sequence[Sequence[float]], scale: float) -> list[list[bool]]:
    """Which losses of each group of twins are unstable: more than UNSTABLE_Z·√2·``scale``
    above the median of their twins. Only upwards: an instability costs loss, never saves it.
    Nothing is flagged without a scale (too few twins to measure one)."""
    flags = []
    for group in groups:
        row = []
        for i, loss in enumerate(group):
            twins = [v for j, v in enumerate(group) if j != i and math.isfinite(v)]
            excess = loss - float(np.median(twins)) if twins and math.isfinite(loss) else 0.0
            row.append(bool(math.isfinite(scale) and excess > UNSTABLE_Z * math.sqrt(2) * scale))
        flags.append(row)
    return flags
