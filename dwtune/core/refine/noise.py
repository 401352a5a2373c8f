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

Seeds are random effects: one seed fixes the data order and the initialisation stream at every
size, so its luck persists across sizes. Its share is measured, paired by seed across the pair's
points (:func:`seed_persistence`): for every two points, their Δ centred over the seeds they
share, ``ĉ = Σ Σ_s d_is·d_js / Σ sqrt(Σ_s d_is² · Σ_s d_js²)`` (clipped to [0, 0.99]), taken
only where the seeds' effects are beyond noise: an F test of the additive model ``Δ_is = μ_i +
a_s`` against ``Δ_is = μ_i`` at level ``PERSISTENCE_ALPHA`` (with a handful of seeds the cross
products alone are positive half the time where no luck persists). Two points'
sums of squares over ``ν_ij + 1`` shared seeds then covary by ``ĉ²·ν_ij`` of their variance, so
the pooled variance is worth fewer degrees of freedom than ``Σ ν_j``::

    ν_eff = (Σ ν_j)² / (Σ ν_j + ĉ²·Σ_{i≠j} ν_ij)

and every measured dof is scaled by ``ν_eff / Σ ν_j`` (the sd itself is unchanged). The
parametric bootstrap of N* draws each seed's effect once for all sizes
(:mod:`dwtune.core.refine.estimate`).

Usable Δ: finite, and from two trainings that both finished stably. A failed or unstable
training (:func:`unstable_trainings`) still counts for the sign of its point
(:mod:`dwtune.core.refine.points`), but it says nothing about the seed-to-seed noise, so one
training that went astray at one size never sets the noise of every size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

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
    persistence: float = 0.0  # ĉ: correlation of a seed's Δ deviation between sizes

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


PERSISTENCE_ALPHA = 0.05  # level of the F test a seed's persistence must pass to be counted


def seed_effects_p(seeded: Sequence[Mapping[int, float]]) -> float:
    """p-value of the F test of seed effects shared across points (module doc): additive
    least squares on the points with two or more seeds; 1 where it has no dof."""
    rows = [(i, s, v) for i, g in enumerate(seeded) if len(g) >= 2 for s, v in g.items()]
    if not rows:
        return 1.0
    points = sorted({r[0] for r in rows})
    seeds = sorted({r[1] for r in rows})
    y = np.array([r[2] for r in rows])
    within = np.zeros((len(rows), len(points)))
    effects = np.zeros((len(rows), len(seeds)))
    for k, (i, s, _) in enumerate(rows):
        within[k, points.index(i)] = 1.0
        effects[k, seeds.index(s)] = 1.0
    full = np.hstack([within, effects])
    rank0, rank1 = np.linalg.matrix_rank(within), np.linalg.matrix_rank(full)
    dof = len(rows) - rank1
    if rank1 <= rank0 or dof <= 0:
        return 1.0
    rss0 = float(np.sum((y - within @ np.linalg.lstsq(within, y, rcond=None)[0]) ** 2))
    rss1 = float(np.sum((y - full @ np.linalg.lstsq(full, y, rcond=None)[0]) ** 2))
    if rss1 <= 0:
        return 0.0 if rss0 > 0 else 1.0
    f = ((rss0 - rss1) / (rank1 - rank0)) / (rss1 / dof)
    return float(stats.f.sf(f, rank1 - rank0, dof))


def seed_persistence(seeded: Sequence[Mapping[int, float]]) -> tuple[float, float]:
    """(ĉ, Σ_{i≠j} ν_ij) of the module doc from each point's usable Δ by seed: ĉ the
    correlation of a seed's deviation between two sizes, pooled over every two points that
    share two or more seeds; ν_ij their shared seeds less one. (0, 0) where none share two."""
    cross = scale = shared_dof = 0.0
    for i, first in enumerate(seeded):
        for second in seeded[i + 1 :]:
            common = sorted(set(first) & set(second))
            if len(common) < 2:
                continue
            a = np.array([first[s] for s in common])
            b = np.array([second[s] for s in common])
            a, b = a - a.mean(), b - b.mean()
            cross += float(a @ b)
            scale += math.sqrt(float(a @ a) * float(b @ b))
            shared_dof += 2.0 * (len(common) - 1)  # (i, j) and (j, i)
    if scale <= 0 or seed_effects_p(seeded) >= PERSISTENCE_ALPHA:
        return 0.0, shared_dof
    return min(max(cross / scale, 0.0), 0.99), shared_dof


def effective_share(measured: float, persistence: float, shared_dof: float) -> float:
    """ν_eff / Σ ν_j of the module doc (1 where no seed persists)."""
    if measured <= 0:
        return 1.0
    return measured / (measured + persistence**2 * shared_dof)


def estimate_noise(
    log_n: Sequence[float] | np.ndarray,
    groups: Sequence[np.ndarray],
    prior: NoisePrior,
    seeded: Sequence[Mapping[int, float]] = (),
) -> Noise:
    """The noise model of the module doc from each point's usable Δ (``groups``) at ``log_n``;
    ``seeded``: the same Δ by seed, where the seeds are known (their persistence across sizes)."""
    x = np.asarray(log_n, dtype=float)
    ss, dof = sums_of_squares(groups)
    persistence, shared_dof = seed_persistence(seeded)
    share = effective_share(float(dof.sum()), persistence, shared_dof)
    ss_dof = dof  # the variances are the seeds' own: only their worth in dof is shared
    dof = dof * share
    measured = float(dof.sum())
    pool_dof = measured + prior.dof
    pool_var = (float(ss.sum()) + prior.dof * prior.sd**2) / (float(ss_dof.sum()) + prior.dof)
    near = np.exp(-0.5 * ((x[:, None] - x[None, :]) / NOISE_BANDWIDTH) ** 2)
    shrink = min(SHRINK_DOF, pool_dof)
    local_ss, local_dof = near @ ss, near @ dof
    variance = (local_ss + shrink * pool_var) / (near @ ss_dof + shrink)
    point_dof = np.minimum(local_dof + shrink, pool_dof)
    source = vocabulary.NOISE_MEASURED if measured > 0 else vocabulary.NOISE_PRIOR
    return Noise(np.sqrt(variance), point_dof, measured, source, persistence)


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
