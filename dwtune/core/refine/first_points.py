"""A pair's first points from the records the grid stage (or a wave) trained, and the size
trend extended by the pair's extension points (pure: numpy).

The first points are the budgets the design gave the pair
(:mod:`~dwtune.core.refine.design`); the shallower depth's trend is taken from its mean losses
at the trend sizes, and a law-design pair's extension points join it as they are trained.
See docs/statistics.md ("Paired Δ").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from dwtune.core.errors import InputError
from dwtune.core.records import TrialRecord
from dwtune.core.refine.points import (
    PairPoint,
    make_point,
    record_size,
    usable,
)
from dwtune.core.refine.trend import SizeTrend
from dwtune.core.vocabulary import OTHER_LENGTH_STAGES, PointKind, SizeConvention


def by_budget(
    records: Iterable[TrialRecord], depth: int, budgets: Sequence[float], seeds: Sequence[int]
) -> dict[float, dict[int, TrialRecord]]:
    """Records (completed or failed) of ``depth`` at grid ``budgets`` and ``seeds``; a trial
    of another training length (a search or length-check trial) is never a grid point."""
    table: dict[float, dict[int, TrialRecord]] = {}
    for record in records:
        if record.depth != depth or record.seed not in seeds:
            continue
        if record.stage in OTHER_LENGTH_STAGES:
            continue
        budget = next((b for b in budgets if math.isclose(b, record.budget, rel_tol=1e-9)), None)
        if budget is not None:
            table.setdefault(budget, {})[record.seed] = record
    return table


def shallow_trend(table: dict[float, dict[int, TrialRecord]], convention: str) -> SizeTrend:
    """The size trend of one depth's completed grid means (one rounded width merged)."""
    by_size: dict[int, list[float]] = {}
    for row in table.values():
        for record in filter(usable, row.values()):
            by_size.setdefault(record_size(record, convention), []).append(record.best_val_loss)
    sizes = sorted(by_size)
    return SizeTrend([math.log(s) for s in sizes], [float(np.mean(by_size[s])) for s in sizes])


@dataclass(frozen=True)
class PairStart:
    """A pair's first points (the sizes its design placed) and the shallower depth's size trend."""

    depth_shallow: int
    depth_deep: int
    points: tuple[PairPoint, ...]
    trend: SizeTrend = field(repr=False)
    convention: str = SizeConvention.NON_EMBEDDING.value

    @property
    def label(self) -> str:
        return f"{self.depth_shallow}-{self.depth_deep}"


def _sizes_of(
    deep: dict[int, TrialRecord], shallow: dict[int, TrialRecord], convention: str
) -> tuple[float, int, int]:
    any_deep, any_shallow = next(iter(deep.values())), next(iter(shallow.values()))
    return math.log(record_size(any_deep, convention)), any_deep.width, any_shallow.width


def pair_start(
    records: Sequence[TrialRecord],
    pair: tuple[int, int],
    budgets: Sequence[float],
    seeds: Sequence[int],
    convention: str = SizeConvention.NON_EMBEDDING.value,
    trend_budgets: Sequence[float] = (),
) -> PairStart:
    """The pair's grid points (every budget both depths ran, failures included; undecided
    until :func:`decide_points`); InputError if a depth has no finished grid trial. The
    shallower depth's size trend takes its grid means at ``budgets`` and ``trend_budgets``
    (the design's shallow_budgets)."""
    shallow_depth, deep_depth = pair
    tables = {d: by_budget(records, d, budgets, seeds) for d in pair}
    everywhere = sorted({*budgets, *trend_budgets})
    for depth in pair:
        if not any(usable(r) for row in tables[depth].values() for r in row.values()):
            raise InputError(
                f"refine pair [{shallow_depth}, {deep_depth}]: depth {depth} has no finished grid "
                f"trials (its records were removed, or all failed); rerun `dwtune run SPEC` to "
                f"train its grid (finished trials are kept)"
            )
    trend = shallow_trend(by_budget(records, shallow_depth, everywhere, seeds), convention)
    common = [b for b in budgets if b in tables[deep_depth] and b in tables[shallow_depth]]
    points = []
    for b in common:
        deep, shallow = tables[deep_depth][b], tables[shallow_depth][b]
        sizes = _sizes_of(deep, shallow, convention)
        points.append(
            make_point(b, sizes, deep, shallow, trend, PointKind.GRID, len(seeds), convention)
        )
    return PairStart(shallow_depth, deep_depth, tuple(points), trend, convention)


