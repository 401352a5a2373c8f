"""The one sign rule and how a pair's signs read (pure: numpy, scipy).

Rule (:class:`SignRule`): a point is positive (the deeper net loses) when ``mean/se > c``,
negative when ``mean/se < −c``, else within noise; ``c`` is the α-spending boundary of the
look (``k`` seeds are look ``k`` of ``max_looks``, :mod:`~dwtune.core.refine.sequential`) as a
Student-t quantile on the noise's degrees of freedom, so a point at a true Δ of 0 is given a
sign over all its looks with probability at most ``alpha``. ``min_looks`` seeds come first.

Inputs: a pair's :class:`DeltaPoint` (paired Δ per seed, nats; ±inf for a failed training,
which stands for the pair's most extreme finite Δ of its sign and decides only at the last
look), and the pair's :class:`~dwtune.core.refine.noise.Noise`.

Runs (:func:`classify`): consecutive points of one sign form a :class:`Run`. The expected
pattern is one positive run then one negative; any other pattern first drops the runs whose
strongest point is below ``Z_CONFIRM`` (a t quantile on the same dof). What remains decides
the status: positive only → ``censored_high``, negative only → ``censored_low`` (each
``undecided`` where points within noise lie beyond the decided edge), + then − →
``bracketed``, anything else → ``non_monotone``. Every status but ``non_monotone`` keeps the
bounds its decided signs give (:func:`decided_bounds`).

Every place that calls a sign (the refine loop, the reported status and N*, the report,
``dwtune analyze``) decides with this rule. See docs/statistics.md ("One sign rule",
"Status, bounds and the statement").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.refine import sequential
from dwtune.core.refine.noise import Noise, NoisePrior, estimate_noise
from dwtune.core.spec import RefineConfig


@dataclass(frozen=True)
class SignRule:
    """Two-sided sign test with error control over repeated looks (module doc)."""

    alpha: float = 0.05  # false-sign rate at a true Δ of 0, over all looks
    max_looks: int = 1  # looks a point may get (refine.max_seeds; 1 for a fixed table)
    min_looks: int = 1  # looks before a sign may count

    def boundary(self, looks: int, dof: float) -> float:
        """|mean|/se a point needs after ``looks`` looks, noise on ``dof`` degrees of freedom."""
        return sequential.boundary(max(looks, 1), self.max_looks, self.alpha, dof)

    def enough(self, looks: int) -> bool:
        return looks >= min(self.min_looks, self.max_looks)

    def sign(self, mean: float, se: float, looks: int, dof: float) -> int:
        """+1 (deeper loses), −1 (deeper wins) or 0 (within noise, or too few looks)."""
        if not (self.enough(looks) and math.isfinite(mean)) or not se > 0:
            return 0
        if abs(mean) <= self.boundary(looks, dof) * se:
            return 0
        return 1 if mean > 0 else -1


Z_CONFIRM = 3.0  # strongest |m|/se a run needs to count when the pattern is not + then −


MIN_SE = 1e-12  # nats: floor of a standard error (noise-free surfaces)


@dataclass(frozen=True)
class DeltaPoint:
    """Paired Δ of one size: one value per seed (nats); ±inf for a failed training."""

    n: float  # size compared at (the pair's size axis; N* is in the same units)
    deltas: tuple[float, ...]  # Δ = loss(deeper) − loss(shallower) per paired seed, nats
    extra_sd: float = 0.0  # sd of an error shared by every Δ at this point, nats
    seeds: tuple[int, ...] = ()  # seed ids aligned with deltas (joint resampling across pairs)
    failures_deep: int = 0  # trainings of the deeper net that diverged/failed/went unstable
    failures_shallow: int = 0
    # per seed (aligned with seeds): "deep", "shallow", "deepshallow" or "" for the trainings
    # flagged unstable (dwtune.core.refine.points); () when none was
    unstable: tuple[str, ...] = ()


def usable_groups(points: Sequence[DeltaPoint]) -> list[np.ndarray]:
    """Each point's finite Δ: those of seeds where both nets finished stably."""
    return [np.asarray([d for d in p.deltas if math.isfinite(d)], dtype=float) for p in points]


def seeded_groups(points: Sequence[DeltaPoint]) -> list[dict[int, float]]:
    """Each point's finite Δ by seed (empty where its seeds are not recorded)."""
    return [
        {s: d for s, d in zip(p.seeds, p.deltas, strict=True) if math.isfinite(d)}
        if len(p.seeds) == len(p.deltas)
        else {}
        for p in points
    ]


