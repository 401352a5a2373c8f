"""Probes beside a bracket: the scan for a second sign change and the support the N*
estimate needs (pure: numpy).

- Scan (:func:`scan_proposal`): every gap between points wider than ``refine.scan_spacing``
  e-folds within ``refine.scan_reach`` of the bracket gets evenly spaced probes, nearest the
  bracket first, so a dip of Δ at least that wide is seen.
- Support (:func:`support_probe`): before a bracketed pair closes, the kink correction gets
  ``STICK_MIN_SIDE`` points on each side within the stick's reach and the reported N* its
  ``ESTIMATE_MIN_POINTS`` within ``PROFILE_REACH`` (:mod:`~dwtune.core.refine.stick`).

See docs/statistics.md ("Where the next size goes, and when a pair stops").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from dwtune.core.refine import stick
from dwtune.core.refine.outcome import Outcome
from dwtune.core.spec import RefineConfig

SUPPORT_PLACES = (0.5, 0.75, 0.25)  # of a reach beside a bracket end, tried in turn


def support_probe(
    log_ns: Sequence[float],
    outcome: Outcome,
    taken: Callable[[float], bool] | None = None,
    tried: Sequence[float] = (),
) -> float | None:
    """A probe beside the bracket where the estimate of N* lacks its points, else None: first
    the kink correction's (``stick.STICK_MIN_SIDE`` on each side, the end included, within
    the broken stick's reach), then the reported N*'s (as many on each side within
    ``stick.PROFILE_REACH``, ``stick.ESTIMATE_MIN_POINTS`` within it in all; the probe
    goes to the side with fewer). Without the first, a kinked Δ's interval misses its kink
    correction; without the second, a bracket the noise floor left wide reports the chord,
    which errs more than the line there (benchmarks/README.md, coverage.py). One round of
    ``refine.seeds``, its sign provisional as a scan probe's. ``tried``: sizes trained already
    whose points count for nothing here (every seed failed); proposing one again would train
    the same nets again, for ever where ``taken`` cannot tell (no width rounding)."""
    low, high = outcome.low, outcome.high
    x = np.asarray(log_ns, dtype=float)
    needs = (
        (stick.stick_reach(low, high), 0),  # the kink correction's stick
        (stick.PROFILE_REACH, stick.ESTIMATE_MIN_POINTS),  # the reported N*'s line
    )
    for reach, min_points in needs:
        for end, side in lacking_sides(x, low, high, reach, min_points):
            for share in SUPPORT_PLACES:
                probe = end + side * share * reach
                new = all(abs(probe - other) > 1e-9 for other in (*log_ns, *tried))
                if new and (taken is None or not taken(probe)):
                    return probe
    return None


def lacking_sides(
    x: np.ndarray, low: float, high: float, reach: float, min_points: int
) -> list[tuple[float, float]]:
    """(bracket end, direction) of each side where fewer than ``stick.STICK_MIN_SIDE`` of
    the sizes ``x`` lie within ``reach``; where both have them but fewer than ``min_points``
    lie within ``reach`` of the bracket in all, the side with fewer."""
    below, above = stick.stick_sides(x, low, high, reach)
    ends = ((low, -1.0), (high, 1.0))
    short = [
        end for end, count in zip(ends, (below, above), strict=True) if count < stick.STICK_MIN_SIDE
    ]
    if short or stick.within_reach(x, low, high, reach).sum() >= min_points:
        return short
    return [ends[0] if below <= above else ends[1]]


def scan_proposal(
    log_ns: Sequence[float],
    outcome: Outcome,
    refine: RefineConfig,
    taken: Callable[[float], bool] | None = None,
) -> float | None:
    """The next scan probe (module doc), or None when every gap beside the bracket within
    ``scan_reach`` e-folds is at most ``scan_spacing`` wide. A gap of width g gets
    ceil(g / spacing) − 1 evenly spaced probes, placed one at a time from its lower end (so a
    1.15 e-fold grid gap at spacing 0.4 gets two probes 0.38 e-folds apart)."""
    if not refine.scan_spacing or not log_ns:
        return None
    xs = sorted(set(log_ns))
    floor, ceiling = max(outcome.low - refine.scan_reach, xs[0]), outcome.high + refine.scan_reach
    ceiling = min(ceiling, xs[-1])
    gaps = []
    for a, b in itertools.pairwise(xs):
        a, b = max(a, floor), min(b, ceiling)
        inside = outcome.low <= a and b <= outcome.high  # the bisection's business
        if b - a > refine.scan_spacing * (1 + 1e-9) and not inside:
            gaps.append((min(abs(a - outcome.low), abs(b - outcome.high)), a, b))
    for _, a, b in sorted(gaps):  # nearest the bracket first
        probe = a + (b - a) / math.ceil((b - a) / refine.scan_spacing)
        if taken is None or not taken(probe):
            return probe
    return None
