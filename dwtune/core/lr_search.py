"""Per-shape learning-rate search, the pure part: which rate wins, and rates between widths.

The Optuna side (proposals, resumable studies) is :mod:`dwtune.study.lr_search`; the Ray side
(ASHA stopping poor rates) is :mod:`dwtune.study.runners.ray_tune`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.errors import InputError


@dataclass(frozen=True)
class SearchOutcome:
    """One search trial's result, as the selection sees it."""

    lr: float
    status: str
    final_val_loss: float
    steps: int  # steps it trained before finishing or being stopped


PARABOLA_POINTS = 5  # the lowest losses a parabola in ln lr is fitted through


def best_rate(outcomes: Sequence[SearchOutcome], search_steps: int) -> float | None:
    """The best rate among the trials that trained the full search steps (ASHA's survivors);
    None when no trial has a finite loss.

    Near its optimum the final loss is close to a parabola in ln lr, so the best rate is the
    vertex of a least-squares parabola through the (up to) five lowest losses, when it opens
    upwards and its vertex lies between the rates it was fitted to; else the rate of the lowest
    loss. The vertex averages the seed noise of several trials, where the lowest single loss
    picks it up. Trials ASHA stopped are compared only when no trial reached the full search
    budget: a loss at fewer steps is higher by construction and never beats a finished one.
    """
    usable = [
        o
        for o in outcomes
        if o.status in vocabulary.COMPLETED_STATUSES and math.isfinite(o.final_val_loss)
    ]
    full = [o for o in usable if o.steps >= search_steps]
    pool = sorted(full or usable, key=lambda o: (o.final_val_loss, o.lr))
    if not pool:
        return None
    vertex = parabola_vertex(pool[:PARABOLA_POINTS])
    return pool[0].lr if vertex is None else vertex


def parabola_vertex(outcomes: Sequence[SearchOutcome]) -> float | None:
    """exp(vertex) of loss = c0 + c1·x + c2·x², x = ln lr, when c2 > 0 and the vertex lies
    within the fitted rates; None otherwise (fewer than three distinct rates)."""
    x = np.log([o.lr for o in outcomes])
    if len(set(x.tolist())) < 3:
        return None
    c2, c1, _ = np.polyfit(x, [o.final_val_loss for o in outcomes], 2)
    if c2 <= 0:
        return None
    vertex = -c1 / (2 * c2)
    return float(math.exp(vertex)) if x.min() <= vertex <= x.max() else None


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
