"""Study-level bootstrap of the law fit (pure: numpy, scipy).

Why: adjacent pairs share a depth's trainings (pair 6-12 and pair 12-18 both use depth 12's
run of seed s at a budget), so their transitions are not independent and error bars that treat
them as independent are wrong in an unknown direction. The bootstrap resamples the whole study
and re-estimates every pair's transition from the resampled data, so whatever correlation the
shared trainings create is carried into the fit's intervals.

One replicate (:func:`study_replicate`):

1. Seeds, jointly across pairs. One vector of uniforms ``U₁..U_K`` is drawn for the whole
   study. At a point whose seeds, sorted by id, are ``T`` (``m`` of them), the j-th resampled
   Δ is the one of seed ``T[⌊U_j·m⌋]``. Every point with the same seed set (a grid budget in
   every pair) therefore draws the same seed ids: a seed drawn once serves every pair. Points
   with more seeds (refine added some) draw nested ids, and a point keeps its number of seeds,
   so no point goes empty. A point with one seed keeps its Δ: one seed shows no seed spread.
2. Points, within each pair (``points=True``; off by default): the pair's points are drawn
   with replacement; a point drawn r times contributes its resampled Δs r times, a point not
   drawn is absent (so a replicate may lose a bracket and report the pair censored). Measured
   on ``search_spaces/simulated.yaml``: this spreads a and b 15-20 times wider than the
   observed information and the seed bootstrap, which agree with each other and with χ²_red ≈ 1.
   The points of a bisection were placed by the data (an adaptive design); drawing them with
   replacement throws away the bracket the design built, so it answers "what if the study had
   measured other sizes", not "how uncertain is this study's N*". It is kept as a sensitivity
   check, reported beside the seed bootstrap, never instead of it.

Each pair's transition is then re-estimated by ``estimate_crossing`` (the refine stage's own
estimator, :mod:`dwtune.core.refine.estimate`) and the law refitted by the interval-censored
likelihood. :func:`bootstrap_fit` reports percentile intervals of a, b and the projections,
and how many replicates could not be fitted (they are counted, never hidden).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dwtune.core.errors import InputError
from dwtune.core.fit.censored import (
    BRACKETED,
    CENSORED_HIGH,
    CENSORED_LOW,
    UNDECIDED,
    TransitionObservation,
    fit_law,
)
from dwtune.core.projection import DepthWidthLaw, optimal_depth
from dwtune.core.vocabulary import LEVEL

if TYPE_CHECKING:  # the estimator is imported where it is used (_default_estimator)
    from dwtune.core.refine.estimate import CrossingEstimate
    from dwtune.core.refine.noise import NoisePrior
    from dwtune.core.refine.signs import DeltaPoint, SignRule

INNER_BOOT = 200  # estimate_crossing's own bootstrap per replicate: only σ(ln N*) needs it
SIGMA_FLOOR = 0.1  # share of a replicate's median σ(ln N*) below which a pair's σ is raised


@dataclass(frozen=True)
class PairPoints:
    """A depth pair and its DeltaPoints (``dwtune.core.refine.signs.DeltaPoint``)."""

    label: str
    depth_shallow: float
    depth_deep: float
    points: tuple[DeltaPoint, ...]


def _by_seed(point: DeltaPoint) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The point's Δs and seed ids sorted by seed id (positions stand in for missing ids)."""
    seeds = tuple(point.seeds) if len(point.seeds) == len(point.deltas) else ()
    ids = seeds or tuple(range(len(point.deltas)))
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    return tuple(point.deltas[i] for i in order), tuple(ids[i] for i in order)


def resample_seeds(point: DeltaPoint, uniforms: np.ndarray) -> DeltaPoint:
    """The point with its seeds resampled by the shared ``uniforms`` (module doc, step 1)."""
    deltas, ids = _by_seed(point)
    m = len(deltas)
    if m <= 1:
        return point
    picks = np.minimum((uniforms[:m] * m).astype(int), m - 1)
    seeds = tuple(ids[i] for i in picks) if point.seeds else ()
    return dataclasses.replace(point, deltas=tuple(deltas[i] for i in picks), seeds=seeds)


