"""The transition N* of a depth pair from every measured point (pure: numpy, scipy).

Input: a pair's :class:`~dwtune.core.refine.signs.DeltaPoint` (paired Δ per seed, nats, at
sizes N on the pair's axis), the spec's noise prior and the sign rule. Output: a
:class:`CrossingEstimate`: status, N*, 68% and 95% intervals, σ(ln N*), every crossing.

Rule (docs/statistics.md, "N* and its intervals"):

- signs and status by the one rule (:mod:`~dwtune.core.refine.signs`); a pair that is not
  bracketed reports the bounds its decided signs give;
- the chord: ln N* interpolated between the two points where the mean Δ changes sign inside
  the innermost bracket (a weighted line through the bracket's points where it changes sign
  several times), less the kink bias a stick world shows (:mod:`~dwtune.core.refine.stick`);
- intervals: a parametric bootstrap of the whole procedure (noise sd drawn from its sampling
  distribution, means around the observed ones), holding the chord's replicates with and
  without the kink correction; the 95% interval widened to the broken stick's profile band;
- the reported N*: the local line's crossing within ``PROFILE_REACH`` of the bracket (the
  stick's where a kink is beyond doubt), the chord's where too few points lie there;
- each interval also holds the reported estimator's own: the same bootstrap replicates (the
  same errors, centred on the values that estimator reads) put through that estimator, their
  percentiles about their median added to the reported N* (:func:`own_interval`). So N* lies
  strictly inside its 68% and 95% intervals unless its replicates are degenerate; it is never
  clipped into another estimator's interval;
- σ(ln N*): the larger of half the 68% width and the 95% interval's reach over ``Z95``.

Guarantee: none beyond what is measured; the coverage of these intervals with the noise guess
right and wrong is ``benchmarks/coverage.py``'s (benchmarks/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.refine import stick
from dwtune.core.refine.noise import Noise, NoisePrior
from dwtune.core.refine.signs import (
    DEFAULT_RULE,
    MIN_SE,
    DeltaPoint,
    PointSigns,
    Shape,
    SignedPoint,
    SignRule,
    Window,
    classify,
    decided_bounds,
    pair_noise,
    point_signs,
    seeded_groups,
    signed,
    signs_of_ratios,
)

CLIP_SD = 2.0  # noise sds from a point's median beyond which a seed's Δ is clipped (N* only)


Z95 = 1.959964  # normal 97.5% quantile: a 95% interval's half-width in σ


@dataclass(frozen=True)
class CrossingEstimate:
    """Status, N* with 95% and 68% intervals, σ(ln N*), every crossing, the noise's source."""

    status: str  # a transition status of dwtune.core.vocabulary
    n_star: float | None
    n_star_low: float | None  # 95% interval
    n_star_high: float | None
    n_star_low_68: float | None  # 68% interval
    n_star_high_68: float | None
    sigma_ln: float | None  # σ(ln N*)
    crossings: tuple[float, ...]  # every sign change found (non_monotone lists them all)
    noise_source: str  # vocabulary.NOISE_MEASURED or vocabulary.NOISE_PRIOR
    # What the decided signs alone say of N* (sizes; None where unbounded): a bracketed pair's
    # bracket, a censored or undecided pair's one-sided bound (module doc)
    bound_low: float | None = None
    bound_high: float | None = None
    noise_dof: float = 0.0  # degrees of freedom the seeds gave the noise (prior excluded)
    signed: tuple[SignedPoint, ...] = ()  # every point as the rule judged it, sorted by size


def _span(window: Window, size: int) -> slice:
    """Indices of a crossing's window, its innermost indices and extended span."""
    return slice(window.before, window.after + 1)


