"""Leave-one-pair-out projections: how much each pair moves the answer (pure: numpy, scipy).

For every pair the law ``ln dx* = a + b·L`` is refitted without it (interval-censored
likelihood, :func:`dwtune.core.fit.censored.fit_law`) and the optimal depth and width are
projected to each budget (default GPT-3's 175B and 1T parameters). A pair that moves the
projected depth by more than the full fit's interval half-width carries the answer on its own.
A pair already excluded from the fit (non_monotone, undecided) gets a row with its reason;
removing it changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dwtune.core.errors import InputError
from dwtune.core.fit.censored import TransitionObservation, fit_law
from dwtune.core.projection import DepthWidthLaw, optimal_depth

LOO_BUDGETS = (1.75e11, 1e12)  # parameters: GPT-3, and 1T


@dataclass(frozen=True)
class LooRow:
    """The fit without one pair and its projections: budget -> (depth, width, depth shift)."""

    pair: str
    status: str
    a: float
    b: float
    projections: dict[float, tuple[float, float, float]]
    note: str = ""  # why there is no refit, or why the pair was not in the fit

    def to_dict(self) -> dict[str, object]:
        rows = [
            {"budget": n, "depth": d, "width": w, "depth_shift": s}
            for n, (d, w, s) in self.projections.items()
        ]
        return {"pair": self.pair, "status": self.status, "a": self.a, "b": self.b,
                "projections": rows, "note": self.note}  # fmt: skip


def _project(a: float, b: float, budget: float) -> tuple[float, float]:
    if not (math.isfinite(b) and b > 0):
        return math.nan, math.nan
    depth = optimal_depth(DepthWidthLaw("loo", a, b), budget)
    return depth, math.sqrt(budget / (12.0 * depth))


def _row(
    obs: TransitionObservation,
    rest: Sequence[TransitionObservation],
    full: dict[float, tuple[float, float]],
    budgets: Sequence[float],
) -> LooRow:
    if not obs.fitted:
        return LooRow(obs.label, obs.status, math.nan, math.nan, {}, obs.exclusion())
    try:
        fit = fit_law(rest)
    except InputError as exc:
        return LooRow(obs.label, obs.status, math.nan, math.nan, {}, f"no refit: {exc}")
    projections = {}
    for budget in budgets:
        depth, width = _project(fit.a, fit.b, budget)
        projections[float(budget)] = (depth, width, depth - full[float(budget)][0])
    note = "" if fit.b > 0 else f"slope b = {fit.b:.3g} is not positive: no projection"
    return LooRow(obs.label, obs.status, fit.a, fit.b, projections, note)


def leave_one_pair_out(
    observations: Sequence[TransitionObservation], budgets: Sequence[float] = LOO_BUDGETS
) -> tuple[LooRow, ...]:
    """One row per pair given (in order): the refit without it and its projections."""
    full_fit = fit_law(observations)
    full = {float(n): _project(full_fit.a, full_fit.b, n) for n in budgets}
    return tuple(
        _row(obs, [o for j, o in enumerate(observations) if j != i], full, budgets)
        for i, obs in enumerate(observations)
    )
