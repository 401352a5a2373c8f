"""Whether a bracketed pair's Δ bends against one smooth crossing around its bracket (pure).

One smooth crossing falls through zero: Δ positive below N*, negative above, and falling
against ln N on both sides of the bracket as across it. Rule (:func:`kinked`): a bracketed
pair's bracket is *kinked* when, on either side, the secant from a bracket end to its nearest
decided neighbour outside the bracket rises against ln N (its slope is the opposite of the
crossing's) by more than ``KINK_Z`` standard errors: Δ climbs towards the bracket before
it falls through zero (a dip before the crossing), or climbs back after it (towards a second
sign change the points do not reach). Guarantee: a kinked pair is flagged in its reason, its
statement and the report's law checks; its N* stays the one rule's estimate, interpolated
across a bracket whose neighbours say Δ is not one straight fall there. A pair whose
decided signs already cross more than once is ``non_monotone``, not kinked. See
docs/statistics.md ("Status, bounds and the statement").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dwtune.core.refine.signs import SignedPoint

# standard errors a secant must rise by to count: one-sided, so a truly straight Δ with normal
# errors trips it on one side of a bracket with probability 1 − Φ(2) ≈ 2.3%
KINK_Z = 2.0


def rises(smaller: SignedPoint, larger: SignedPoint) -> bool:
    """Whether Δ rises from the ``smaller`` size to the ``larger`` against ln N by more than
    ``KINK_Z`` standard errors of the secant's slope (the two se in quadrature over the run)."""
    run = math.log(larger.n) - math.log(smaller.n)
    if run <= 0:
        return False
    slope = (larger.mean - smaller.mean) / run  # nats per e-fold
    se = math.hypot(larger.se, smaller.se) / run
    return slope > KINK_Z * se


def _decided(points: Sequence[SignedPoint]) -> list[SignedPoint]:
    """Points with a decided sign and finite mean, size and se, sorted by size."""
    finite = [
        p
        for p in points
        if p.sign != 0 and p.n > 0 and all(map(math.isfinite, (p.mean, p.se, p.n)))
    ]
    return sorted(finite, key=lambda p: p.n)


def kinked(points: Sequence[SignedPoint], low: float | None, high: float | None) -> bool:
    """Whether the bracket ``[low, high]`` (sizes, the decided signs' bounds) is kinked by the
    module's rule: a bracket end and its nearest decided neighbour outside it, on either
    side, whose secant rises against ln N beyond ``KINK_Z`` standard errors."""
    if low is None or high is None or not low < high:
        return False
    decided = _decided(points)
    # the bounds are the ends' own sizes; the relative slack absorbs their float round trip
    below = [p for p in decided if p.n <= low * (1 + 1e-9)]
    above = [p for p in decided if p.n >= high * (1 - 1e-9)]
    if len(below) >= 2 and rises(below[-2], below[-1]):
        return True
    return len(above) >= 2 and rises(above[0], above[1])
