"""Where a pair stands: each point's sign under the pair's current noise, and the pair's
outcome (status, decisive points, bracket) from all of them (pure: numpy).

:func:`decide_points` marks the pair's unstable trainings, learns the pair's noise once and
applies the one sign rule to every point; :func:`outcome_of` reads the decided points
(an undecided point that may still get seeds counts by its mean's sign, so a provisional
sign is verified, never dropped untested). See docs/statistics.md ("One sign rule",
"Status, bounds and the statement").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.refine.points import Decision, PairPoint, mark_unstable
from dwtune.core.refine.signs import classify, noise_prior, pair_noise, point_signs, sign_rule
from dwtune.core.spec import RefineConfig


def decide_points(points: Sequence[PairPoint], refine: RefineConfig) -> list[PairPoint]:
    """Every point's sign by the one rule under the pair's current noise (module doc), after
    the pair's unstable trainings are marked."""
    if not points:
        return []
    points = mark_unstable(points)
    measured = [p.delta_point() for p in points]
    noise = pair_noise(measured, noise_prior(refine))
    signs = point_signs(measured, noise, sign_rule(refine))
    decided = []
    for i, point in enumerate(points):
        if not point.n:
            decision = Decision(math.nan, math.nan, float(noise.sd[i]), False, signs.bounds[i])
        else:
            decision = Decision(
                float(signs.means[i]),
                float(signs.se[i]),
                float(noise.sd[i]),
                bool(signs.signs[i] != 0) or _settled_early(point, float(signs.means[i])),
                float(signs.bounds[i]),
                float(signs.confirm[i]),
            )
        decided.append(replace(point, decision=decision))
    return decided


def _settled_early(point: PairPoint, mean: float) -> bool:
    """A point whose trainings the early rule stopped keeps that rule's sign (its mean, the
    rule's end estimate, has it); it gets no more seeds."""
    return point.early_sign != 0 and int(np.sign(mean)) == point.early_sign


@dataclass(frozen=True)
class Outcome:
    """Where the pair stands: status, the points that decide it and the bracket."""

    status: str
    decisive: tuple[PairPoint, ...]  # the bracket ends, a censored pair's edge, each crossing's
    low: float = math.nan  # ln N bounds known for N*
    high: float = math.nan
    low_point: PairPoint | None = None
    high_point: PairPoint | None = None


def _provisional_sign(point: PairPoint, max_seeds: int) -> int:
    """Decided sign; an undecided point that may still get seeds counts by its mean's sign."""
    if point.decision.decided or not point.n:
        return point.decision.sign
    return 0 if point.within_noise(max_seeds) else int(math.copysign(1, point.decision.mean))


def _strong(point: PairPoint, max_seeds: int) -> bool:
    """Beyond noise by Z_CONFIRM; a point that may still get seeds counts as strong until its
    seeds are in (so a provisional sign is verified, never dropped untested)."""
    if not point.decision.decided:
        return bool(point.n) and not point.within_noise(max_seeds)
    ratio = abs(point.decision.mean) / point.decision.se if point.decision.se > 0 else math.inf
    finite = any(math.isfinite(d) for d in point.deltas)  # failures alone: not beyond noise
    return finite and ratio >= point.decision.confirm


@dataclass(frozen=True)
class PairState:
    """A pair's points as they stand, judged once: each point's sign under the pair's noise,
    and the pair's outcome from all of them."""

    points: tuple[PairPoint, ...]  # sorted, each sign decided
    outcome: Outcome


def judge(points: Sequence[PairPoint], refine: RefineConfig) -> PairState:
    """The pair's points judged once: the sign rule and the noise built once for this state of
    its points (:func:`decide_points`), then the outcome read from them (:func:`outcome_of`)."""
    decided = decide_points(points, refine)
    return PairState(tuple(decided), outcome_of(decided, refine.max_seeds))


def outcome_of(points: Sequence[PairPoint], max_seeds: int) -> Outcome:
    """Status of sorted, decided points from all of them (module doc)."""
    signs = [_provisional_sign(p, max_seeds) for p in points]
    shape = classify(signs, [_strong(p, max_seeds) for p in points])
    decided = [i for i, s in enumerate(signs) if s]
    noisy = [p.log_n for p, s in zip(points, signs, strict=True) if s == 0 and p.n]
    if shape.status == vocabulary.TransitionStatus.BRACKETED:
        window = shape.windows[0]
        low, high = points[window.before], points[window.after]
        return Outcome(shape.status, (low, high), low.log_n, high.log_n, low, high)
    if shape.status == vocabulary.TransitionStatus.NON_MONOTONE:
        ends = sorted({i for window in shape.windows for i in (window.before, window.after)})
        return Outcome(shape.status, tuple(points[i] for i in ends))
    if shape.status == vocabulary.TransitionStatus.CENSORED_HIGH:
        edge = points[decided[-1]]
        return Outcome(shape.status, (edge,), edge.log_n, math.nan, edge, None)
    if shape.status == vocabulary.TransitionStatus.CENSORED_LOW:
        edge = points[decided[0]]
        return Outcome(shape.status, (edge,), math.nan, edge.log_n, None, edge)
    if not decided:
        return Outcome(shape.status, (), min(noisy, default=math.nan), max(noisy, default=math.nan))
    if signs[decided[0]] > 0:
        edge = points[decided[-1]]
        return Outcome(shape.status, (edge,), edge.log_n, max(noisy, default=math.nan), edge, None)
    edge = points[decided[0]]
    return Outcome(shape.status, (edge,), min(noisy, default=math.nan), edge.log_n, None, edge)


def censored_direction(outcome: Outcome) -> int:
    """+1 where every decided sign puts N* above the points, −1 below, 0 where they do not
    point one way (bracketed, non_monotone, nothing decided)."""
    if outcome.status == vocabulary.TransitionStatus.BRACKETED:
        return 0
    if outcome.low_point is not None and outcome.high_point is None:
        return 1
    if outcome.high_point is not None and outcome.low_point is None:
        return -1
    return 0


def undecided_lean(points: Sequence[PairPoint], outcome: Outcome) -> int:
    """Where a pair none of whose points has a decided sign goes looking (the law design): its
    first sizes lay so near N* that Δ is within noise at both, so the design widens towards the
    side its mean Δ leans to (+1: positive, N* above), then brackets as a censored pair would;
    0 where some sign is decided (censored or non_monotone: not undecided) or no Δ was measured."""
    if outcome.status != vocabulary.TransitionStatus.UNDECIDED:
        return 0
    if any(p.decision.decided for p in points):
        return 0
    means = [(p.decision.mean, p.n) for p in points if p.n and math.isfinite(p.decision.mean)]
    if not means:
        return 0
    lean = sum(mean * n for mean, n in means)
    return 1 if lean >= 0 else -1