def extension_budgets(told: Iterable[PairPoint]) -> frozenset[float]:
    """The budgets where the pair extended (law design), from every point it was told: a
    point verified later keeps its budget, not its kind."""
    return frozenset(p.budget for p in told if p.kind == PointKind.EXTEND)


def extended_trend(
    trend: SizeTrend,
    points: Sequence[PairPoint],
    shallow_log_n: Callable[[float], float],
    extensions: Collection[float] = (),
) -> SizeTrend:
    """``trend`` with the shallower net's mean loss at each law-design extension point added
    (a point of kind extend, or at one of ``extensions``: :func:`extension_budgets`;
    ``shallow_log_n(budget)``: ln of the shallower net's size there), or ``trend`` itself
    where the pair has none.

    Why: the law design's grid trains the shallower depth at two sizes or so around the
    reference law's N*; where that law is off, the pair extends beyond them and every point
    near its N* would take an extrapolated slope (the end secant, with no bend error), which
    missed N* on a law far off (benchmarks/README.md, ``benchmarks/study_coverage.py``). The
    extensions lie e-folds apart, so their means give
    the slope and its bend between them without the noise of the dense points near N*."""
    extra: dict[float, list[float]] = {}
    for point in points:
        # Why the budgets: a re-verified extension point becomes a verify point, and its
        # shallower net then left the trend
        if point.kind != PointKind.EXTEND and point.budget not in extensions:
            continue
        shallow = [s for seed, _, s in point.losses if math.isfinite(s)
                   and seed not in point.unstable_shallow]  # fmt: skip
        if shallow:
            extra.setdefault(shallow_log_n(point.budget), []).extend(shallow)
    if not extra:
        return trend
    by_x = {float(x): float(y) for x, y in zip(trend.x, trend.losses, strict=True)}
    for x, losses in extra.items():
        if not any(math.isclose(k, x, abs_tol=1e-9) for k in by_x):  # a grid size: kept
            by_x[x] = float(np.mean(losses))
    xs = sorted(by_x)
    return SizeTrend(xs, [by_x[x] for x in xs])


def retrended(point: PairPoint, trend: SizeTrend, log_n_shallow: float) -> PairPoint:
    """``point`` corrected along ``trend`` instead of the trend it was made with: the equal-N
    move, every finite Δ and the trend's share of ``extra_sd`` recomputed (the same point
    again where it already is)."""
    gap = point.log_n - log_n_shallow
    moved = trend.slope_at(log_n_shallow) * gap
    moved_sd = trend.slope_sd_at(log_n_shallow) * abs(gap)
    shift = point.size_correction - moved
    deltas = tuple(d + shift if math.isfinite(d) else d for d in point.deltas)
    rest = max(point.extra_sd**2 - point.size_correction_sd**2, 0.0)
    return replace(
        point,
        deltas=deltas,
        size_correction=moved,
        size_correction_sd=moved_sd,
        extra_sd=math.sqrt(rest + moved_sd**2),
    )


def on_extended_trend(
    points: Sequence[PairPoint],
    trend: SizeTrend,
    shallow_log_n: Callable[[float], float],
    extensions: Collection[float] = (),
) -> tuple[list[PairPoint], SizeTrend]:
    """Every point corrected along :func:`extended_trend` (``points`` as they are where the
    pair has no extension), and that trend: made from the records alone, so a resumed pair
    sees the same."""
    extended = extended_trend(trend, points, shallow_log_n, extensions)
    if extended is trend:
        return list(points), trend
    return [retrended(p, extended, shallow_log_n(p.budget)) for p in points], extended
