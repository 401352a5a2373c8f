"""The shallower depth's size trend: d loss / d ln N and its error (pure: numpy).

Δ of a point is compared at equal N: the shallower net's loss is moved along this trend to the
deeper net's size. The slope between trend sizes is interpolated; its error there is half the
difference of the one-sided slopes (the loss curve's bend the interpolation cannot follow),
shared by every seed of a point. See docs/statistics.md ("Paired Δ").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class SizeTrend:
    """d loss / d ln N of the shallower depth, from its mean grid losses (nats per e-fold),
    and how far that slope may be off between grid budgets.

    The slope's uncertainty at a grid size is half the difference of the one-sided slopes
    there (the next size's on one side, the previous one's on the other): the loss curve's
    own bend between budgets, which a slope interpolated between them cannot follow. Why: a
    depth's loss curve bends where the depth passes its own transition, within a grid step,
    and the correction's error is the same at every seed of a point (its effect on coverage:
    benchmarks/README.md, ``benchmarks/study_coverage.py``).
    """

    def __init__(self, log_n: Sequence[float], losses: Sequence[float]):
        order = np.argsort(log_n)
        self.x = np.asarray(log_n, dtype=float)[order]
        self.losses = y = np.asarray(losses, dtype=float)[order]
        self.slopes = np.gradient(y, self.x) if self.x.size >= 2 else np.zeros_like(self.x)
        self.slope_sds = _bend(self.x, y)

    def slope_at(self, log_n: float) -> float:
        return float(np.interp(log_n, self.x, self.slopes)) if self.x.size else 0.0

    def slope_sd_at(self, log_n: float) -> float:
        return float(np.interp(log_n, self.x, self.slope_sds)) if self.x.size else 0.0


def _bend(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Half the difference of the one-sided slopes at each size (SizeTrend); an end size
    takes its neighbour's; fewer than three sizes show no bend (0)."""
    if x.size < 3:
        return np.zeros_like(x)
    secants = np.diff(y) / np.diff(x)
    inner = 0.5 * np.abs(np.diff(secants))
    return np.concatenate([inner[:1], inner, inner[-1:]])