def pair_noise(points: Sequence[DeltaPoint], prior: NoisePrior) -> Noise:
    """The pair's noise model (:func:`dwtune.core.refine.noise.estimate_noise`), a seed's
    persistence across sizes measured where the points record their seeds."""
    x = np.log([p.n for p in points])
    return estimate_noise(x, usable_groups(points), prior, seeded_groups(points))


@dataclass(frozen=True)
class PointSigns:
    """Every point's mean Δ, standard error, rule boundary and sign under one noise model."""

    means: np.ndarray
    se: np.ndarray
    bounds: np.ndarray  # |m|/se a sign needs (inf: too few seeds, or failures alone too early)
    confirm: np.ndarray  # |m|/se a run's strongest point needs outside the + then − pattern
    signs: np.ndarray  # +1, −1, 0
    strong: np.ndarray  # beyond `confirm`, and measured (not failures alone)


@dataclass(frozen=True)
class SignedPoint:
    """One point as the rule judged it: size (the pair's axis), mean Δ, its se, its sign."""

    n: float
    mean: float
    se: float
    sign: int

    def text(self) -> str:
        return f"{self.mean:+.3f} ± {self.se:.3f} at {self.n:.3g}"


def signed(points: Sequence[DeltaPoint], signs: PointSigns) -> tuple[SignedPoint, ...]:
    """Every point's mean Δ, se and sign as ``signs`` judged them (what a statement quotes)."""
    return tuple(
        SignedPoint(p.n, float(m), float(e), int(s))
        for p, m, e, s in zip(points, signs.means, signs.se, signs.signs, strict=True)
    )


def rule_bounds(points: Sequence[DeltaPoint], noise: Noise, rule: SignRule) -> np.ndarray:
    """The boundary of each point's look; inf where the rule needs more seeds, and where a
    point's Δ are all failures before its last look (failures decide only at max_seeds)."""
    bounds = []
    for p, dof in zip(points, noise.dof, strict=True):
        looks = len(p.deltas)
        failures_only = not any(math.isfinite(d) for d in p.deltas)
        early = failures_only and looks < rule.max_looks
        bounds.append(math.inf if early or not rule.enough(looks) else rule.boundary(looks, dof))
    return np.asarray(bounds, dtype=float)


def point_signs(
    points: Sequence[DeltaPoint], noise: Noise, rule: SignRule, counts: np.ndarray | None = None
) -> PointSigns:
    """Signs of ``points`` under ``noise`` by ``rule`` (module doc). ``counts``: seeds each
    point's standard error counts (default: all of them)."""
    if counts is None:  # a point without any Δ (both nets failed at every seed) has no sign
        counts = np.array([max(len(p.deltas), 1) for p in points], dtype=float)
    extra = np.array([p.extra_sd for p in points], dtype=float)
    means = point_means(points)
    se = np.maximum(np.sqrt(noise.sd**2 / counts + extra**2), MIN_SE)
    bounds = rule_bounds(points, noise, rule)
    confirm = np.array([sequential.t_boundary(Z_CONFIRM, d) for d in noise.dof])
    signs, strong = signs_of_ratios(means, se, bounds, confirm)
    measured = np.array([any(math.isfinite(d) for d in p.deltas) for p in points])
    return PointSigns(means, se, bounds, confirm, signs, strong & measured)


def point_means(points: Sequence[DeltaPoint]) -> np.ndarray:
    """Mean Δ per point, with ±inf replaced by the pair's most extreme finite Δ (module doc)."""
    finite = [d for p in points for d in p.deltas if math.isfinite(d)]
    high, low = (max(finite), min(finite)) if finite else (1.0, -1.0)
    high, low = max(high, 0.0), min(low, 0.0)
    means = []
    for p in points:
        values = [high if d == math.inf else low if d == -math.inf else d for d in p.deltas]
        means.append(float(np.mean(values)) if values else math.nan)
    return np.asarray(means)


