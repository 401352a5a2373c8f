"""The step policy of the refine stage: what a pair does next (pure).

From a pair's decided points (:mod:`~dwtune.core.refine.outcome`), in this order
(docs/statistics.md, "Where the next size goes, and when a pair stops"):

1. ``verify``: a decisive point (a bracket end, a censored pair's edge, a crossing's end) still
   undecided gets seeds, at least ``MIN_DECIDE_SEEDS``, up to ``refine.max_seeds``;
2. ``extend``: a pair that is not bracketed goes beyond its decided edge where its design
   extends (:mod:`~dwtune.core.refine.design`); where it extends no further, a point within
   noise beyond its decided edge more than ``refine.tolerance`` away has that gap cut at its
   midpoint (rounds allowing); else it closes with its status;
3. ``scan``: a bracketed pair's gaps beside the bracket get probes
   (:mod:`~dwtune.core.refine.probes`), their signs provisional;
4. ``bisect``: the bracket is cut where the design places its cut, until
   ``N_high/N_low − 1 ≤ refine.tolerance``, the design's round cap
   (:meth:`~dwtune.core.refine.design.RefineDesign.round_cap`), two points within
   noise inside the bracket, or no legal width between its ends;
5. before closing, the N* estimate's support probes, and each decisive point is re-verified
   with twice its seeds (at most ``max_seeds``); a sign that does not hold moves the bracket.

A step is a pure function of the pair's points and its rounds, so a resumed study plans the
same steps again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dwtune.core import vocabulary
from dwtune.core.refine.design import RefineDesign
from dwtune.core.refine.outcome import (
    Outcome,
    PairState,
    judge,
    outcome_of,
)
from dwtune.core.refine.points import Decision, PairPoint
from dwtune.core.refine.probes import scan_proposal, support_probe
from dwtune.core.refine.signs import MIN_DECIDE_SEEDS
from dwtune.core.spec import RefineConfig
from dwtune.core.vocabulary import REVERIFY, StepKind

# |mean|/se a point with no boundary yet (one seed) is planned for when seeds are added
PLANNING_Z = 2.0


def seeds_wanted(decision: Decision, n: int, refine: RefineConfig) -> int:
    """Seeds to have next at an undecided point: enough for its current |mean| (capped)."""
    z = decision.boundary if math.isfinite(decision.boundary) else PLANNING_Z
    if math.isfinite(decision.mean) and decision.mean != 0 and decision.sd > 0:
        needed = math.ceil((z * decision.sd / abs(decision.mean)) ** 2)
    else:
        needed = refine.max_seeds
    return min(refine.max_seeds, max(n + 1, needed))


def point_done(point: PairPoint, kind: str, seeds: int, refine: RefineConfig) -> bool:
    """Whether a point being trained needs no more seeds: decided, at ``max_seeds``, or a scan
    probe (one round of seeds: its sign is provisional, verified only if it matters)."""
    return point.decision.decided or seeds >= refine.max_seeds or kind == StepKind.SCAN


def seed_sequence(grid_seeds: Sequence[int], count: int) -> tuple[int, ...]:
    """The grid's seeds first, then new ones counting up: at least ``count`` seeds."""
    fresh = itertools.count(max(grid_seeds, default=-1) + 1)
    extra = max(count - len(grid_seeds), 0)
    return (*grid_seeds, *itertools.islice(fresh, extra))


@dataclass(frozen=True)
class Step:
    """What the refine stage does next for a pair."""

    kind: str  # a StepKind
    outcome: Outcome
    point: PairPoint | None = None  # for verify
    log_n: float = math.nan  # for bisect: ln of the budget to train next
    reason: str = ""  # for done: why the pair stopped, in words for people (no stage parses it)
    seeds: int = 0  # for verify: seeds the point should have (re-verification)
    round_capped: bool = False  # for done: the pair stopped on its round cap (capped_wide)

    @property
    def reverifies(self) -> bool:
        """A verify step that re-tests a point which closes a bracket (its reason REVERIFY)."""
        return self.kind == StepKind.VERIFY and self.reason == REVERIFY


def reverify_seeds(point: PairPoint, max_seeds: int) -> int:
    """Seeds of a decisive point's re-test: twice what it has, at most ``max_seeds``."""
    return min(max_seeds, max(2 * point.n, point.n + 1))


def close(outcome: Outcome, refine: RefineConfig, reason: str, round_capped: bool = False) -> Step:
    """Stop, unless a decisive point must first be re-verified with more seeds (module doc)."""
    for point in outcome.decisive:
        if not point.verified and max(point.n, point.requested) < refine.max_seeds:
            seeds = reverify_seeds(point, refine.max_seeds)
            return Step(StepKind.VERIFY, outcome, point=point, seeds=seeds, reason=REVERIFY)
    return Step(StepKind.DONE, outcome, reason=reason, round_capped=round_capped)


def decide_seeds(refine: RefineConfig) -> int:
    """Seeds a verify or bisect step starts with: enough for its sign to count."""
    return min(max(refine.seeds, MIN_DECIDE_SEEDS), refine.max_seeds)


WIDTH_RESOLUTION = "width resolution: no legal width between the bracket ends"


def round_cap_reason(cap: int) -> str:
    """Why a pair stopped on its round cap, in words; the fact itself travels as
    :attr:`Step.round_capped` (a stage that acts on how a pair stopped reads fields, never
    these words, which may change freely)."""
    return f"max_rounds ({cap}) reached"


