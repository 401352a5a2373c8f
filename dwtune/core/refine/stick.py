"""Broken sticks through zero: the kink test, the profile band and the local line of N*
(pure: numpy).

A broken stick through zero at ``x0`` is ``Δ = s1·(x0 − x)^p`` left of ``x0`` and
``−s2·(x − x0)^p`` right of it, each slope fitted (weights 1/se²) and kept ≥ 0. Rules
(docs/statistics.md, "N* and its intervals"):

- kink: two straight legs must beat one straight line through zero by ``KINK_EVIDENT`` of χ²
  before the chord is corrected for a kink (:func:`stick_world`), by ``LINE_UNLESS_KINK``
  before the reported N* is the stick's rather than the line's (:func:`local_zero`);
- profile band: every crossing whose stick χ² (legs of any of ``STICK_POWERS``) is within
  ``q`` of the best (:func:`broken_stick_band`);
- support: the points within a reach of the bracket (``PROFILE_REACH`` e-folds, or the
  bracket's width if wider), at least ``STICK_MIN_SIDE`` on each side.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from dwtune.core.refine.signs import Window

PROFILE_REACH = 0.3  # e-folds beside the bracket whose points the broken-stick profile uses


PROFILE_GRID = 400  # candidate crossings of the profile across the bracket


STICK_MIN_POINTS = 4  # points the kink-bias stick needs: 3 parameters and one χ² dof


# χ² the stick's second slope must gain over one straight line before the chord is corrected
# for a kink (χ²₁'s 95% point: the kink is one parameter more)
KINK_EVIDENT = 3.84


# ... and the reported N*'s line or stick: with one χ² dof a stick all but interpolates four
# points, so the local estimate needs five (fewer: the chord is reported)
ESTIMATE_MIN_POINTS = 5


# ... and on each side of the bracket: with one point on a side any crossing fits that side
# exactly, so the other side's extrapolation alone would place it
STICK_MIN_SIDE = 2


# The profile band's likelihood-ratio cut in the 95% interval: χ²₁'s 90% quantile, since the
# interval is the union of the bootstrap's percentiles and this band (at the band's own 95% cut
# the union over-covered: benchmarks/README.md, coverage.py)
PROFILE_Q95 = 2.71


# Powers of the profile's legs: a kinked line (1) up to a crossing flat at N* (3, Δ ∝ tanh³);
# where Δ is a line near N* a curved leg fits no better, so it moves nothing there
STICK_POWERS = (1.0, 2.0, 3.0)


# The reported N* is a straight line's crossing unless two slopes fit its points better than
# one by this much χ² (χ²₁'s 99.9% point): a kink beyond doubt (module doc, Reported N*)
LINE_UNLESS_KINK = 10.83


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
    window: Window,
    reach: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The points a broken stick is fitted to (finite, within ``reach`` e-folds of the bracket:
    :func:`stick_reach` where None) and the candidate crossings across the bracket."""
    low, high = x[window.before], x[window.after]
    reach = stick_reach(low, high) if reach is None else reach
    near = within_reach(x, low, high, reach) & np.isfinite(values)
    return near, np.linspace(low, high, PROFILE_GRID)


def broken_stick_band(
    x: np.ndarray, means: np.ndarray, se: np.ndarray, window: Window, q: float
) -> tuple[float, float]:
    """The ln N range inside the bracket where a broken stick through zero fits the points
    within PROFILE_REACH e-folds of it within ``q`` of its best χ² (module doc)."""
    near, grid = _stick_support(x, means, window)
    chi2 = _stick_chi2(x[near], means[near], se[near] ** -2.0, grid, STICK_POWERS)
    inside = np.flatnonzero(chi2 - chi2.min() <= q)
    return float(grid[inside[0]]), float(grid[inside[-1]])


