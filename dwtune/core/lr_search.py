"""Per-shape learning-rate search, the pure part: which rate wins, and rates between widths.

The Optuna side (proposals, resumable studies) is :mod:`dwtune.study.lr_search`; the Ray side
(ASHA stopping poor rates) is :mod:`dwtune.study.runners.ray_tune`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dwtune.core import vocabulary
from dwtune.core.errors import InputError


@dataclass(frozen=True)
class SearchOutcome:
    """One search trial's result, as the selection sees it."""

    lr: float
    status: str
    final_val_loss: float
    steps: int  # steps it trained before finishing or being stopped


def best_rate(outcomes: Sequence[SearchOutcome], search_steps: int) -> float | None:
    """The rate of the lowest final validation loss among the trials that trained the full
    search steps (ASHA's survivors); None when no trial has a finite loss.

    Trials ASHA stopped are compared only when no trial reached the full search budget: a loss
    at fewer steps is higher by construction and never beats a finished one fairly.
    """
    usable = [
        o
        for o in outcomes
        if o.status in vocabulary.COMPLETED_STATUSES and math.isfinite(o.final_val_loss)
    ]
    full = [o for o in usable if o.steps >= search_steps]
    pool = full or usable
    if not pool:
        return None
    return min(pool, key=lambda o: (o.final_val_loss, o.lr)).lr


def interpolate_rate(known: Sequence[tuple[float, float]], width: float) -> float:
    """ln lr as a piecewise-linear function of ln width through ``known`` (width, rate) points,
    extended beyond the end points along the end segments (a power law in width, as the
    width rules of SP and μP predict); a single point gives its rate."""
    points = sorted({float(w): float(r) for w, r in known}.items())
    if not points:
        raise InputError(
            "train.lr.refine: interpolate needs the grid's searched rates; none is recorded "
            "for this depth (run the grid stage first, or use refine: search)"
        )
    if len(points) == 1:
        return points[0][1]
    x = math.log(width)
    xs = [math.log(w) for w, _ in points]
    ys = [math.log(r) for _, r in points]
    i = next((k for k in range(1, len(xs) - 1) if x < xs[k]), len(xs) - 1)
    slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
    return math.exp(ys[i - 1] + slope * (x - xs[i - 1]))


def search_steps(total_steps: int, fidelity: float) -> int:
    """Steps of a reduced-fidelity search trial: fidelity × the real training's, at least 1."""
    return max(1, round(total_steps * fidelity))


def ln_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ln y against ln x (NaN with fewer than two distinct x)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    if len(set(lx)) < 2:
        return math.nan
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sxx
