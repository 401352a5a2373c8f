"""Training-length robustness of a pair's transition (pure): the points to retrain, the shift.

``refine.length_check`` lists factors ``f`` on the training length (steps, tokens or
tokens_per_param, whichever the spec gives: :func:`dwtune.core.records.scaled_length`). After
the refine stage, each bracketed pair's points near its bracket (:func:`check_points`) are
trained again at ``f`` times the length with the same paired seeds
(:mod:`dwtune.study.length_check`), and N* is re-estimated from those points alone with
:func:`dwtune.core.refine.estimate.estimate_crossing`. Against the refine stage's N* (every point of
the pair, 95% interval ``[lo, hi]``, ``σ = σ(ln N*)``)::

    shift          = ln(N*_f / N*)                   e-folds of N
    shift_sigma    = shift / σ
    shift_interval = shift / (ln hi − ln N*)   (shift > 0; ln N* − ln lo below)

so ``|shift_interval| > 1`` exactly when N*_f lies outside N*'s 95% interval: the transition
*moved* by more than its interval. A pair that is no longer bracketed inside the checked points
also moved: ``censored_high`` (the deeper net loses at every checked point) puts N*_f above the
highest one, ``censored_low`` below the lowest, and those points lie beyond the bracket the
interval sits in. ``undecided`` or ``non_monotone`` at the other length gives no N*_f and no
verdict (``moved`` false; the status says why).

Which points: the bracket's two decisive points, their neighbours outside the bracket, and the
grid points enclosing the bracket, so that a transition moving by up to the grid's spacing is
still bracketed by checked points. Between two checked points N*_f is interpolated like N*
(linearly in ln N), so a large move is located only to within the spacing of the checked
points around it: its sign and rough size, with the interval the bootstrap gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dwtune.core import vocabulary
from dwtune.core.refine.estimate import CrossingEstimate
from dwtune.core.refine.outcome import outcome_of
from dwtune.core.refine.points import PairPoint
from dwtune.core.refine.transition import Transition
from dwtune.core.vocabulary import PointKind, TransitionStatus


@dataclass(frozen=True)
class LengthShift:
    """One row of length_check.parquet: a pair's N* at ``factor`` times the training length."""

    depth_shallow: int
    depth_deep: int
    factor: float  # on the training length
    status: str  # the transition status at this length (from the checked points alone)
    n_star: float  # the refine stage's N*, its 95% interval and σ(ln N*)
    n_star_low: float
    n_star_high: float
    sigma_ln: float
    n_star_check: float  # N* at this length (NaN unless bracketed)
    n_star_check_low: float  # 95% interval; a censored pair's known bound
    n_star_check_high: float
    sigma_ln_check: float
    shift: float  # ln(N*_f / N*), e-folds
    shift_sigma: float  # shift / σ(ln N*)
    shift_interval: float  # shift over N*'s 95% half-interval on its side (module doc)
    moved: bool  # N*_f outside N*'s 95% interval (or past the checked points)
    points: int  # points retrained
    seeds: int  # most seeds at one of them
    trials: int  # trainings of this check (stage length_check)
    simulated: bool
    noise_source: str = vocabulary.NOISE_MEASURED

    @property
    def pair(self) -> str:
        return f"{self.depth_shallow}-{self.depth_deep}"


def check_points(
    points: Sequence[PairPoint], grid_budgets: Sequence[float], max_seeds: int
) -> list[PairPoint]:
    """The points of a bracketed pair to retrain (module doc); [] when it is not bracketed.

    ``points``: every point of the pair, sorted by size and decided (refine.outcome.decide_points).
    """
    outcome = outcome_of(points, max_seeds)
    if outcome.status != TransitionStatus.BRACKETED:
        return []
    low = points.index(outcome.low_point)
    high = points.index(outcome.high_point)
    chosen = {i for i in (low - 1, low, high, high + 1) if 0 <= i < len(points)}
    grid = [
        i
        for i, p in enumerate(points)
        if p.kind == PointKind.GRID and any(math.isclose(p.budget, b) for b in grid_budgets)
    ]
    below = [i for i in grid if i <= low]
    above = [i for i in grid if i >= high]
    chosen |= {below[-1]} if below else set()
    chosen |= {above[0]} if above else set()
    return [points[i] for i in sorted(chosen)]