def stick_world(
    x: np.ndarray,
    values: np.ndarray,
    se: np.ndarray,
    window: Window,
    means: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """The best broken stick through zero (PROFILE_REACH points, module doc): its zero and its
    prediction at every point it was fitted to (the other points keep ``values``); no zero
    (NaN) where fewer than STICK_MIN_POINTS points fix its three parameters and a χ², where
    fewer than STICK_MIN_SIDE lie on either side of the bracket, or where its two slopes fit
    ``means`` (``values`` where None) no better than one straight line by KINK_EVIDENT (no
    kink beyond noise). Why the means there: ``se`` is the standard error of a mean, and a
    median of three or four seeds scatters more, so its χ² gain would pass the test too often
    (benchmarks/README.md)."""
    near, grid = _stick_support(x, values, window)
    low, high = x[window.before], x[window.after]
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


def _row_sums(
    m: np.ndarray, w: np.ndarray, d: np.ndarray, keep: np.ndarray | None = None
) -> np.ndarray:
    """χ² of each row of ``m`` (row, point) against its best slope ≥ 0 on the distances ``d``
    (candidate, point), over the points ``keep`` (candidate, point; all where None): the
    residual sum Σ w·(m − s·d)² = Σ w·m² − 2·s·Σ w·m·d + s²·Σ w·d², array (row, candidate)."""
    wm = w * m
    den, num = w @ (d * d).T, wm @ d.T
    squares = (wm * m) @ (np.ones_like(d) if keep is None else keep.astype(float)).T
    slope = np.maximum(np.divide(num, den, out=np.zeros_like(den), where=den > 0), 0.0)
    chi2: np.ndarray = squares - 2.0 * slope * num + slope**2 * den
    return chi2


def _rows_stick_chi2(
    x: np.ndarray, m: np.ndarray, w: np.ndarray, zeros: np.ndarray, powers: Sequence[float]
) -> np.ndarray:
    """:func:`_stick_chi2` of every row of ``m`` and ``w`` at once, array (row, candidate)."""
    d = zeros[:, None] - x[None, :]
    best = np.full((m.shape[0], zeros.size), np.inf)
    for power in powers:
        total = np.zeros_like(best)
        for side in (d >= 0, d < 0):
            dd = np.where(side, np.sign(d) * np.abs(d) ** power, 0.0)
            total += _row_sums(m, w, dd, side)
        best = np.minimum(best, total)
    return best


def local_zeros(x: np.ndarray, rows: np.ndarray, se: np.ndarray, window: Window) -> np.ndarray:
    """:func:`local_zero` of each row of ``rows`` with its row of ``se`` (the bootstrap's
    replicates of one window): the line's crossing, the stick's where two straight legs fit
    better by LINE_UNLESS_KINK; all NaN where too few points lie within reach (points not
    finite in every row are left out)."""
    rows, se = np.atleast_2d(rows), np.atleast_2d(se)
    finite = np.isfinite(rows).all(axis=0)
    near, grid = _stick_support(x, np.where(finite, 0.0, np.nan), window, PROFILE_REACH)
    sides = stick_sides(x[near], x[window.before], x[window.after], PROFILE_REACH)
    if near.sum() < ESTIMATE_MIN_POINTS or min(sides) < STICK_MIN_SIDE:
        return np.full(rows.shape[0], math.nan)
    inner = grid[1:-1]  # the bracket's ends have decided signs: N* lies strictly between them
    xs, ys, w = x[near], rows[:, near], se[:, near] ** -2.0
    line = _row_sums(ys, w, inner[:, None] - xs[None, :])
    gain = line.min(axis=1) - _rows_stick_chi2(xs, ys, w, inner, (1.0,)).min(axis=1)
    zeros: np.ndarray = inner[np.argmin(line, axis=1)]
    kinked = np.flatnonzero(gain >= LINE_UNLESS_KINK)
    if kinked.size:
        chi2 = _rows_stick_chi2(xs, ys[kinked], w[kinked], inner, STICK_POWERS)
        zeros[kinked] = inner[np.argmin(chi2, axis=1)]
    return zeros


def local_zero(x: np.ndarray, values: np.ndarray, se: np.ndarray, window: Window) -> float:
    """The reported N* from ``values`` within PROFILE_REACH e-folds of the bracket (module doc,
    Reported N*): the crossing of the best straight line through zero, or of the best broken
    stick of any of STICK_POWERS where two straight legs fit better by LINE_UNLESS_KINK; NaN
    where fewer than ESTIMATE_MIN_POINTS lie there, or fewer than STICK_MIN_SIDE on a side."""
    return float(local_zeros(x, values, se, window)[0])
