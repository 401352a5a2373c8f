"""The one sign rule: when a mean paired Δ counts as a sign (pure: stdlib, scipy).

Every place that calls a sign (the refine loop while it adds seeds, the reported status and N*
of a pair, the report, ``dwtune analyze``) decides with :class:`SignRule`, so a sign printed
anywhere was reached by the same test. A point is positive (the deeper net loses) when
``mean / se > c``, negative when ``mean / se < −c``, else within noise, where ``c`` is the
α-spending boundary of the look (:mod:`dwtune.core.sequential`: ``k`` seeds are look ``k`` of
``max_looks``) turned into a Student-t quantile on the noise's degrees of freedom. So the chance
that a point at a true Δ of 0 is ever given a sign, over all its looks, is at most ``alpha``.

``min_looks``: seeds a point needs before its sign may count. One training cannot tell a loss
spike from a sign, so the refine stage asks for two; a table of one run per shape whose noise
comes from its checkpoints (``dwtune analyze``) is a single look by construction and asks one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dwtune.core import sequential


@dataclass(frozen=True)
class SignRule:
    """Two-sided sign test with error control over repeated looks (module doc)."""

    alpha: float = 0.05  # false-sign rate at a true Δ of 0, over all looks
    max_looks: int = 1  # looks a point may get (refine.max_seeds; 1 for a fixed table)
    min_looks: int = 1  # looks before a sign may count

    def boundary(self, looks: int, dof: float) -> float:
        """|mean|/se a point needs after ``looks`` looks, noise on ``dof`` degrees of freedom."""
        return sequential.boundary(max(looks, 1), self.max_looks, self.alpha, dof)

    def enough(self, looks: int) -> bool:
        return looks >= min(self.min_looks, self.max_looks)

    def sign(self, mean: float, se: float, looks: int, dof: float) -> int:
        """+1 (deeper loses), −1 (deeper wins) or 0 (within noise, or too few looks)."""
        if not (self.enough(looks) and math.isfinite(mean)) or not se > 0:
            return 0
        if abs(mean) <= self.boundary(looks, dof) * se:
            return 0
        return 1 if mean > 0 else -1