def resample_points(points: Sequence[DeltaPoint], rng: np.random.Generator) -> list[DeltaPoint]:
    """Points drawn with replacement; a point drawn r times has its Δs repeated r times."""
    counts = Counter(rng.integers(0, len(points), size=len(points)).tolist())
    drawn = []
    for i in sorted(counts):
        point, r = points[i], counts[i]
        drawn.append(
            dataclasses.replace(point, deltas=tuple(point.deltas) * r, seeds=tuple(point.seeds) * r)
        )
    return sorted(drawn, key=lambda p: p.n)


def study_replicate(
    pairs: Sequence[PairPoints],
    rng: np.random.Generator,
    *,
    joint: bool = True,
    points: bool = False,
) -> list[list[DeltaPoint]]:
    """One resampled study: per pair, its resampled DeltaPoints (module doc).

    ``joint=False`` draws the seeds of each pair independently of the other pairs (the
    independence assumption, kept to measure what the joint draw changes).
    """
    width = max((len(p.deltas) for pair in pairs for p in pair.points), default=0)
    shared = rng.random(width)
    replicate = []
    for pair in pairs:
        uniforms = shared if joint else rng.random(width)
        chosen = resample_points(pair.points, rng) if points else list(pair.points)
        replicate.append([resample_seeds(p, uniforms) for p in chosen])
    return replicate


def observation_from_estimate(
    pair: PairPoints, estimate: CrossingEstimate, points: Sequence[DeltaPoint]
) -> TransitionObservation:
    """A CrossingEstimate as the fit's observation: a bracketed N*, or the bound its decided
    signs give (a censored or undecided pair; the range end where an estimate has none)."""
    sizes = [p.n for p in points]
    status = estimate.status
    low = getattr(estimate, "bound_low", None)
    high = getattr(estimate, "bound_high", None)
    direction = None
    if status == BRACKETED and estimate.n_star:
        log_n = math.log(estimate.n_star)
    elif status == CENSORED_HIGH and sizes:
        log_n = math.log(low if low else max(sizes))
    elif status == CENSORED_LOW and sizes:
        log_n = math.log(high if high else min(sizes))
    elif status == UNDECIDED and low and not high:
        log_n, direction = math.log(low), +1
    elif status == UNDECIDED and high and not low:
        log_n, direction = math.log(high), -1
    else:
        log_n = math.nan
    sigma = estimate.sigma_ln if estimate.sigma_ln is not None else math.nan
    seeds = max((len(p.deltas) for p in points), default=0)
    return TransitionObservation(
        pair.label, pair.depth_shallow, pair.depth_deep, status, log_n, sigma, seeds,
        direction=direction,
    )  # fmt: skip


def _default_estimator() -> Callable[..., CrossingEstimate]:
    from dwtune.core.refine.estimate import estimate_crossing

    return estimate_crossing


def build_replicates(
    pairs: Sequence[PairPoints],
    n_replicates: int,
    *,
    seed: int = 0,
    estimator: Callable[..., CrossingEstimate] | None = None,
    joint: bool = True,
    points: bool = False,
    prior: NoisePrior | None = None,
    rule: SignRule | None = None,
    n_boot: int = INNER_BOOT,
) -> list[list[TransitionObservation]]:
    """``n_replicates`` resampled studies, each pair re-estimated by ``estimate_crossing``
    (with the study's noise ``prior`` and sign ``rule``; the estimator's defaults if None)."""
    if n_replicates < 1:
        raise InputError(f"bootstrap replicates: got {n_replicates!r}; expected at least 1")
    estimate = estimator or _default_estimator()
    rng = np.random.default_rng(seed)
    options = {k: v for k, v in (("prior", prior), ("rule", rule)) if v is not None}
    replicates = []
    for r in range(n_replicates):
        study = study_replicate(pairs, rng, joint=joint, points=points)
        observed = [
            observation_from_estimate(
                pair, estimate(pts, n_boot=n_boot, seed=seed + r, **options), pts
            )
            for pair, pts in zip(pairs, study, strict=True)
        ]
        replicates.append(_with_sigma_floor(observed))
    return replicates


def _with_sigma_floor(observed: list[TransitionObservation]) -> list[TransitionObservation]:
    """σ(ln N*) of a replicate's bracketed pairs floored at SIGMA_FLOOR × their median.

    The inner bootstrap of a resampled pair can be degenerate (every inner draw finds the same
    root, σ = 0 or 1e-12): σ only weighs the refit, and such a pair would take all the weight
    and make the information matrix singular."""
    positive = [o.sigma_ln for o in observed if o.status == BRACKETED and o.sigma_ln > 0]
    if not positive:
        return observed
    floor = SIGMA_FLOOR * float(np.median(positive))
    return [
        dataclasses.replace(o, sigma_ln=floor)
        if o.status == BRACKETED and not o.sigma_ln >= floor
        else o
        for o in observed
    ]


