"""Size groups, depth pairs, size matching, size trends and Δ points (pure: numpy).

See :mod:`dwtune.core.analysis` for the conventions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from numpy.typing import NDArray

from dwtune.core.analysis.table import RunTable
from dwtune.core.errors import InputError
from dwtune.core.refine.signs import DeltaPoint

DEFAULT_WINDOW = 0.25  # e-folds of size: runs within a factor e^0.25 ≈ 1.28 are compared
TREND_SPAN = 1.5  # e-folds either side of a point that the local size trend is fitted over
TREND_MIN_SIZES = 3  # sizes the trend uses at least (the nearest ones, if the span has fewer)


# --------------------------------------------------------------------------- size groups


@dataclass(frozen=True)
class SizeGroup:
    """The used runs of one depth at one size: losses per seed (NaN: failed)."""

    depth: float
    params: float
    width: float
    losses: tuple[float, ...]
    seeds: tuple[int, ...] | None  # aligned with losses; None without a seed column
    rows: tuple[int, ...]

    @property
    def x(self) -> float:
        return math.log(self.params)

    @property
    def ok(self) -> NDArray[np.bool_]:
        return np.isfinite(np.asarray(self.losses, dtype=np.float64))

    @property
    def failed_seeds(self) -> set[int]:
        return {s for s, ok in zip(self.seeds or (), self.ok, strict=False) if not ok}

    @property
    def finite(self) -> NDArray[np.float64]:
        return np.asarray(self.losses, dtype=float)[self.ok]


def _check_duplicate_seeds(group: SizeGroup) -> None:
    seen: dict[int, int] = {}
    for seed, row in zip(group.seeds or (), group.rows, strict=False):
        if seed in seen:
            raise InputError(
                f"depth {group.depth:g} params {group.params:.6g} seed {seed}: two runs (rows "
                f"{seen[seed]} and {row}); keep one per seed (filter the table) or give them "
                "distinct seeds"
            )
        seen[seed] = row


def size_groups(table: RunTable) -> dict[float, list[SizeGroup]]:
    """depth -> its size groups sorted by size (one group per distinct ``params``)."""
    loss = np.where(table.is_failed(), np.nan, table.loss)
    cells: dict[tuple[float, float], list[int]] = {}
    for i, key in enumerate(zip(table.depth, table.params, strict=True)):
        cells.setdefault((float(key[0]), float(key[1])), []).append(i)
    out: dict[float, list[SizeGroup]] = {}
    for (depth, params), index in sorted(cells.items()):
        group = SizeGroup(
            depth=depth,
            params=params,
            width=float(np.median(table.width[index])),
            losses=tuple(float(loss[i]) for i in index),
            seeds=None if table.seed is None else tuple(int(table.seed[i]) for i in index),
            rows=tuple(int(table.row[i]) for i in index),
        )
        _check_duplicate_seeds(group)
        out.setdefault(depth, []).append(group)
    return out


# --------------------------------------------------------------------------- pairs


def parse_pairs(text: str) -> tuple[tuple[float, float], ...]:
    """``"6-12,12-18"`` -> ((6, 12), (12, 18)); the shallower depth first."""
    pairs = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        try:
            low, high = (float(v) for v in item.split("-"))
        except ValueError:
            raise InputError(
                f"--pairs: got {item!r}; expected SHALLOW-DEEP depth pairs such as 6-12,12-18"
            ) from None
        if not 0 < low < high:
            raise InputError(f"--pairs: got {item!r}; expected the shallower depth first")
        pairs.append((low, high))
    if not pairs:
        raise InputError(f"--pairs: got {text!r}; expected pairs such as 6-12,12-18")
    return tuple(pairs)


def choose_pairs(
    depths: Sequence[float], requested: Sequence[tuple[float, float]] | None = None
) -> tuple[tuple[float, float], ...]:
    """The requested pairs (each depth must be present), else every adjacent pair."""
    present = sorted(set(depths))
    shown = ", ".join(f"{d:g}" for d in present)
    if requested:
        for pair in requested:
            for depth in pair:
                if depth not in present:
                    raise InputError(
                        f"--pairs {pair[0]:g}-{pair[1]:g}: depth {depth:g} has no usable run; "
                        f"depths present: {shown}"
                    )
        return tuple(requested)
    if len(present) < 2:
        raise InputError(
            f"depth {shown} is the only depth with usable runs: a pair needs a partner; add runs "
            "of a second depth (or map the depth column with --columns depth=COLUMN)"
        )
    return tuple(itertools.pairwise(present))


def match_sizes(
    deep: Sequence[SizeGroup], shallow: Sequence[SizeGroup], window: float
) -> list[tuple[SizeGroup, SizeGroup]]:
    """(deeper group, shallower group) pairs within ``window`` e-folds, closest first, each
    group used once, sorted by size; InputError naming the nearest sizes if none."""
    candidates = sorted(
        (abs(d.x - s.x), i, j) for i, d in enumerate(deep) for j, s in enumerate(shallow)
    )
    used_deep, used_shallow, matched = set(), set(), []
    for distance, i, j in candidates:
        if distance <= window and i not in used_deep and j not in used_shallow:
            used_deep.add(i)
            used_shallow.add(j)
            matched.append((deep[i], shallow[j]))
    if not matched:
        distance, i, j = candidates[0]
        raise InputError(
            f"pair {shallow[0].depth:g}-{deep[0].depth:g}: sizes never meet within --window "
            f"{window:g}; nearest are {shallow[j].params:.4g} (depth {shallow[0].depth:g}) and "
            f"{deep[i].params:.4g} (depth {deep[0].depth:g}), |ln ratio| = {distance:.3f}: "
            f"--window {math.ceil(distance * 1000) / 1000:g} would pair them"
        )
    return sorted(matched, key=lambda m: m[0].params)


# --------------------------------------------------------------------------- size trend


@dataclass(frozen=True)
class Trend:
    """Slope of ln loss in ln N near a point, its standard error, and where it came from."""

    kind: str  # "own", "pooled" or "none"
    slope: float
    slope_se: float


def _near(groups: Sequence[SizeGroup], x_mid: float) -> list[SizeGroup]:
    """Groups with a finite loss within TREND_SPAN of x_mid (at least the nearest few)."""
    usable = sorted((g for g in groups if g.ok.any()), key=lambda g: abs(g.x - x_mid))
    inside = [g for g in usable if abs(g.x - x_mid) <= TREND_SPAN]
    return inside if len(inside) >= TREND_MIN_SIZES else usable[:TREND_MIN_SIZES]


def _least_squares(design: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """Slope (last column) and its residual-scaled standard error; None without dof."""
    dof = y.size - design.shape[1]
    if dof < 1 or np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    cov = np.linalg.inv(design.T @ design) * float(resid @ resid) / dof
    return float(coef[-1]), float(math.sqrt(max(cov[-1, -1], 0.0)))


def _rows(groups_by_depth: Sequence[Sequence[SizeGroup]], x_mid: float) -> np.ndarray:
    """(depth index, x, ln loss) of every finite run of the groups."""
    out = []
    for k, groups in enumerate(groups_by_depth):
        for g in groups:
            out += [(k, g.x - x_mid, math.log(v)) for v in g.finite]
    return np.array(out, dtype=float).reshape(-1, 3)


def fit_trend(
    own: Sequence[SizeGroup], every: Sequence[Sequence[SizeGroup]], x_mid: float
) -> Trend | None:
    """The own trend where the depth's runs allow one, else the pooled one (module doc)."""
    rows = _rows([_near(own, x_mid)], x_mid)
    fitted = _least_squares(np.column_stack([np.ones(len(rows)), rows[:, 1]]), rows[:, 2])
    if fitted is not None:
        return Trend("own", *fitted)
    rows = _rows([_near(groups, x_mid) for groups in every], x_mid)
    depths = np.unique(rows[:, 0])
    intercepts = (rows[:, :1] == depths[None, :]).astype(float)
    fitted = _least_squares(np.column_stack([intercepts, rows[:, 1]]), rows[:, 2])
    return Trend("pooled", *fitted) if fitted is not None else None


