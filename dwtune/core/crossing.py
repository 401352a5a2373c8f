"""The transition N* of a depth pair from every measured point (pure: numpy, scipy).

Input: points ``(N_i, Δ_i1..Δ_ik)``, one paired Δ = loss(deeper) − loss(shallower) per seed,
in nats, at sizes ``N_i`` on the pair's size axis. Output: a :class:`CrossingEstimate`.

Noise (the sd of one paired Δ, nats): :mod:`dwtune.core.noise`, learned from the seeds with
the spec's guess worth a stated number of pseudo-observations, pooled locally along ln N. A
point's standard error is ``sqrt(σ(N_i)² / k_i + extra_sd_i²)``; ``extra_sd`` carries errors
shared by every seed at the point (the evaluation's paired sampling error on the shared
held-out windows, a size-trend correction).

Failures. A Δ of ``+inf`` (the deeper net diverged, failed or went unstable, the shallower one
did not) or ``−inf`` (the reverse) counts for the sign: it is replaced by the largest
(smallest) finite Δ of the pair, so a failure is the worst outcome the data show for that net,
never absent. A point whose every Δ is infinite (its net failed at every seed) has a sign but
is never *beyond noise* (below): failures alone do not make a pair non_monotone.

Signs: one rule everywhere (:class:`dwtune.core.decision.SignRule`). A point is positive
(deeper loses) when ``m_i > c_i·se_i``, negative when ``m_i < −c_i·se_i``, else within noise,
where ``c_i`` is the α-spending boundary of its look (its seed count) as a Student-t quantile
on the noise's degrees of freedom there; a point with fewer seeds than the rule needs has no
sign (a single training is never decided where the rule asks for two). Consecutive points of
one sign form a run. The expected pattern is one positive run followed by one negative run.
Any other pattern is first cleaned: a run whose strongest point has ``|m|/se`` below
``Z_CONFIRM`` (as a t quantile on the same dof) is not beyond noise and is dropped. What
remains decides the status: only positive runs → ``censored_high`` (``undecided`` if points
within noise lie above them), only negative → ``censored_low`` (``undecided`` if within-noise
points lie below), one change from + to − → ``bracketed``, anything else (two or more changes,
or a single change from − to +) → ``non_monotone`` with every crossing listed and no N*.
Every status but ``non_monotone`` carries the bounds its decided signs give: an ``undecided``
pair whose decided points are all positive still says N* lies above the last of them (and the
law fit uses that bound), so measuring closer to N* never removes a pair from the fit.

Estimate (the chord's; the reported N* is the broken stick's crossing, below, where the points
fix one). Each sign change lies between the last point of the run before it and the first
point of the run after it (the innermost bracket, whose signs are decided). Where the mean Δ of
the points in that bracket changes sign once, ``ln N*`` is the linear interpolation between the
two points around that change: local, so a kinked or asymmetric Δ biases it only within their
spacing. Where it changes sign several times (points within noise), ``ln N*`` is the zero of a
weighted (1/se²) straight line of mean Δ on ln N through the bracket's points (``EXTEND``
points more on each side within those runs), kept inside the bracket; a line that does not
fall gives the bracket's geometric midpoint.

Interval: a parametric bootstrap of the whole procedure (signs, runs, bracket, interpolation).
Each replicate draws the noise sd from its own sampling distribution (``σ* = σ·sqrt(ν/χ²_ν)``:
the noise is measured, not known) and every point's mean from ``N(m_i, se*_i²)`` around the
observed means, and re-runs the estimate; the crossing nearest the original one is kept, the
bracketing window's innermost midpoint when the replicate has none. Here a point's se counts
only the seeds where both nets finished: a failed seed's Δ reuses another seed's completed loss
(:mod:`dwtune.core.pair_points`), so it is no independent draw (counting it gave 60% at 68% on
the divergences surface, 66% without).

Kink bias. Where Δ is steep on one side of N* and flat on the other (the asymmetric surface),
the chord between a steep-side and a flat-side point crosses zero past the kink, towards the
flat side, by up to a third of their spacing; a bootstrap around the observed means cannot see
that (its world is the chord itself: 126 of 127 misses lay on one side, 36% at 68%). So the same
bootstrap is run a second time in a world where Δ is the best broken stick through zero fitted
to the points within ``PROFILE_REACH`` e-folds of the bracket (at least ``STICK_MIN_POINTS``,
two or more on each side, else no correction; per-point medians, so a spiked seed does not bend
it: with means the outliers surface fell to 58%), whose crossing is known; the median error
there is the bias. The chord's ``ln N*`` is the interpolation less that bias, kept between the
two points the interpolation used (the crossing lies between them whatever Δ's shape), and the
replicates are shifted by the same amount: 68% and 95% intervals are their percentiles. The
correction waits for a kink beyond noise: the stick's second slope must lower its χ² below the
best straight line through zero by ``KINK_EVIDENT`` (χ²₁'s 95% point), else no bias is taken
off. Why: noise alone bends a stick through four points, and the bias read off that bend is
no fixed shift but noise the replicates never see. Where a bracket cannot close (no legal width
between its ends, 0.13 e-folds apart on paper.yaml's pair 6-12) the correction doubled the
chord's error: rms 0.0104 against 0.0063 e-folds with σ(ln N*) 0.0081, 88% at 95% over 100
realisations of its simulated twin (``benchmarks/study_coverage.py``); gated, 92%. On
``benchmarks/coverage.py``'s surfaces it moved no 95% coverage by more than two points, the
asymmetric surface's kink included (97% with the grid design, 91-95% with the law design, as
before), and no median error but the law design's on depth_noise (0.0459 against 0.0431 at
the worst ratio). The test weighs the means, whose standard errors ``se`` are; on the medians
the stick is fitted to, it passed too often (:func:`_stick_world`). Both intervals also
hold the uncorrected chord's replicates: a smooth bend (Δ saturating beside the bracket)
passes that test too, and with paper.yaml's shipped stops on its simulated twin the corrected
intervals alone held N* in 92.0% / 64.0% (95% / 68%) of pairs at a planted b 30% below the
reference (100 studies; holding both, 95.0% / 68.5%). The 95%
interval is then widened to hold the profile-likelihood interval of the broken stick (every
crossing whose χ² is within ``PROFILE_Q95`` of the best), whose legs may be lines or curves flat
at the crossing (``STICK_POWERS``): where Δ is flat at N* (Δ ∝ tanh³) every point near it is
within noise, a chord through two of them says little, and only a flat leg lets the profile
reach across them. The coverage of these intervals with the spec's noise guess right and wrong
on every surface is measured by ``benchmarks/coverage.py`` (its table is quoted in
benchmarks/README.md).

Reported N*: the crossing of a straight line through zero fitted (weights 1/se²) to the points
within ``PROFILE_REACH`` e-folds of the bracket (never further: the line is a local shape),
strictly inside the bracket and kept within the 95% interval; the crossing of the best broken
stick through zero (legs of any of ``STICK_POWERS``) instead where two straight legs fit those
points better than one line by ``LINE_UNLESS_KINK`` of χ² (a kink beyond doubt); the chord's
where fewer than ``ESTIMATE_MIN_POINTS`` points lie there or fewer than ``STICK_MIN_SIDE`` on a
side. Each point's value there is its mean Δ with every seed first clipped to the point's median
± ``CLIP_SD`` noise sds (:func:`clipped_means`: a spiked seed moves it that far at most). The
intervals stay the chord's (their coverage is what ``benchmarks/coverage.py`` measured; the 68%
interval is widened to hold the reported N* where it lies outside). Why a line: the chord uses
two points, the line every point near N*; and where Δ bends alike on both sides of N* (tanh,
tanh³) a stick's second slope and its choice of power are variance, not shape. Why the test is
on straight legs: a flat crossing (Δ ∝ tanh³) bends both legs alike, a curved stick fits it
far better than a line, yet the line's crossing errs less there. With the refine stage's points
(``coverage.py --pairs 100``, every surface and noise/prior ratio) the median |ln N* error| fell
against the stick on per-point medians on 31 of 36 grid-design rows and 38 of 40 law-design
rows: grid default 0.0030-0.0031 against 0.0041-0.0042, flat 0.020-0.022 against 0.029-0.030,
outliers 0.0029-0.0032 against 0.0051-0.0053; it rose on asymmetric (0.0088-0.0098 against
0.0087; law design 0.0103 and 0.0111 against 0.0100 and 0.0102 at ratios 1 and 5: a real kink
not beyond doubt in some pairs, so the line's crossing is taken past it) and depth_noise at ratio
0.5 (0.0346 against 0.0333). Per-point medians instead of clipped means (the line always): outliers
0.0035 against 0.0030, divergences 0.0049 against 0.0043 (grid, ratio 1). On evenly spaced
tables (40 a row, 3 seeds, tests/core/test_crossing.py's generators) the line errs less than the
stick and the chord wherever five points fall within reach: Δ ∝ tanh 0.15 e-folds apart 0.0202
against the stick's 0.0293 (per-point medians) and the chord's 0.0312, 0.3 apart 0.0309 against
0.0573 and 0.0483; Δ ∝ tanh³ 0.2 apart 0.0105 against 0.0241 and 0.0507; 0.6 apart the chord is
reported (0.0572). σ(ln N*) (below) still measures the chord: it overstates the reported
estimate's error, so the law fit's intervals err wide.

``σ(ln N*)`` (what the law fit weighs a pair by) is the larger of half the 68% interval's width
and the 95% interval's reach over Z95, where the reach is the mean of its half-width and of the
estimate's distance to its farther end. The 68% interval stays the bootstrap's (widened only to
hold the reported N*): where noise is small against Δ's slope (a dense table of runs, 25 sizes
0.29 e-folds apart, z 10-18 beside the crossing) the bootstrap sees the noise but not the
interpolation's shape error, and its 68% band held the truth in 51.5% of 200 generated tables,
while σ(ln N*) stayed calibrated there (rms z 0.90) and the 95% interval held it in 96.0%.
Widening the 68% interval to the profile band at χ²₁ = 1 (70% there) or to ±σ over-covered
elsewhere: 79-84.5% and 61-78.5% of nine surfaces' 200 recorded refine pairs, 84% and 86.5% of
the seeded tanh pairs of the tests.

Why the farther end of the 95% interval: where Δ is flat at N* the profile band reaches much
further on one side of the chord's estimate than on the other, and a σ from the half-width alone
was too small there (rms z 1.34 on the flat surface's 200 recorded pairs; with the reach 1.13,
and 0.95 / 0.84 on default / asymmetric, against 1.06 / 1.01 before).
Why: the bootstrap is centred on the observed means,
so where noise steepened Δ between the two points around the sign change it shrinks the spread
just when the estimate is furthest off (errors and σ anti-correlated); the 95% interval's profile
leg fits a slope to every point near the bracket and does not shrink so. A σ below what the
pair's own 95% interval implies made the simulated study's fit χ²_red 5.9 (pair 12-18: ln N*
0.022 low with σ 0.0036) and its 95% interval of a cover 85% in 40 noise realisations, 93%
with this floor; ``benchmarks/study_coverage.py`` measures it over whole studies (300
realisations with the chord as N*: rms z 1.00, χ²_red mean 0.86, median 0.68, against 1.00 and
0.84 for χ²₄/4; with the stick's crossing, Reported N* above).
What per-pair σ cannot carry (the layout bias below) the law fit's intervals take from the
scatter between pairs (:mod:`dwtune.core.fit.wls`).
Coverage of these intervals is measured, not assumed: ``benchmarks/coverage.py``.

Why the chord and not a line through every point near the sign change: measured, a weighted
(1/se²) line through the points within 0.1 e-folds of the chord's zero (with the same kink
correction and bootstrap) is more accurate (default surface median |ln N*/N*_true| 0.0039
against 0.0052; the shipped simulated study's χ²_red 2.75 against 3.99) but its 68% interval
covers 61.0% (default), 54.5% (divergences) and 52.5% (lr_mistuned) of 200 pairs, and 55% of
whole-study pairs; the more points it takes, the narrower its bootstrap and the worse the
coverage (3 points 94%, 6 points 51%), while the rms error stays. The likely cause, untested:
the refine loop adds seeds to the points beside the crossing until their signs are decided, so
those points' means are selected, not independent draws, and the bootstrap treats them as such.
Also measured and not used (coverage.py's 200 recorded pairs per surface, and 101 recorded
realisations of the simulated study, where this estimator covers 66.5-71.5% / 64.9% at 68%):
a line through the bracket's own points only (study 62.0%; coverage.py 59.0-63.0%, asymmetric
81.0%; outliers' median error 0.068 against 0.039); that line's N* with this estimate's
interval (depth_noise 62.0/88.5, outliers 61.0/91.0, asymmetric 56.0/87.0 at 68/95%); the
kink correction only where the stick beats a line by a χ² of 3.84 (study 66.8%, outliers
65.0%); the bootstrap run in a world whose bracket points lie on their line (study 63.7%).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from dwtune.core import sequential, vocabulary
from dwtune.core.decision import SignRule
from dwtune.core.noise import Noise, NoisePrior, estimate_noise

Z_CONFIRM = 3.0  # strongest |m|/se a run needs to count when the pattern is not + then −
EXTEND = 0  # points added on each side of a crossing's window
MIN_SE = 1e-12  # nats: floor of a standard error (noise-free surfaces)
PROFILE_REACH = 0.3  # e-folds beside the bracket whose points the broken-stick profile uses
PROFILE_GRID = 400  # candidate crossings of the profile across the bracket
STICK_MIN_POINTS = 4  # points the kink-bias stick needs: 3 parameters and one χ² dof
# χ² the stick's second slope must gain over one straight line before the chord is corrected
# for a kink (χ²₁'s 95% point: the kink is one parameter more)
KINK_EVIDENT = 3.84
# ... and the reported N*'s stick: with one χ² dof it all but interpolates four points (evenly
# spaced tables 0.3 e-folds apart: median error 0.0101 against the chord's 0.0071; with five,
# 0.0077). The line alone from four points was tried: where no stick can test for a kink the
# line's crossing is taken past it (coverage.py, paper.yaml's stops, asymmetric: 0.0151 against
# 0.0118 e-folds with five; default 0.0041 against 0.0048)
ESTIMATE_MIN_POINTS = 5
# ... and on each side of the bracket: with one point on a side any crossing fits that side
# exactly, so the other side's extrapolation alone places it (a saturating Δ puts it at the
# bracket's edge: the length check's wide brackets moved N* by 0.4 e-folds so)
STICK_MIN_SIDE = 2
# The profile band's likelihood-ratio cut in the 95% interval: χ²₁'s 90% quantile. The 95%
# interval is the union of the bootstrap's 95% percentiles and this band; with the band at its
# own 95% cut (3.84) the union over-covered: 94.5-98.5% over nine surfaces' 200 recorded refine
# pairs (size_noise and independent 98.5%). At 2.71: 94.0-97.3% on every surface and noise
# guess of benchmarks/coverage.py (300 pairs each), 93.0% of 200 dense generated tables of
# runs (tests/helpers/analysis_tables.py; 96.0% at 3.84), asymmetric's recorded pairs 93.5%.
PROFILE_Q95 = 2.71
# Powers of the profile's legs: a kinked line (1) up to a crossing flat at N* (3, Δ ∝ tanh³).
# Measured (200 recorded pairs each): the flat surface's 95% interval held the truth in 91.0%
# with lines alone, 96.0% with (1, 2, 3); default, asymmetric, outliers unchanged (96.0, 94.5,
# 96.5%): where Δ is a line near N* a curved leg fits no better, so it moves nothing.
STICK_POWERS = (1.0, 2.0, 3.0)
# The reported N* is a straight line's crossing unless two slopes fit its points better than
# one by this much χ² (χ²₁'s 99.9% point): a kink beyond doubt (module doc, Reported N*)
LINE_UNLESS_KINK = 10.83
CLIP_SD = 2.0  # noise sds from a point's median beyond which a seed's Δ is clipped (N* only)
Z95 = 1.959964  # normal 97.5% quantile: a 95% interval's half-width in σ


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
    # flagged unstable (dwtune.core.pair_points); () when none was
    unstable: tuple[str, ...] = ()


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


# --------------------------------------------------------------------------- noise and signs


def usable_groups(points: Sequence[DeltaPoint]) -> list[np.ndarray]:
    """Each point's finite Δ: those of seeds where both nets finished stably."""
    return [np.asarray([d for d in p.deltas if math.isfinite(d)], dtype=float) for p in points]