def _half_interval(t: Transition, shift: float) -> float:
    """e-folds from ln N* to its 95% interval's end on the side of ``shift``."""
    end = t.n_star_high if shift >= 0 else t.n_star_low
    return abs(math.log(end / t.n_star))


def length_shift(
    t: Transition,
    factor: float,
    estimate: CrossingEstimate,
    checked: Sequence[PairPoint],
    trials: int,
) -> LengthShift:
    """The row of ``t`` at ``factor``: N*_f, the shift in σ and in interval units, the flag."""
    nan = math.nan
    sizes = [math.exp(p.log_n) for p in checked]
    low, high = nan, nan
    shift, half, moved = nan, nan, False
    if estimate.status == TransitionStatus.BRACKETED:
        # a bracketed estimate carries N* and its interval
        assert estimate.n_star is not None and estimate.n_star_low is not None
        assert estimate.n_star_high is not None
        low, high = estimate.n_star_low, estimate.n_star_high
        shift = math.log(estimate.n_star / t.n_star)
        half = _half_interval(t, shift)
        moved = abs(shift) > half
    elif estimate.status == TransitionStatus.CENSORED_HIGH:
        low, moved = max(sizes), True  # N*_f above every checked point
    elif estimate.status == TransitionStatus.CENSORED_LOW:
        high, moved = min(sizes), True
    interval = shift / half if math.isfinite(shift) and half > 0 else nan
    return LengthShift(
        depth_shallow=t.depth_shallow,
        depth_deep=t.depth_deep,
        factor=float(factor),
        status=estimate.status,
        n_star=t.n_star,
        n_star_low=t.n_star_low,
        n_star_high=t.n_star_high,
        sigma_ln=t.sigma_ln,
        n_star_check=estimate.n_star if estimate.n_star is not None else nan,
        n_star_check_low=low,
        n_star_check_high=high,
        sigma_ln_check=estimate.sigma_ln if estimate.sigma_ln is not None else nan,
        shift=shift,
        shift_sigma=shift / t.sigma_ln if t.sigma_ln > 0 else nan,
        shift_interval=interval,
        moved=moved,
        points=len(checked),
        seeds=max((p.n for p in checked), default=0),
        trials=trials,
        simulated=t.simulated,
        noise_source=estimate.noise_source,
    )


def describe(row: LengthShift) -> str:
    """One console line: N* and N*_f, the shift in σ and interval units, the verdict."""
    head = f"[length_check {row.pair} ×{row.factor:g}]"
    verdict = "MOVED by more than its 95% interval" if row.moved else "within its 95% interval"
    if row.status == TransitionStatus.BRACKETED:
        return (
            f"{head} N* {row.n_star:.4g} → {row.n_star_check:.4g} (95% [{row.n_star_check_low:.4g}"
            f", {row.n_star_check_high:.4g}]): ln shift {row.shift:+.3f} = {row.shift_sigma:+.1f} σ"
            f" = {row.shift_interval:+.2f} × its interval; {verdict} ({row.trials} trainings)"
        )
    if row.status in vocabulary.CENSORED_STATUSES:
        side = "above" if row.status == TransitionStatus.CENSORED_HIGH else "below"
        bound = row.n_star_check_low if side == "above" else row.n_star_check_high
        return (
            f"{head} {row.status}: N* now lies {side} every checked point ({bound:.4g}); "
            f"{verdict} ({row.trials} trainings)"
        )
    return (
        f"{head} {row.status}: no N* at this length from the checked points "
        f"({row.trials} trainings)"
    )