# --------------------------------------------------------------------------- Δ points


@dataclass(frozen=True)
class MatchedPoint:
    """One Δ point of a pair: the estimator's input plus what the tables print."""

    point: DeltaPoint
    n_shallow: float  # the shallower runs' own size
    width_deep: float
    width_shallow: float
    trend: str  # own | pooled | none
    paired: bool
    trend_sd: float  # nats: the trend's share of extra_sd
    rows_deep: tuple[int, ...] = ()  # source row numbers of the runs compared (noise, tokens)
    rows_shallow: tuple[int, ...] = ()


def _with_failures(group: SizeGroup) -> dict[int, float]:
    """seed -> loss; a failed seed takes the worst loss its group completed (inf if none)."""
    assert group.seeds is not None  # only groups with a seed column are paired
    worst = float(group.finite.max()) if group.finite.size else math.inf
    return {
        seed: loss if math.isfinite(loss) else worst
        for seed, loss in zip(group.seeds, group.losses, strict=True)
    }


def _paired(
    deep: SizeGroup, shallow: SizeGroup, factor: float
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Seeds both sides have, and Δ per seed with failures as outcomes (package doc)."""
    d, s = _with_failures(deep), _with_failures(shallow)
    both_failed = deep.failed_seeds & shallow.failed_seeds  # no sign: dropped
    seeds, deltas = [], []
    for seed in sorted(set(d) & set(s) - both_failed):
        seeds.append(seed)
        if math.isinf(d[seed]) or math.isinf(s[seed]):
            deltas.append(math.inf if math.isinf(d[seed]) else -math.inf)
        else:
            deltas.append(d[seed] - s[seed] * factor)
    return tuple(seeds), tuple(deltas)


def _unpaired(
    deep: SizeGroup, shallow: SizeGroup, factor: float
) -> tuple[tuple[float, ...], float]:
    """Δ of each deeper run against the moved shallower mean, and that mean's se (nats)."""
    moved = shallow.finite * factor
    if moved.size == 0 or deep.finite.size == 0:
        return (), 0.0
    spread = moved if moved.size >= 2 else deep.finite if deep.finite.size >= 2 else None
    se = float(np.std(spread, ddof=1)) / math.sqrt(moved.size) if spread is not None else 0.0
    return tuple(float(v) for v in deep.finite - moved.mean()), se


class _Failures(TypedDict):
    failures_deep: int
    failures_shallow: int


def delta_point(deep: SizeGroup, shallow: SizeGroup, trend: Trend) -> MatchedPoint:
    """Δ at the deeper size with the trend's uncertainty in ``extra_sd`` (module doc)."""
    shift = deep.x - shallow.x
    factor = math.exp(trend.slope * shift)
    level = float(np.mean(shallow.finite)) if shallow.finite.size else 0.0
    trend_sd = level * factor * trend.slope_se * abs(shift)
    common = set(deep.seeds or ()) & set(shallow.seeds or ())
    failures = _Failures(
        failures_deep=int((~deep.ok).sum()), failures_shallow=int((~shallow.ok).sum())
    )
    if common:
        seeds, deltas = _paired(deep, shallow, factor)
        point = DeltaPoint(deep.params, deltas, trend_sd, seeds, **failures)
    else:
        deltas, mean_se = _unpaired(deep, shallow, factor)
        point = DeltaPoint(deep.params, deltas, math.hypot(trend_sd, mean_se), (), **failures)
    return MatchedPoint(
        point,
        shallow.params,
        deep.width,
        shallow.width,
        trend.kind,
        bool(common),
        trend_sd,
        deep.rows,
        shallow.rows,
    )


def pair_points(
    groups: dict[float, list[SizeGroup]], pair: tuple[float, float], window: float
) -> list[MatchedPoint]:
    """Every matched Δ point of a pair, sorted by size."""
    shallow_depth, deep_depth = pair
    every = list(groups.values())
    points = []
    for deep, shallow in match_sizes(groups[deep_depth], groups[shallow_depth], window):
        mid = 0.5 * (deep.x + shallow.x)
        trend = Trend("none", 0.0, 0.0) if deep.x == shallow.x else None
        trend = trend or fit_trend(groups[shallow_depth], every, mid)
        if trend is None:
            raise InputError(
                f"pair {shallow_depth:g}-{deep_depth:g}: sizes {shallow.params:.4g} and "
                f"{deep.params:.4g} differ but no size trend can be fitted (too few runs at "
                "different sizes); add runs at more sizes or give runs of equal params"
            )
        points.append(delta_point(deep, shallow, trend))
    return points