@dataclass(frozen=True)
class BootstrapFit:
    """Percentile intervals over the replicates that could be fitted."""

    level: float
    n_replicates: int
    n_fitted: int
    failures: dict[str, int]  # reason -> replicates
    a: tuple[float, float, float]  # (median, low, high)
    b: tuple[float, float, float]
    sd: tuple[float, float]  # of (a, b) over the replicates
    projections: dict[float, dict[str, tuple[float, float, float]]]  # budget -> depth/width
    coefficients: tuple[tuple[float, float], ...] = ()  # (a, b) of every fitted replicate

    def spread_at(self, depth: float) -> float:
        """sd over the replicates of the fitted ``ln dx*`` at ``depth``."""
        ab = np.array(self.coefficients, dtype=float).reshape(-1, 2)
        return float(np.std(ab[:, 0] + depth * ab[:, 1], ddof=1)) if len(ab) > 1 else math.nan

    def to_dict(self) -> dict[str, object]:
        return {
            "level": self.level,
            "replicates": self.n_replicates,
            "fitted": self.n_fitted,
            "failures": self.failures,
            "a": dict(zip(("median", "low", "high"), self.a, strict=True)),
            "b": dict(zip(("median", "low", "high"), self.b, strict=True)),
            "sd_a": self.sd[0],
            "sd_b": self.sd[1],
            "projections": [_projection_dict(n, p) for n, p in self.projections.items()],
        }


def _projection_dict(
    budget: float, shapes: dict[str, tuple[float, float, float]]
) -> dict[str, object]:
    names = ("median", "low", "high")
    return {"budget": budget} | {
        key: dict(zip(names, value, strict=True)) for key, value in shapes.items()
    }


def _percentiles(values: Sequence[float] | np.ndarray, level: float) -> tuple[float, float, float]:
    """Median and the percentile interval; inf (no optimal depth) counts as the largest value."""
    x = np.asarray(values, dtype=float)
    if not x.size:
        return math.nan, math.nan, math.nan
    tail = (1.0 - level) / 2.0
    q = np.quantile(x, [0.5, tail, 1.0 - tail], method="inverted_cdf")
    return float(q[0]), float(q[1]), float(q[2])


def _projected(a: float, b: float, budget: float) -> tuple[float, float]:
    """(optimal depth, width); a slope that is not positive has no optimal depth (inf, 0)."""
    if not b > 0:
        return math.inf, 0.0
    depth = optimal_depth(DepthWidthLaw("replicate", a, b), budget)
    return depth, math.sqrt(budget / (12.0 * depth))


def _short(reason: str) -> str:
    return reason.split(";")[0]


def bootstrap_fit(
    replicates: Sequence[Sequence[TransitionObservation]],
    budgets: Sequence[float] = (),
    level: float = LEVEL,
) -> BootstrapFit:
    """Refit every replicate; percentile intervals of a, b and each budget's projection."""
    coefs: list[tuple[float, float]] = []
    failures: Counter[str] = Counter()
    for observations in replicates:
        try:
            fit = fit_law(observations)
        except (InputError, np.linalg.LinAlgError) as exc:
            failures[_short(str(exc))] += 1
            continue
        coefs.append((fit.a, fit.b))
    ab = np.array(coefs, dtype=float).reshape(-1, 2)
    projections: dict[float, dict[str, tuple[float, float, float]]] = {}
    for budget in budgets:
        shapes = np.array([_projected(a, b, budget) for a, b in ab]).reshape(-1, 2)
        projections[float(budget)] = {
            "depth": _percentiles(shapes[:, 0], level),
            "width": _percentiles(shapes[:, 1], level),
        }
    spread = ab.std(axis=0, ddof=1) if len(ab) > 1 else np.full(2, math.nan)
    return BootstrapFit(
        level=level,
        n_replicates=len(replicates),
        n_fitted=len(ab),
        failures=dict(failures),
        a=_percentiles(ab[:, 0], level),
        b=_percentiles(ab[:, 1], level),
        sd=(float(spread[0]), float(spread[1])),
        projections=projections,
        coefficients=tuple((float(a), float(b)) for a, b in ab),
    )