def _lines(
    x: np.ndarray, means: np.ndarray, se: np.ndarray, window: Window
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least-squares line of each row over the window: (x̄, ȳ, slope)."""
    span = _span(window, x.size)
    xs = x[span]
    ys, w = np.atleast_2d(means)[:, span], np.atleast_2d(se)[:, span] ** -2.0
    total = w.sum(axis=1)
    x_bar = (w * xs).sum(axis=1) / total
    y_bar = (w * ys).sum(axis=1) / total
    dx = xs - x_bar[:, None]
    slope = (w * dx * (ys - y_bar[:, None])).sum(axis=1) / (w * dx**2).sum(axis=1)
    return x_bar, y_bar, slope


def roots(x: np.ndarray, means: np.ndarray, se: np.ndarray, window: Window) -> np.ndarray:
    """ln N* of each row of ``means``/``se`` at a crossing (module doc): interpolated where
    the means change sign once inside the bracket, else the window's weighted line."""
    before, after = (window.before, window.after)
    rows = np.atleast_2d(means)
    x_bar, y_bar, slope = _lines(x, rows, se, window)
    with np.errstate(divide="ignore", invalid="ignore"):
        line = np.where(
            np.isfinite(slope) & (slope < 0), x_bar - y_bar / slope, 0.5 * (x[before] + x[after])
        )
        inner = rows[:, before : after + 1]
        falls = (inner[:, :-1] > 0) & (inner[:, 1:] <= 0)
        j = np.argmax(falls, axis=1)
        take = np.arange(rows.shape[0])
        m0, m1 = inner[take, j], inner[take, j + 1]
        x0, x1 = x[before + j], x[before + j + 1]
        between = x0 + m0 / (m0 - m1) * (x1 - x0)
    zero = np.where(falls.sum(axis=1) == 1, between, line)
    clipped: np.ndarray = np.clip(zero, x[before], x[after])
    return clipped


def _replicate_roots(
    x: np.ndarray,
    centre: np.ndarray,
    se_of: Callable[[np.ndarray], np.ndarray],
    noise: Noise,
    target: tuple[float, float],
    signs_of: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    n_boot: int,
    rng: np.random.Generator,
    local_centre: np.ndarray | None = None,
    seed_shares: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """ln N* of each parametric bootstrap replicate (module doc): the chord's, and the
    reported estimator's (:func:`~dwtune.core.refine.stick.local_zeros` on ``local_centre``
    plus the replicate's very errors, in the window the chord takes; the chord's where too few
    points lie there; NaN where ``local_centre`` is None). Replicates that share a sign
    pattern share their windows, so each pattern is classified once. The noise sd of a
    replicate is drawn once for all points from its sampling distribution on ``noise_dof``;
    where a seed's luck persists across sizes (``noise.persistence`` ĉ > 0), each seed's effect
    is drawn once for all the points it was trained at (``seed_shares``: point × seed, 1/k where
    the point has the seed), so the replicates resample seeds as whole units."""
    dof = target[1]
    scale = np.sqrt(dof / rng.chisquare(dof, size=n_boot))
    sd = noise.sd[None, :] * scale[:, None]
    se = se_of(sd)
    errors = rng.standard_normal(se.shape) * se
    if noise.persistence > 0 and seed_shares is not None and seed_shares.size:
        # each seed's luck drawn once for every size: ĉ·σ²/k of a point's variance is shared
        shared = (
            np.sqrt(noise.persistence)
            * sd
            * (rng.standard_normal((n_boot, seed_shares.shape[1])) @ seed_shares.T)
        )
        own = np.sqrt(
            np.maximum(se**2 - noise.persistence * sd**2 * (seed_shares**2).sum(axis=1), 0.0)
        )
        errors = errors / se * own + shared
    drawn = centre + errors
    signs, strong = signs_of(drawn, se)
    keys = np.concatenate([signs + 1, strong.astype(int)], axis=1)
    patterns, inverse = _unique_rows(keys)
    found, local = np.full(n_boot, np.nan), np.full(n_boot, np.nan)
    half = x.size
    for k, key in enumerate(patterns):
        rows = np.flatnonzero(inverse.reshape(-1) == k)
        windows = classify(list(key[:half] - 1), list(key[half:].astype(bool))).windows
        if not windows:
            continue
        candidates = np.stack([roots(x, drawn[rows], se[rows], w) for w in windows])
        nearest = np.argmin(np.abs(candidates - target[0]), axis=0)
        found[rows] = candidates[nearest, np.arange(rows.size)]
        if local_centre is None:
            continue
        values = local_centre + errors[rows]
        zeros = np.stack([stick.local_zeros(x, values, se[rows], w) for w in windows])
        picked = zeros[nearest, np.arange(rows.size)]
        local[rows] = np.where(np.isnan(picked), found[rows], picked)
    return found, local


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` for small non-negative integers, each
    row compared as one string of bytes: numpy's ``axis=0`` sorts a structured copy field by
    field, about 4 ms a call here, and the bootstrap calls it thousands of times a study. Bytes
    of values 0..127 sort as the numbers do, so the patterns come in the same order."""
    small = np.ascontiguousarray(keys, dtype=np.int8)
    as_bytes = small.view(np.dtype((np.void, small.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    return keys[first], inverse.reshape(-1)


def clipped_means(points: Sequence[DeltaPoint], means: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Mean Δ of each point whose seeds all finished, every seed first clipped to the point's
    median ± ``CLIP_SD`` of its noise sd ``sd`` (a spiked seed moves it by that at most); its
    mean otherwise (a failure's Δ is already the worst finite one)."""
    values = np.array(means, dtype=float)
    for i, point in enumerate(points):
        deltas = np.asarray(point.deltas, dtype=float)
        if deltas.size and np.isfinite(deltas).all():
            centre, spread = float(np.median(deltas)), CLIP_SD * float(sd[i])
            values[i] = float(np.clip(deltas, centre - spread, centre + spread).mean())
    return values


def robust_means(points: Sequence[DeltaPoint], means: np.ndarray) -> np.ndarray:
    """Median Δ of each point whose seeds all finished (one spiked seed moves a mean, not a
    median), its mean otherwise."""
    return np.array(
        [
            float(np.median(p.deltas)) if all(math.isfinite(d) for d in p.deltas) else m
            for p, m in zip(points, means, strict=True)
        ]
    )


def _chord_gap(x: np.ndarray, means: np.ndarray, window: Window) -> tuple[float, float]:
    """The two points the interpolation used (the bracket where the means change sign more
    than once): the true crossing lies between them, whatever the shape of Δ."""
    before, after = (window.before, window.after)
    inner = means[before : after + 1]
    falls = np.flatnonzero((inner[:-1] > 0) & (inner[1:] <= 0))
    if falls.size != 1:
        return float(x[before]), float(x[after])
    return float(x[before + falls[0]]), float(x[before + falls[0] + 1])


def _reach(star: float, low: float, high: float) -> float:
    """How far a 95% interval reaches from its estimate: the mean of its half-width and of
    the distance to its farther end (module doc, σ(ln N*))."""
    return 0.5 * (0.5 * (high - low) + max(star - low, high - star))


def _midpoint_filled(found: np.ndarray, x: np.ndarray, window: Window) -> np.ndarray:
    found[np.isnan(found)] = 0.5 * (x[window.before] + x[window.after])
    return found


def _empty(
    status: str,
    noise: Noise | None,
    crossings: Sequence[float] = (),
    bounds: tuple[float | None, float | None] = (None, None),
    judged: tuple[SignedPoint, ...] = (),
) -> CrossingEstimate:
    source = noise.source if noise is not None else vocabulary.NOISE_PRIOR
    dof = noise.measured_dof if noise is not None else 0.0
    return CrossingEstimate(
        status, None, None, None, None, None, None, tuple(crossings), source, *bounds, dof, judged
    )


def estimate_crossing(
    points: Sequence[DeltaPoint],
    *,
    prior: NoisePrior | None = None,
    rule: SignRule = DEFAULT_RULE,
    noise: Noise | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> CrossingEstimate:
    """N* of a pair from all its points, with bootstrap intervals (module doc). ``noise``:
    the points' noise when it is estimated elsewhere (a table of single runs); else learned
    from the points' seeds with ``prior``."""
    points = sorted((p for p in points if p.deltas), key=lambda p: p.n)
    if not points:
        return _empty(vocabulary.TransitionStatus.UNDECIDED, None)
    if noise is None:
        noise = pair_noise(points, prior or NoisePrior())
    x = np.log([p.n for p in points])
    first = point_signs(points, noise, rule)
    shape = classify(list(first.signs), list(first.strong))
    found = tuple(float(roots(x, first.means, first.se, w)[0]) for w in shape.windows)
    crossings = tuple(math.exp(r) for r in found)
    bounds = decided_bounds(x, first.signs, shape)
    judged = signed(points, first)
    if shape.status != vocabulary.TransitionStatus.BRACKETED:
        return _empty(shape.status, noise, crossings, bounds, judged)
    chord = _chord(points, x, noise, first, shape.windows[0], found[0], n_boot, seed)
    estimate = _reported(points, x, noise, first.means, shape, chord, crossings, bounds)
    return replace(estimate, signed=judged)


@dataclass(frozen=True)
class _Redraw:
    """What each bootstrap replicate recomputes (module doc): every point's se under a drawn
    noise sd, and its signs under the observed look's boundaries. A failed seed's Δ reuses
    another seed's completed loss (:mod:`~dwtune.core.refine.points`), so it is no independent
    draw: the se counts the seeds where both nets finished."""

    finished: np.ndarray  # seeds where both nets finished, at least 1
    extra: np.ndarray  # each point's shared error (nats)
    bounds: np.ndarray
    confirm: np.ndarray
    measured: np.ndarray  # not failures alone: a run of failures is never beyond noise
    seed_shares: np.ndarray  # point × seed: 1/k where the point's k usable seeds hold it

    @classmethod
    def of(cls, points: Sequence[DeltaPoint], first: PointSigns) -> _Redraw:
        counts = np.array([len(p.deltas) for p in points], dtype=float)
        failed = np.array([p.failures_deep + p.failures_shallow for p in points], dtype=float)
        extra = np.array([p.extra_sd for p in points], dtype=float)
        measured = np.array([any(math.isfinite(d) for d in p.deltas) for p in points])
        finished = np.maximum(counts - failed, 1.0)
        groups = seeded_groups(points)
        seeds = sorted({s for g in groups for s in g})
        shares = np.zeros((len(points), len(seeds)))
        for i, group in enumerate(groups):
            for s in group:
                shares[i, seeds.index(s)] = 1.0 / len(group)
        return cls(finished, extra, first.bounds, first.confirm, measured, shares)

    def se(self, sd: np.ndarray) -> np.ndarray:
        floored: np.ndarray = np.maximum(np.sqrt(sd**2 / self.finished + self.extra**2), MIN_SE)
        return floored

    def signs(self, drawn: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        signs, strong = signs_of_ratios(drawn, se, self.bounds, self.confirm)
        return signs, strong & self.measured


@dataclass(frozen=True)
class Chord:
    """The chord's estimate (ln N): its kink-corrected N*, 95% interval, the bootstrap's
    percentiles (2.5, 16, 84, 97.5), each point's standard error, the chord's replicates
    and the local line's (the chord's where too few points lie near in a replicate)."""

    star: float
    low95: float
    high95: float
    q: np.ndarray
    se: np.ndarray
    replicates: np.ndarray
    local: np.ndarray


def _chord(
    points: Sequence[DeltaPoint],
    x: np.ndarray,
    noise: Noise,
    first: PointSigns,
    window: Window,
    found: float,
    n_boot: int,
    seed: int,
) -> Chord:
    """The chord's kink-corrected ln N*, the 95% interval (bootstrap and profile band) and the
    bootstrap's 2.5/16/84/97.5 percentiles with and without the correction (module doc)."""
    means, redraw = first.means, _Redraw.of(points, first)
    se = redraw.se(noise.sd)
    rng = np.random.default_rng(seed)
    target = (found, noise.dof_at((window.before, window.after)))
    args = (redraw.se, noise, target, redraw.signs, n_boot, rng)
    clipped = clipped_means(points, means, noise.sd)
    shares = redraw.seed_shares
    replicates, local = _replicate_roots(x, means, *args, local_centre=clipped, seed_shares=shares)
    replicates = _midpoint_filled(replicates, x, window)
    # The chord's bias where Δ is kinked: the same estimate in a world where Δ is the
    # broken stick fitted to the points, whose crossing is known.
    robust = robust_means(points, means)
    kink, world = stick.stick_world(x, robust, se, window, means)
    bias = 0.0  # too few points to fit the stick: no correction, and no second bootstrap
    if not math.isnan(kink):
        world = _replicate_roots(x, world, *args, seed_shares=shares)[0]
        world_roots = _midpoint_filled(world, x, window)
        bias = float(np.median(world_roots)) - kink
    star = float(np.clip(found - bias, *_chord_gap(x, means, window)))
    # The kink correction is a model's guess (a smooth bend can pass the stick's test for a
    # kink), so the intervals hold the chord's replicates with and without it.
    plain = np.percentile(replicates, [2.5, 16.0, 84.0, 97.5])
    corrected = plain - (found - star)  # the replicates shifted by the bias taken off
    q = np.concatenate([np.minimum(corrected, plain)[:2], np.maximum(corrected, plain)[2:]])
    band = stick.broken_stick_band(x, means, se, window, stick.PROFILE_Q95)
    local = np.where(np.isnan(local), replicates, local)
    low95, high95 = min(q[0], band[0]), max(q[3], band[1])
    return Chord(star, low95, high95, q, se, replicates, local)


def own_interval(star: float, replicates: np.ndarray) -> np.ndarray:
    """The reported estimator's own 2.5/16/84/97.5 percentiles (ln N), located at its estimate:
    ``star + (q − median)`` of its bootstrap replicates, i.e. the estimator's bootstrap error
    about its median added to the estimate. Guarantee: ``star`` lies strictly inside both
    intervals unless the replicates are degenerate at that level (their 16th or 84th
    percentile equal to their median)."""
    q = np.percentile(replicates, [2.5, 16.0, 84.0, 97.5])
    located: np.ndarray = star + (q - float(np.median(replicates)))
    return located


def _reported(
    points: Sequence[DeltaPoint],
    x: np.ndarray,
    noise: Noise,
    means: np.ndarray,
    shape: Shape,
    chord: Chord,
    crossings: tuple[float, ...],
    bounds: tuple[float | None, float | None],
) -> CrossingEstimate:
    """The bracketed estimate: the reported N* is the local line's crossing (the stick's
    where kinked beyond doubt), the chord's where the points do not fix one; each interval
    holds the chord's and the reported estimator's own (module doc)."""
    zero = stick.local_zero(x, clipped_means(points, means, noise.sd), chord.se, shape.windows[0])
    star, own = chord.star, chord.replicates  # the chord, where no line is fitted
    if not math.isnan(zero):
        star, own = zero, chord.local
    own_q = own_interval(star, own)
    low95, high95 = min(chord.low95, own_q[0]), max(chord.high95, own_q[3])
    low68, high68 = min(chord.q[1], own_q[1]), max(chord.q[2], own_q[2])
    sigma = max(0.5 * (high68 - low68), _reach(star, low95, high95) / Z95)
    return CrossingEstimate(
        status=shape.status,
        n_star=math.exp(star),
        n_star_low=math.exp(low95),
        n_star_high=math.exp(high95),
        n_star_low_68=math.exp(low68),
        n_star_high_68=math.exp(high68),
        sigma_ln=sigma,
        crossings=(math.exp(star), *crossings[1:]),
        noise_source=noise.source,
        bound_low=bounds[0],
        bound_high=bounds[1],
        noise_dof=noise.measured_dof,
    )
