"""The law design of the refine stage (pure): where a pair's points go when a law predicts N*.

``refine.design: law`` replaces the dense grid (every depth at every ``space.budgets``) by two
sizes per pair, ``N*_law · e^(−reach)`` and ``N*_law · e^(+reach)``, where ``N*_law`` is the
transition size of ``fit.reference``'s law at the pair's deeper depth
(:func:`dwtune.core.projection.transition_size`). If the law is right within ``reach`` e-folds
the two sizes bracket N* at once; the cost of a pair's first points is then
``2·cosh(reach)`` trainings at N* per seed instead of the grid's sum over every budget.

Where the law is off, the pair is censored: every decided sign says N* lies beyond one edge.
The pair then *extends*: its next size lies beyond that edge by the span its points cover
(at least ``2·reach``), so the searched span doubles with every extension, and a law off by
``D`` e-folds costs about ``log2(D / reach)`` extensions. Extensions stop at ``space.budgets``'
range, where the pair stays censored with the bound its signs give.

Inside a bracket the next size is placed by what it can tell about N* under the learned noise
(:func:`interpolated_cut`): the straight line through the bracket ends' mean Δ predicts the
root, and the cut goes where the line expects ``|Δ| = PLAN_Z`` standard errors, just beside
the root on the bracket's wider side. A point at the root itself would show Δ ≈ 0, decide no
sign and bound nothing (the midpoint rule pays that whenever N* lies near the middle); a
decided point beside it moves a bracket end next to N*. Where Δ is smooth the bracket closes
to the root ± that offset within two cuts; the guard (``GUARD`` of the width from either end)
bounds the worst case to a shrink of ``1 − GUARD`` per round (bisection: 1/2). The pair
stops as in the grid design (``refine.tolerance``, ``max_rounds``, the noise floor). A stop on
the estimate's own σ(ln N*) was tried and dropped: stopping when a noisy σ first looks small
picks the realisations whose interval is too narrow (95% coverage fell to 85-90% on two
surfaces of ``benchmarks/coverage.py``).

Every choice here depends on the pair's own points alone (and the law that placed its first
sizes), so a pair's decisions never depend on when other pairs finish, and a resumed study
proposes the same sizes again.

Waves (``refine.waves``): the pairs, ranked by depth, refine in runs one after another. The
first run's sizes come from ``fit.reference``; each later run's from the law fitted on every
pair of the runs before it (:func:`dwtune.core.fit.censored.running_law`, the fit stage's
interval-censored likelihood, censored pairs included), so a reference that is off costs its
extensions in the first run only. The fit is on finished pairs alone, so a resumed study fits
the same law again; the price is time: a run waits for the slowest pair of the one before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dwtune.core.projection import DepthWidthLaw, transition_size

GUARD = 0.25  # least share of the bracket's width between a cut and either bracket end


PLAN_Z = 5.0  # |Δ|/se a cut is placed to show with its first seeds: a sign the rule decides


def law_sizes(law: DepthWidthLaw, deep: int, reach: float) -> tuple[float, float]:
    """A pair's first two sizes (parameters): the law's N* at the deeper depth, e^(∓reach)."""
    centre = math.log(transition_size(law, deep))
    return math.exp(centre - reach), math.exp(centre + reach)


def extension(
    log_ns: Sequence[float], direction: int, reach: float, span: tuple[float, float]
) -> float | None:
    """ln N of a censored pair's next size, beyond its points in ``direction`` (+1: N* lies
    above them, −1: below) by the span they cover (at least ``2·reach``), within ``span``
    (ln of space.budgets' least and greatest); None where the points reach that end already."""
    if not log_ns or direction == 0:
        return None
    low, high = min(log_ns), max(log_ns)
    step = max(2.0 * reach, high - low)
    if direction > 0:
        target = min(high + step, span[1])
        return target if target > high + 1e-9 else None
    target = max(low - step, span[0])
    return target if target < low - 1e-9 else None


def interpolated_cut(
    low: float, high: float, mean_low: float, mean_high: float, se: float = 0.0
) -> float:
    """ln N of the next size inside the bracket ``[low, high]`` (module doc).

    The line through the ends' mean Δ (positive at ``low``, negative at ``high``) puts the root
    at ``r``; a point at ``r`` itself would sit at Δ ≈ 0 and decide no sign, so the cut lies
    ``PLAN_Z · se / slope`` e-folds from ``r`` (where the line expects ``|Δ| = PLAN_Z·se``, ``se``
    the standard error a new point's first seeds give), on the bracket's wider side of ``r``,
    so the bracket shrinks to about ``r`` ± that offset within two cuts. The cut stays at least
    ``GUARD`` of the width from either end; the midpoint where a mean is not a finite number
    of its end's sign."""
    finite = math.isfinite(mean_low) and math.isfinite(mean_high)
    if not finite or mean_low <= 0 or mean_high >= 0 or high <= low:
        return 0.5 * (low + high)
    slope = (mean_low - mean_high) / (high - low)  # nats per e-fold, > 0
    root = low + mean_low / slope
    offset = PLAN_Z * max(se, 0.0) / slope
    cut = root - offset if root - low >= high - root else root + offset
    width = high - low
    return min(max(cut, low + GUARD * width), high - GUARD * width)