def pair_noise(points: Sequence[DeltaPoint], prior: NoisePrior) -> Noise:
    """The pair's noise model (:func:`dwtune.core.noise.estimate_noise`)."""
    return estimate_noise(np.log([p.n for p in points]), usable_groups(points), prior)


@dataclass(frozen=True)
class PointSigns:
    """Every point's mean Δ, standard error, rule boundary and sign under one noise model."""

    means: np.ndarray
    se: np.ndarray
    bounds: np.ndarray  # |m|/se a sign needs (inf: too few seeds, or failures alone too early)
    confirm: np.ndarray  # |m|/se a run's strongest point needs outside the + then − pattern
    signs: np.ndarray  # +1, −1, 0
    strong: np.ndarray  # beyond `confirm`, and measured (not failures alone)


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
    signs, strong = _signs(means, se, bounds, confirm)
    measured = np.array([any(math.isfinite(d) for d in p.deltas) for p in points])
    return PointSigns(means, se, bounds, confirm, signs, strong & measured)


# --------------------------------------------------------------------------- one estimate


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


def _signs(
    means: np.ndarray, se: np.ndarray, bounds: np.ndarray, confirm: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sign of each point (+1, −1, 0 within noise) and whether it is beyond its ``confirm``
    (arrays broadcast: a bootstrap passes one row per replicate)."""
    ratio = means / se
    signs = np.where(ratio > bounds, 1, np.where(ratio < -bounds, -1, 0))
    return signs, np.abs(ratio) >= confirm


def _runs(signs: Sequence[int], strong: Sequence[bool]) -> list[list[int]]:
    """[sign, first index, last index, any strong] of each run of decided points."""
    runs: list[list[int]] = []
    for i, sign in enumerate(signs):
        if sign == 0:
            continue
        if runs and runs[-1][0] == sign:
            runs[-1][2], runs[-1][3] = i, runs[-1][3] or strong[i]
        else:
            runs.append([sign, i, i, bool(strong[i])])
    return runs


def _clean(runs: list[list[int]]) -> list[list[int]]:
    """Drop runs that are not beyond noise unless the pattern is the expected + then −."""
    if [r[0] for r in runs] in ([1, -1], [1], [-1]):
        return runs
    merged: list[list[int]] = []
    for run in (r for r in runs if r[3]):
        if merged and merged[-1][0] == run[0]:
            merged[-1][2] = run[2]
        else:
            merged.append(list(run))
    return merged


@dataclass(frozen=True)
class _Shape:
    status: str
    windows: tuple[tuple[int, int, int, int], ...]  # innermost indices, then the extended span


def classify(signs: Sequence[int], strong: Sequence[bool]) -> _Shape:
    """Status and crossing windows of sorted points' signs (module doc)."""
    runs = _clean(_runs(signs, strong))
    pattern = [r[0] for r in runs]
    noisy = [i for i, s in enumerate(signs) if s == 0]
    if not runs:
        return _Shape(vocabulary.TransitionStatus.UNDECIDED, ())
    if set(pattern) == {1}:
        above = bool(noisy) and noisy[-1] > runs[-1][2]
        status = (
            vocabulary.TransitionStatus.UNDECIDED
            if above
            else vocabulary.TransitionStatus.CENSORED_HIGH
        )
        return _Shape(status, ())
    if set(pattern) == {-1}:
        below = bool(noisy) and noisy[0] < runs[0][1]
        status = (
            vocabulary.TransitionStatus.UNDECIDED
            if below
            else vocabulary.TransitionStatus.CENSORED_LOW
        )
        return _Shape(status, ())
    windows = tuple(
        (
            runs[k][2],
            runs[k + 1][1],
            max(runs[k][2] - EXTEND, runs[k][1]),
            min(runs[k + 1][1] + EXTEND, runs[k + 1][2]),
        )
        for k in range(len(runs) - 1)
    )
    bracketed = pattern == [1, -1]
    status = (
        vocabulary.TransitionStatus.BRACKETED
        if bracketed
        else vocabulary.TransitionStatus.NON_MONOTONE
    )
    return _Shape(status, windows)


def _span(window: tuple[int, int, int, int], size: int) -> slice:
    """Indices of a crossing's window, extended by EXTEND points each side within its runs."""
    return slice(window[2], window[3] + 1)


def _lines(
    x: np.ndarray, means: np.ndarray, se: np.ndarray, window: tuple[int, int, int, int]
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


def roots(
    x: np.ndarray, means: np.ndarray, se: np.ndarray, window: tuple[int, int, int, int]
) -> np.ndarray:
    """ln N* of each row of ``means``/``se`` at a crossing (module doc): interpolated where
    the means change sign once inside the bracket, else the window's weighted line."""
    before, after = window[:2]
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


# --------------------------------------------------------------------------- the interval


def _replicate_roots(
    x: np.ndarray,
    centre: np.ndarray,
    se_of: Callable[[np.ndarray], np.ndarray],
    noise: Noise,
    target: tuple[float, float],
    signs_of: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    n_boot: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """ln N* of each parametric bootstrap replicate (module doc): replicates that share a
    sign pattern share their windows, so each pattern is classified once. The noise sd of a
    replicate is drawn once for all points from its sampling distribution on ``noise_dof``."""
    dof = target[1]
    scale = np.sqrt(dof / rng.chisquare(dof, size=n_boot))
    se = se_of(noise.sd[None, :] * scale[:, None])
    drawn = centre + rng.standard_normal(se.shape) * se
    signs, strong = signs_of(drawn, se)
    keys = np.concatenate([signs + 1, strong.astype(int)], axis=1)
    patterns, inverse = _unique_rows(keys)
    found = np.full(n_boot, np.nan)
    half = x.size
    for k, key in enumerate(patterns):
        rows = np.flatnonzero(inverse.reshape(-1) == k)
        windows = classify(list(key[:half] - 1), list(key[half:].astype(bool))).windows
        if not windows:
            continue
        candidates = np.stack([roots(x, drawn[rows], se[rows], w) for w in windows])
        nearest = np.argmin(np.abs(candidates - target[0]), axis=0)
        found[rows] = candidates[nearest, np.arange(rows.size)]
    return found


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` for small non-negative integers, each
    row compared as one string of bytes: numpy's ``axis=0`` sorts a structured copy field by
    field, about 4 ms a call here, and the bootstrap calls it thousands of times a study. Bytes
    of values 0..127 sort as the numbers do, so the patterns come in the same order."""
    small = np.ascontiguousarray(keys, dtype=np.int8)
    as_bytes = small.view(np.dtype((np.void, small.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    return keys[first], inverse.reshape(-1)


def _stick_legs(
    x: np.ndarray, m: np.ndarray, w: np.ndarray, zeros: np.ndarray, power: float = 1.0
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each side of the best broken stick through zero at each of ``zeros``: the side's mask,
    its distances ``sign(x0 − x)·|x0 − x|^power`` (0 off the side) and its least-squares slope
    (weights w = 1/se²), kept ≥ 0; arrays (candidate, point) and (candidate,)."""
    d = zeros[:, None] - x[None, :]  # (candidate, point)
    for side in (d >= 0, d < 0):
        dd = np.where(side, np.sign(d) * np.abs(d) ** power, 0.0)
        denom = (w * dd * dd).sum(axis=1)
        fitted = np.divide(
            (w * dd * m).sum(axis=1), denom, out=np.zeros_like(denom), where=denom > 0
        )
        yield side, dd, np.maximum(fitted, 0.0)


def _stick_chi2(
    x: np.ndarray,
    m: np.ndarray,
    w: np.ndarray,
    zeros: np.ndarray,
    powers: Sequence[float] = (1.0,),
) -> np.ndarray:
    """χ² of the best broken stick through zero at each of ``zeros``: Δ = s1·(x0 − x)^p left
    of x0 and −s2·(x − x0)^p right of it, each slope fitted and kept ≥ 0, the best of
    ``powers`` (1: a kinked line; 3: a crossing flat at x0)."""
    best = np.full(zeros.size, np.inf)
    for power in powers:
        total = np.zeros(zeros.size)
        for side, dd, slope in _stick_legs(x, m, w, zeros, power):
            residual = np.where(side, m - slope[:, None] * dd, 0.0)
            total += (w * residual**2).sum(axis=1)
        best = np.minimum(best, total)
    return best


def _line_chi2(x: np.ndarray, m: np.ndarray, w: np.ndarray, zeros: np.ndarray) -> np.ndarray:
    """χ² of the best straight line through zero at each of ``zeros``: the stick of
    :func:`_stick_chi2` (power 1) with one slope for both legs, fitted and kept ≥ 0."""
    d = zeros[:, None] - x[None, :]  # (candidate, point)
    denom = (w * d * d).sum(axis=1)
    slope = np.divide((w * d * m).sum(axis=1), denom, out=np.zeros_like(denom), where=denom > 0)
    residual = m - np.maximum(slope, 0.0)[:, None] * d
    chi2: np.ndarray = (w * residual**2).sum(axis=1)
    return chi2


def _kink_gain(
    x: np.ndarray, m: np.ndarray, w: np.ndarray, zeros: np.ndarray
) -> tuple[float, np.ndarray]:
    """How much χ² two straight legs through zero (:func:`_stick_chi2`, power 1) gain over one
    straight line (:func:`_line_chi2`), each at its best of ``zeros``: the evidence of a kink
    both the kink correction (KINK_EVIDENT) and the reported N* (LINE_UNLESS_KINK) test; and
    the line's χ² at each of ``zeros``."""
    line = _line_chi2(x, m, w, zeros)
    return float(line.min() - _stick_chi2(x, m, w, zeros).min()), line


def stick_reach(low: float, high: float) -> float:
    """How far beside the bracket ``[low, high]`` (ln N) the kink-bias stick takes its points:
    PROFILE_REACH e-folds, or the bracket's width if wider."""
    return max(PROFILE_REACH, high - low)


def stick_sides(
    x: np.ndarray, low: float, high: float, reach: float | None = None
) -> tuple[int, int]:
    """How many of the sizes ``x`` (ln N) the stick may use at or below the bracket's low end,
    and at or above its high end (each end counts on its own side), ``reach`` e-folds beside
    it (:func:`stick_reach` where None)."""
    reach = stick_reach(low, high) if reach is None else reach
    below = (x >= low - reach) & (x <= low)
    above = (x >= high) & (x <= high + reach)
    return int(below.sum()), int(above.sum())


def within_reach(x: np.ndarray, low: float, high: float, reach: float) -> np.ndarray:
    """Which of the sizes ``x`` (ln N) lie in the bracket ``[low, high]`` or within ``reach``
    e-folds beside it: the points a stick or the reported N*'s line may use."""
    mask: np.ndarray = (x >= low - reach) & (x <= high + reach)
    return mask


def _stick_support(
    x: np.ndarray,
    values: np.ndarray,
    window: tuple[int, int, int, int],
    reach: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The points a broken stick is fitted to (finite, within ``reach`` e-folds of the bracket:
    :func:`stick_reach` where None) and the candidate crossings across the bracket."""
    low, high = x[window[0]], x[window[1]]
    reach = stick_reach(low, high) if reach is None else reach
    near = within_reach(x, low, high, reach) & np.isfinite(values)
    return near, np.linspace(low, high, PROFILE_GRID)


def broken_stick_band(
    x: np.ndarray, means: np.ndarray, se: np.ndarray, window: tuple[int, int, int, int], q: float
) -> tuple[float, float]:
    """The ln N range inside the bracket where a broken stick through zero fits the points
    within PROFILE_REACH e-folds of it within ``q`` of its best χ² (module doc)."""
    near, grid = _stick_support(x, means, window)
    chi2 = _stick_chi2(x[near], means[near], se[near] ** -2.0, grid, STICK_POWERS)
    inside = np.flatnonzero(chi2 - chi2.min() <= q)
    return float(grid[inside[0]]), float(grid[inside[-1]])


def _stick_world(
    x: np.ndarray,
    values: np.ndarray,
    se: np.ndarray,
    window: tuple[int, int, int, int],
    means: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """The best broken stick through zero (PROFILE_REACH points, module doc): its zero and its
    prediction at every point it was fitted to (the other points keep ``values``); no zero
    (NaN) where fewer than STICK_MIN_POINTS points fix its three parameters and a χ², where
    fewer than STICK_MIN_SIDE lie on either side of the bracket, or where its two slopes fit
    ``means`` (``values`` where None) no better than one straight line by KINK_EVIDENT (no
    kink beyond noise). Why the means there: ``se`` is the standard error of a mean, and a
    median of three or four seeds scatters more, so its χ² gain passed the test too often
    (paper.yaml's twin with looser stops, pair 24-30: 4.6-9.3 where the means gave 1.9-3.9)."""
    near, grid = _stick_support(x, values, window)
    low, high = x[window[0]], x[window[1]]
    sides = min(stick_sides(x[np.isfinite(values)], low, high))
    if near.sum() < STICK_MIN_POINTS or sides < STICK_MIN_SIDE:
        return math.nan, np.asarray(values, dtype=float)
    w = se[near] ** -2.0
    tested = (values if means is None else means)[near]
    gain, _ = _kink_gain(x[near], tested, w, grid)
    if not gain >= KINK_EVIDENT:
        return math.nan, np.asarray(values, dtype=float)  # no kink beyond noise: no bias
    zero = float(grid[np.argmin(_stick_chi2(x[near], values[near], w, grid))])
    centre = np.array(values, dtype=float)
    centre[near] = 0.0
    for _, dd, slope in _stick_legs(x[near], values[near], w, np.array([zero])):
        centre[near] += slope[0] * dd[0]
    return zero, centre


def local_zero(
    x: np.ndarray, values: np.ndarray, se: np.ndarray, window: tuple[int, int, int, int]
) -> float:
    """The reported N* from ``values`` within PROFILE_REACH e-folds of the bracket (module doc,
    Reported N*): the crossing of the best straight line through zero, or of the best broken
    stick of any of STICK_POWERS where two straight legs fit better by LINE_UNLESS_KINK; NaN
    where fewer than ESTIMATE_MIN_POINTS lie there, or fewer than STICK_MIN_SIDE on a side."""
    near, grid = _stick_support(x, values, window, PROFILE_REACH)
    sides = stick_sides(x[near], x[window[0]], x[window[1]], PROFILE_REACH)
    if near.sum() < ESTIMATE_MIN_POINTS or min(sides) < STICK_MIN_SIDE:
        return math.nan
    inner = grid[1:-1]  # the bracket's ends have decided signs: N* lies strictly between them
    xs, ys, w = x[near], values[near], se[near] ** -2.0
    gain, line = _kink_gain(xs, ys, w, inner)
    if gain < LINE_UNLESS_KINK:
        return float(inner[np.argmin(line)])
    chi2 = _stick_chi2(xs, ys, w, inner, STICK_POWERS)
    return float(inner[np.argmin(chi2)])


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


def _chord_gap(
    x: np.ndarray, means: np.ndarray, window: tuple[int, int, int, int]
) -> tuple[float, float]:
    """The two points the interpolation used (the bracket where the means change sign more
    than once): the true crossing lies between them, whatever the shape of Δ."""
    before, after = window[:2]
    inner = means[before : after + 1]
    falls = np.flatnonzero((inner[:-1] > 0) & (inner[1:] <= 0))
    if falls.size != 1:
        return float(x[before]), float(x[after])
    return float(x[before + falls[0]]), float(x[before + falls[0] + 1])


def _reach(star: float, low: float, high: float) -> float:
    """How far a 95% interval reaches from its estimate: the mean of its half-width and of
    the distance to its farther end (module doc, σ(ln N*))."""
    return 0.5 * (0.5 * (high - low) + max(star - low, high - star))


def _midpoint_filled(
    found: np.ndarray, x: np.ndarray, window: tuple[int, int, int, int]
) -> np.ndarray:
    found[np.isnan(found)] = 0.5 * (x[window[0]] + x[window[1]])
    return found


def _empty(
    status: str,
    noise: Noise | None,
    crossings: Sequence[float] = (),
    bounds: tuple[float | None, float | None] = (None, None),
) -> CrossingEstimate:
    source = noise.source if noise is not None else vocabulary.NOISE_PRIOR
    dof = noise.measured_dof if noise is not None else 0.0
    return CrossingEstimate(
        status, None, None, None, None, None, None, tuple(crossings), source, *bounds, dof
    )


def decided_bounds(
    x: np.ndarray, signs: np.ndarray, shape: _Shape
) -> tuple[float | None, float | None]:
    """(low, high) sizes the decided signs bound N* by (module doc); None where open."""
    positive, negative = np.flatnonzero(signs > 0), np.flatnonzero(signs < 0)
    status = shape.status
    if status == vocabulary.TransitionStatus.BRACKETED:
        before, after = shape.windows[0][:2]
        return math.exp(x[before]), math.exp(x[after])
    if status == vocabulary.TransitionStatus.NON_MONOTONE:
        return None, None
    if positive.size and not negative.size:  # censored_high, or undecided above its edge
        return math.exp(x[positive[-1]]), None
    if negative.size and not positive.size:
        return None, math.exp(x[negative[0]])
    return None, None


DEFAULT_RULE = SignRule(alpha=0.05, max_looks=4, min_looks=2)  # refine's defaults


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
    means = first.means
    found = tuple(float(roots(x, means, first.se, w)[0]) for w in shape.windows)
    crossings = tuple(math.exp(r) for r in found)
    bounds = decided_bounds(x, first.signs, shape)
    if shape.status != vocabulary.TransitionStatus.BRACKETED:
        return _empty(shape.status, noise, crossings, bounds)
    window = shape.windows[0]
    # A failed seed's Δ reuses another seed's completed loss (pair_points), so it is no
    # independent draw: the interval's standard errors count the seeds where both nets finished.
    counts = np.array([len(p.deltas) for p in points], dtype=float)
    failed = np.array([p.failures_deep + p.failures_shallow for p in points], dtype=float)
    finished = np.maximum(counts - failed, 1.0)
    extra = np.array([p.extra_sd for p in points], dtype=float)

    def interval_se(sd: np.ndarray) -> np.ndarray:
        floored: np.ndarray = np.maximum(np.sqrt(sd**2 / finished + extra**2), MIN_SE)
        return floored

    measured = np.array([any(math.isfinite(d) for d in p.deltas) for p in points])

    def signs_of(drawn: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        signs, strong = _signs(drawn, se, first.bounds, first.confirm)
        return signs, strong & measured  # a run of failures alone is never beyond noise

    se = interval_se(noise.sd)
    rng = np.random.default_rng(seed)
    target = (found[0], noise.dof_at(window[:2]))
    args = (interval_se, noise, target, signs_of, n_boot, rng)
    replicates = _midpoint_filled(_replicate_roots(x, means, *args), x, window)
    # The chord's bias where Δ is kinked: the same estimate in a world where Δ is the
    # broken stick fitted to the points (module doc), whose crossing is known.
    robust = robust_means(points, means)
    kink, world = _stick_world(x, robust, se, window, means)
    bias = 0.0  # too few points to fit the stick: no correction, and no second bootstrap
    if not math.isnan(kink):
        stick_roots = _midpoint_filled(_replicate_roots(x, world, *args), x, window)
        bias = float(np.median(stick_roots)) - kink
    star = float(np.clip(found[0] - bias, *_chord_gap(x, means, window)))
    # The kink correction is a model's guess (a smooth bend can pass the stick's test for a
    # kink), so the intervals hold the chord's replicates with and without it (module doc).
    plain = np.percentile(replicates, [2.5, 16.0, 84.0, 97.5])
    corrected = plain - (found[0] - star)  # the replicates shifted by the bias taken off
    q = np.concatenate([np.minimum(corrected, plain)[:2], np.maximum(corrected, plain)[2:]])
    stick = broken_stick_band(x, means, se, window, PROFILE_Q95)
    low95, high95 = min(q[0], stick[0]), max(q[3], stick[1])
    # The reported N*: the crossing of the best line through the points beside the bracket,
    # the broken stick's where they are kinked beyond doubt (module doc, Reported N*); the
    # chord, kink-corrected, where they do not fix one.
    zero = local_zero(x, clipped_means(points, means, noise.sd), se, window)
    if not math.isnan(zero):
        star = float(np.clip(zero, low95, high95))
    low68, high68 = min(q[1], star), max(q[2], star)
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