def undecided_gap(points: Sequence[PairPoint], outcome: Outcome, tolerance: float) -> float | None:
    """ln N of the midpoint between a pair's decided edge and its nearest point within noise
    beyond that edge, where the two lie more than ``tolerance`` apart (``N_far/N_edge − 1``);
    None for a bracketed pair, a pair without one decided edge or without such a point.

    Why: a pair whose far point is undecided holds N* (or a Δ too small to sign) in that gap;
    leaving it uncut reports a one-sided bound where one more size would bracket N*."""
    if outcome.status == vocabulary.TransitionStatus.BRACKETED:
        return None
    if (outcome.low_point is None) == (outcome.high_point is None):
        return None
    edge = outcome.low_point or outcome.high_point
    assert edge is not None
    side = 1.0 if outcome.low_point is not None else -1.0
    beyond = [
        p.log_n
        for p in points
        if p.n and not p.decision.decided and side * (p.log_n - edge.log_n) > 0
    ]
    if not beyond:
        return None
    far = min(beyond, key=lambda x: abs(x - edge.log_n))
    if abs(far - edge.log_n) <= math.log1p(tolerance):
        return None
    return 0.5 * (far + edge.log_n)


def plan_step(
    points: Sequence[PairPoint],
    refine: RefineConfig,
    rounds: int,
    width_of: Callable[[float], int] | None = None,
    span: tuple[float, float] | None = None,
    *,
    design: RefineDesign,
) -> Step:
    """The pair's next step from its points as they stand (sorted, signs not yet tested): the
    points judged once (:func:`~dwtune.core.refine.outcome.judge`), then the policy."""
    state = judge(points, refine)
    return policy(state, refine, rounds, width_of, span, design=design)


def next_step(
    points: Sequence[PairPoint],
    refine: RefineConfig,
    rounds: int,
    width_of: Callable[[float], int] | None = None,
    span: tuple[float, float] | None = None,
    *,
    design: RefineDesign,
) -> Step:
    """:func:`policy` on points whose signs are decided already."""
    state = PairState(tuple(points), outcome_of(points, refine.max_seeds))
    return policy(state, refine, rounds, width_of, span, design=design)


def policy(
    state: PairState,
    refine: RefineConfig,
    rounds: int,
    width_of: Callable[[float], int] | None = None,
    span: tuple[float, float] | None = None,
    *,
    design: RefineDesign,
) -> Step:
    """Verify an undecided decisive point, else extend a censored pair (where the design
    extends), else scan beside the bracket, else cut it where the design cuts, else close the
    pair. ``width_of(log_n)``: the deeper net's (rounded) width at a size; a probe or cut whose
    width some point already has would learn nothing new. ``span``: ln of space.budgets'
    range, where extensions stop."""
    points, outcome = state.points, state.outcome
    widths = {p.width_deep for p in points}

    def taken(log_n: float) -> bool:
        return width_of is not None and width_of(log_n) in widths

    pending = [p for p in outcome.decisive if not p.decision.decided and p.n]
    if pending:
        return Step(StepKind.VERIFY, outcome, point=pending[0], seeds=decide_seeds(refine))
    cap = design.round_cap(points, refine.max_rounds)
    if outcome.status != vocabulary.TransitionStatus.BRACKETED:
        log_n = design.extension(points, outcome, span)
        if log_n is not None and not taken(log_n):
            return Step(StepKind.EXTEND, outcome, log_n=log_n, seeds=decide_seeds(refine))
        gap = undecided_gap(points, outcome, refine.tolerance) if rounds < cap else None
        if gap is not None and not taken(gap):
            return Step(StepKind.CUT, outcome, log_n=gap, seeds=decide_seeds(refine))
        return close(outcome, refine, outcome.status)
    probe = scan_proposal([p.log_n for p in points], outcome, refine, taken)
    if probe is not None:
        return Step(StepKind.SCAN, outcome, log_n=probe, seeds=refine.seeds)

    def finish(reason: str, round_capped: bool = False) -> Step:
        """Close the bracketed pair, once the kink correction of its N* has its points (where
        the stage places new sizes at all: ``max_rounds: 0`` only verifies signs)."""
        if refine.max_rounds > 0:
            usable = [p.log_n for p in points if p.n]
            support = support_probe(usable, outcome, taken, [p.log_n for p in points])
            if support is not None:
                return Step(StepKind.SCAN, outcome, log_n=support, seeds=refine.seeds)
        return close(outcome, refine, reason, round_capped)

    inside = [
        p
        for p in points
        if p.within_noise(refine.max_seeds) and outcome.low < p.log_n < outcome.high
    ]
    if math.exp(outcome.high - outcome.low) - 1.0 <= refine.tolerance:
        return finish("tolerance reached")
    if rounds >= cap:
        return finish(round_cap_reason(cap), round_capped=True)
    if len(inside) >= 2:
        return finish("noise floor: Δ within noise at max_seeds")
    log_n = design.cut(outcome, [p.log_n for p in inside], decide_seeds(refine))
    if taken(log_n):
        return finish(WIDTH_RESOLUTION)
    return Step(StepKind.CUT, outcome, log_n=log_n, seeds=decide_seeds(refine))