def signs_of_ratios(
    means: np.ndarray, se: np.ndarray, bounds: np.ndarray, confirm: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sign of each point (+1, −1, 0 within noise) and whether it is beyond its ``confirm``
    (arrays broadcast: a bootstrap passes one row per replicate)."""
    ratio = means / se
    signs = np.where(ratio > bounds, 1, np.where(ratio < -bounds, -1, 0))
    return signs, np.abs(ratio) >= confirm


@dataclass(frozen=True)
class Run:
    """Consecutive sorted points of one decided sign: indices ``first`` to ``last``."""

    sign: int  # +1 or −1
    first: int
    last: int
    strong: bool  # some point of it beyond Z_CONFIRM (and measured, not failures alone)


@dataclass(frozen=True)
class Window:
    """Where a sign changes: the last point of the run before it and the first of the run
    after it (the innermost bracket, whose signs are decided)."""

    before: int
    after: int


def runs_of(signs: Sequence[int], strong: Sequence[bool]) -> list[Run]:
    """Each run of decided points, in order."""
    runs: list[Run] = []
    for i, sign in enumerate(signs):
        if sign == 0:
            continue
        if runs and runs[-1].sign == sign:
            runs[-1] = replace(runs[-1], last=i, strong=bool(runs[-1].strong or strong[i]))
        else:
            runs.append(Run(int(sign), i, i, bool(strong[i])))
    return runs


def beyond_noise(runs: list[Run]) -> list[Run]:
    """Drop runs that are not beyond noise unless the pattern is the expected + then −."""
    if [r.sign for r in runs] in ([1, -1], [1], [-1]):
        return runs
    merged: list[Run] = []
    for run in (r for r in runs if r.strong):
        if merged and merged[-1].sign == run.sign:
            merged[-1] = replace(merged[-1], last=run.last)
        else:
            merged.append(run)
    return merged


@dataclass(frozen=True)
class Shape:
    """A pair's status and the window of each of its sign changes."""

    status: str
    windows: tuple[Window, ...]


def classify(signs: Sequence[int], strong: Sequence[bool]) -> Shape:
    """Status and crossing windows of sorted points' signs (module doc)."""
    runs = beyond_noise(runs_of(signs, strong))
    pattern = [r.sign for r in runs]
    noisy = [i for i, s in enumerate(signs) if s == 0]
    status = vocabulary.TransitionStatus
    if not runs:
        return Shape(status.UNDECIDED, ())
    if set(pattern) == {1}:
        above = bool(noisy) and noisy[-1] > runs[-1].last
        return Shape(status.UNDECIDED if above else status.CENSORED_HIGH, ())
    if set(pattern) == {-1}:
        below = bool(noisy) and noisy[0] < runs[0].first
        return Shape(status.UNDECIDED if below else status.CENSORED_LOW, ())
    windows = tuple(Window(a.last, b.first) for a, b in itertools.pairwise(runs))
    bracketed = pattern == [1, -1]
    return Shape(status.BRACKETED if bracketed else status.NON_MONOTONE, windows)


def decided_bounds(
    x: np.ndarray, signs: np.ndarray, shape: Shape
) -> tuple[float | None, float | None]:
    """(low, high) sizes the decided signs bound N* by (module doc); None where open."""
    positive, negative = np.flatnonzero(signs > 0), np.flatnonzero(signs < 0)
    status = shape.status
    if status == vocabulary.TransitionStatus.BRACKETED:
        before, after = shape.windows[0].before, shape.windows[0].after
        return math.exp(x[before]), math.exp(x[after])
    if status == vocabulary.TransitionStatus.NON_MONOTONE:
        return None, None
    if positive.size and not negative.size:  # censored_high, or undecided above its edge
        return math.exp(x[positive[-1]]), None
    if negative.size and not positive.size:
        return None, math.exp(x[negative[0]])
    return None, None


DEFAULT_RULE = SignRule(alpha=0.05, max_looks=4, min_looks=2)  # refine's defaults


# Paired seeds a point needs before its sign counts (capped at refine.max_seeds): one
# training cannot tell a loss spike from a sign, and one spike decided at one seed was the main
# false-sign source on the outliers surface (benchmarks/coverage.py).
MIN_DECIDE_SEEDS = 2


def sign_rule(refine: RefineConfig) -> SignRule:
    """The study's one sign rule: refine.alpha over refine.max_seeds looks, two seeds first."""
    return SignRule(refine.alpha, refine.max_seeds, MIN_DECIDE_SEEDS)


def noise_prior(refine: RefineConfig) -> NoisePrior:
    """The spec's noise guess and the pseudo-observations it is worth."""
    return NoisePrior(refine.noise_prior, refine.noise_prior_dof)
