"""Brackets, sign decisions and bisection proposals of the refine stage (pure: numpy).

For a pair of depths ``Ls < Ld`` the refine stage locates ``N*``, where
``Δ(N) = loss_Ld(N) − loss_Ls(N)`` turns from positive (the deeper net loses) to negative. This
module holds the decisions; :mod:`dwtune.study.refine` trains and records (Optuna).

Sequential test: the one sign rule (:class:`dwtune.core.decision.SignRule`, applied by
:func:`dwtune.core.crossing.point_signs`). A point's sign is decided once ``|mean Δ| > c_k ·
se`` where ``c_k`` is the α-spending boundary of look ``k`` (``k`` seeds, ``K =
refine.max_seeds`` looks at two-sided level ``refine.alpha``: :mod:`dwtune.core.sequential`) as
a Student-t quantile on the noise's degrees of freedom, so the chance of declaring a sign at a
true Δ of 0 over all looks is at most α whatever the spec's noise guess. Decisions are
recomputed from the stored Δ whenever the points change (the noise estimate improves as points
are added; unstable trainings are flagged across the pair's points first). Else seeds are added
(at once as many as the current mean suggests, at least one) up to ``max_seeds``; a point still
undecided there is *within noise*. The reported status and N* use the very same signs.

Outcome of a pair from all its points sorted by ``N`` (:func:`dwtune.core.crossing.classify`):
runs of decided signs; one positive run then one negative → ``bracketed`` between the last
positive and the first negative point; one sign only → censored (``undecided`` when points
within noise lie beyond the decided edge); two or more sign changes beyond noise →
``non_monotone``. A point's sign never counts from one seed
(``MIN_DECIDE_SEEDS``, capped at ``max_seeds``): verify and bisect steps start with two. The points
that decide the outcome are first given seeds until decided (``verify`` steps). A bracketed pair
is then *scanned* (``scan`` steps, one round of ``refine.seeds`` each, their sign provisional):
every gap between points wider than ``refine.scan_spacing`` e-folds within ``refine.scan_reach``
e-folds of the bracket gets evenly spaced probes, so a dip of Δ at least that wide is seen and the
pair reported ``non_monotone`` (a probe that looks negative is decisive, hence verified with more
seeds before it counts); then the bracket is bisected in ``ln N`` (``bisect`` steps) until
``N_high / N_low − 1 ≤ refine.tolerance``, or ``refine.max_rounds`` rounds, or the second point
within noise inside the bracket. Before the pair closes, the estimate's kink correction gets
its points and so does the reported N* (:func:`support_probe`: two within the broken stick's
reach and two within ``crossing.PROFILE_REACH`` beside each bracket end, five within the latter
in all, a probe where one lacks; none with ``max_rounds: 0``, which places no new size), and each
decisive point is *re-verified*:
tested again with twice its seeds (at most ``max_seeds``); should its sign not hold, the bracket
moves and bisection resumes.

The reported N*, its 68%/95% intervals and σ(ln N*) come from every point of the pair
(:func:`dwtune.core.crossing.estimate_crossing`); ``width_deep_err = width_deep · σ / 2``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dwtune.core import crossing, design, vocabulary
from dwtune.core.decision import SignRule
from dwtune.core.noise import NoisePrior
from dwtune.core.pair_points import Decision, PairPoint, mark_unstable
from dwtune.core.spec import RefineConfig
from dwtune.core.vocabulary import REVERIFY, Design, SizeConvention, StepKind

# Paired seeds a point needs before its sign counts (capped at refine.max_seeds): one
# training cannot tell a loss spike from a sign, and one spike decided at one seed was the main
# false-sign source on the outliers surface (benchmarks/coverage.py).
MIN_DECIDE_SEEDS = 2


# |mean|/se a point with no boundary yet (one seed) is planned for when seeds are added
PLANNING_Z = 2.0


def sign_rule(refine: RefineConfig) -> SignRule:
    """The study's one sign rule: refine.alpha over refine.max_seeds looks, two seeds first."""
    return SignRule(refine.alpha, refine.max_seeds, MIN_DECIDE_SEEDS)


def noise_prior(refine: RefineConfig) -> NoisePrior:
    """The spec's noise guess and the pseudo-observations it is worth."""
    return NoisePrior(refine.noise_prior, refine.noise_prior_dof)


# --------------------------------------------------------------------------- decisions


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


def decide_points(points: Sequence[PairPoint], refine: RefineConfig) -> list[PairPoint]:
    """Every point's sign by the one rule under the pair's current noise (module doc), after
    the pair's unstable trainings are marked."""
    if not points:
        return []
    points = mark_unstable(points)
    measured = [p.delta_point() for p in points]
    noise = crossing.pair_noise(measured, noise_prior(refine))
    signs = crossing.point_signs(measured, noise, sign_rule(refine))
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


# --------------------------------------------------------------------------- outcome and steps


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


def outcome_of(points: Sequence[PairPoint], max_seeds: int) -> Outcome:
    """Status of sorted, decided points from all of them (module doc)."""
    signs = [_provisional_sign(p, max_seeds) for p in points]
    shape = crossing.classify(signs, [_strong(p, max_seeds) for p in points])
    decided = [i for i, s in enumerate(signs) if s]
    noisy = [p.log_n for p, s in zip(points, signs, strict=True) if s == 0 and p.n]
    if shape.status == vocabulary.TransitionStatus.BRACKETED:
        low, high = (points[i] for i in shape.windows[0][:2])
        return Outcome(shape.status, (low, high), low.log_n, high.log_n, low, high)
    if shape.status == vocabulary.TransitionStatus.NON_MONOTONE:
        ends = sorted({i for window in shape.windows for i in window[:2]})
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


@dataclass(frozen=True)
class Step:
    """What the refine stage does next for a pair."""

    kind: str  # a StepKind
    outcome: Outcome
    point: PairPoint | None = None  # for verify
    log_n: float = math.nan  # for bisect: ln of the budget to train next
    reason: str = ""  # for done: why the pair stopped
    seeds: int = 0  # for verify: seeds the point should have (re-verification)

    @property
    def reverifies(self) -> bool:
        """A verify step that re-tests a point which closes a bracket (its reason REVERIFY)."""
        return self.kind == StepKind.VERIFY and self.reason == REVERIFY


def reverify_seeds(point: PairPoint, max_seeds: int) -> int:
    """Seeds of a decisive point's re-test: twice what it has, at most ``max_seeds``."""
    return min(max_seeds, max(2 * point.n, point.n + 1))


def close(outcome: Outcome, refine: RefineConfig, reason: str) -> Step:
    """Stop, unless a decisive point must first be re-verified with more seeds (module doc)."""
    for point in outcome.decisive:
        if not point.verified and max(point.n, point.requested) < refine.max_seeds:
            seeds = reverify_seeds(point, refine.max_seeds)
            return Step(StepKind.VERIFY, outcome, point=point, seeds=seeds, reason=REVERIFY)
    return Step(StepKind.DONE, outcome, reason=reason)


def decide_seeds(refine: RefineConfig) -> int:
    """Seeds a verify or bisect step starts with: enough for its sign to count."""
    return min(max(refine.seeds, MIN_DECIDE_SEEDS), refine.max_seeds)


WIDTH_RESOLUTION = "width resolution: no legal width between the bracket ends"


def next_step(
    points: Sequence[PairPoint],
    refine: RefineConfig,
    rounds: int,
    width_of: Callable[[float], int] | None = None,
    span: tuple[float, float] | None = None,
) -> Step:
    """Verify an undecided decisive point, else extend a censored pair (law design), else scan
    beside the bracket, else cut it, else close the pair. ``width_of(log_n)``: the deeper
    net's (rounded) width at a size; a probe or cut whose width some point already has would
    learn nothing new. ``span``: ln of space.budgets' range, where extensions stop."""
    widths = {p.width_deep for p in points}

    def taken(log_n: float) -> bool:
        return width_of is not None and width_of(log_n) in widths

    outcome = outcome_of(points, refine.max_seeds)
    pending = [p for p in outcome.decisive if not p.decision.decided and p.n]
    if pending:
        return Step(StepKind.VERIFY, outcome, point=pending[0], seeds=decide_seeds(refine))
    if outcome.status != vocabulary.TransitionStatus.BRACKETED:
        log_n = extension_proposal(points, outcome, refine, span)
        if log_n is not None and not taken(log_n):
            return Step(StepKind.EXTEND, outcome, log_n=log_n, seeds=decide_seeds(refine))
        return close(outcome, refine, outcome.status)
    probe = scan_proposal([p.log_n for p in points], outcome, refine, taken)
    if probe is not None:
        return Step(StepKind.SCAN, outcome, log_n=probe, seeds=refine.seeds)

    def finish(reason: str) -> Step:
        """Close the bracketed pair, once the kink correction of its N* has its points (where
        the stage places new sizes at all: ``max_rounds: 0`` only verifies signs)."""
        if refine.max_rounds > 0:
            usable = [p.log_n for p in points if p.n]
            support = support_probe(usable, outcome, taken, [p.log_n for p in points])
            if support is not None:
                return Step(StepKind.SCAN, outcome, log_n=support, seeds=refine.seeds)
        return close(outcome, refine, reason)

    inside = [
        p
        for p in points
        if p.within_noise(refine.max_seeds) and outcome.low < p.log_n < outcome.high
    ]
    if math.exp(outcome.high - outcome.low) - 1.0 <= refine.tolerance:
        return finish("tolerance reached")
    if rounds >= refine.max_rounds:
        return finish(f"max_rounds ({refine.max_rounds}) reached")
    if len(inside) >= 2:
        return finish("noise floor: Δ within noise at max_seeds")
    log_n = cut_proposal(outcome, refine, [p.log_n for p in inside])
    if taken(log_n):
        return finish(WIDTH_RESOLUTION)
    return Step(StepKind.BISECT, outcome, log_n=log_n, seeds=decide_seeds(refine))


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


def extension_proposal(
    points: Sequence[PairPoint],
    outcome: Outcome,
    refine: RefineConfig,
    span: tuple[float, float] | None,
) -> float | None:
    """ln N of the law design's next size beyond a censored edge (core/design.py); None in
    the grid design, without a span, or where the points reach the span's end."""
    if refine.design != Design.LAW or span is None:
        return None
    direction = censored_direction(outcome) or undecided_lean(points, outcome)
    return design.extension([p.log_n for p in points], direction, refine.reach, span)


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


def cut_proposal(outcome: Outcome, refine: RefineConfig, within_noise: Sequence[float]) -> float:
    """The next size inside the bracket: the law design cuts at the interpolated root of Δ
    (core/design.py), the grid design at the midpoint (:func:`proposal`); a point within
    noise inside the bracket sends both to the midpoint rule."""
    ends = (outcome.low_point, outcome.high_point)
    if refine.design != Design.LAW or within_noise or None in ends:
        return proposal(outcome.low, outcome.high, within_noise)
    assert outcome.low_point is not None and outcome.high_point is not None
    low_end, high_end = outcome.low_point.decision, outcome.high_point.decision
    # the se a new point's first seeds give: the ends' per-seed paired sd over √seeds
    sd = max(low_end.sd, high_end.sd)
    se = sd / math.sqrt(decide_seeds(refine)) if math.isfinite(sd) else 0.0
    return design.interpolated_cut(outcome.low, outcome.high, low_end.mean, high_end.mean, se)


SUPPORT_PLACES = (0.5, 0.75, 0.25)  # of a reach beside a bracket end, tried in turn


def support_probe(
    log_ns: Sequence[float],
    outcome: Outcome,
    taken: Callable[[float], bool] | None = None,
    tried: Sequence[float] = (),
) -> float | None:
    """A probe beside the bracket where the estimate of N* lacks its points, else None: first
    the kink correction's (``crossing.STICK_MIN_SIDE`` on each side, the end included, within
    the broken stick's reach), then the reported N*'s (as many on each side within
    ``crossing.PROFILE_REACH``, ``crossing.ESTIMATE_MIN_POINTS`` within it in all; the probe
    goes to the side with fewer). Without the first, the asymmetric surface's 95% interval held
    the truth in 85% of the pairs that lacked them (benchmarks/coverage.py); without the
    second, a bracket the noise floor left wide reports the chord, which erred 1.3
    (depth_noise) to 2.4 (flat) times the line's there. One round of ``refine.seeds``, its sign
    provisional as a scan probe's. ``tried``: sizes trained already whose points count for
    nothing here (every seed failed); proposing one again would train the same nets again, for
    ever where ``taken`` cannot tell (no width rounding)."""
    low, high = outcome.low, outcome.high
    x = np.asarray(log_ns, dtype=float)
    needs = (
        (crossing.stick_reach(low, high), 0),  # the kink correction's stick
        (crossing.PROFILE_REACH, crossing.ESTIMATE_MIN_POINTS),  # the reported N*'s line
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
    """(bracket end, direction) of each side where fewer than ``crossing.STICK_MIN_SIDE`` of
    the sizes ``x`` lie within ``reach``; where both have them but fewer than ``min_points``
    lie within ``reach`` of the bracket in all, the side with fewer."""
    below, above = crossing.stick_sides(x, low, high, reach)
    ends = ((low, -1.0), (high, 1.0))
    short = [
        end
        for end, count in zip(ends, (below, above), strict=True)
        if count < crossing.STICK_MIN_SIDE
    ]
    if short or crossing.within_reach(x, low, high, reach).sum() >= min_points:
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


def proposal(low: float, high: float, within_noise: Sequence[float]) -> float:
    """Midpoint in ln N of the bracket, or of its wider side of a point within noise."""
    if within_noise:
        middle = within_noise[0]
        low, high = (low, middle) if middle - low >= high - middle else (middle, high)
    return 0.5 * (low + high)


# --------------------------------------------------------------------------- transitions


@dataclass(frozen=True)
class Transition:
    """One row of transitions.parquet (see dwtune.outputs.schemas.TRANSITION_SCHEMA)."""

    depth_shallow: int
    depth_deep: int
    status: str
    n_star: float
    n_star_low: float  # 95% interval (bracketed); a censored pair's known bound
    n_star_high: float
    width_deep: float
    width_deep_err: float
    width_shallow: float
    trials: int  # new trainings the refine stage spent on this pair
    seeds: int  # most seeds used at one point
    rounds: int  # bisection rounds
    simulated: bool
    n_star_low_68: float = math.nan  # 68% interval
    n_star_high_68: float = math.nan
    sigma_ln: float = math.nan  # σ(ln N*)
    crossings: tuple[float, ...] = ()  # every sign change (non_monotone lists them all)
    noise_source: str = vocabulary.NOISE_MEASURED
    failures_deep: int = 0  # trainings of the deeper net that diverged, failed or went unstable
    failures_shallow: int = 0
    reason: str = ""  # why the pair stopped (console and report; not a column)
    noise_dof: float = 0.0  # degrees of freedom the seeds gave the noise (the prior's excluded)
    unstable_deep: int = 0  # of the failures, trainings flagged unstable (pair_points)
    unstable_shallow: int = 0
    statement: str = ""  # the pair's answer in one sentence (transitions.statement)

    @property
    def pair(self) -> str:
        return f"{self.depth_shallow}-{self.depth_deep}"

    @property
    def log_n_sigma(self) -> float:
        """σ of ln N* (module doc)."""
        return self.sigma_ln


def width_at(points: Sequence[PairPoint], log_n: float, depth: int, convention: str) -> float:
    """Width of ``depth`` at size ``exp(log_n)``: the paper's sqrt(N/(12·L)), or under the total
    convention the deeper widths of the points interpolated in ln N."""
    if convention != SizeConvention.TOTAL:
        return math.sqrt(math.exp(log_n) / (12.0 * depth))
    x = [p.log_n for p in points]
    return math.exp(float(np.interp(log_n, x, [math.log(p.width_deep) for p in points])))


def _bound(size: float | None) -> float:
    return math.nan if size is None else float(size)


@dataclass(frozen=True)
class SignedPoint:
    """One point as the rule judged it: size (the pair's axis), mean Δ, its se, its sign."""

    n: float
    mean: float
    se: float
    sign: int

    def text(self) -> str:
        return f"{self.mean:+.3f} ± {self.se:.3f} at {self.n:.3g}"


def signed_points(points: Sequence[crossing.DeltaPoint], refine: RefineConfig) -> list[SignedPoint]:
    """Every point's mean Δ, se and sign by the one rule (what the statement quotes)."""
    points = sorted((p for p in points if p.deltas), key=lambda p: p.n)
    if not points:
        return []
    noise = crossing.pair_noise(points, noise_prior(refine))
    signs = crossing.point_signs(points, noise, sign_rule(refine))
    return [
        SignedPoint(p.n, float(m), float(e), int(s))
        for p, m, e, s in zip(points, signs.means, signs.se, signs.signs, strict=True)
    ]


def _listed(points: Sequence[SignedPoint]) -> str:
    return ", ".join(p.text() for p in points)


def statement(
    pair: tuple[int, int],
    estimate: crossing.CrossingEstimate,
    points: Sequence[SignedPoint],
    alpha: float,
) -> str:
    """The pair's answer in one sentence, decided by the one rule: a bracketed N* with its 95%
    interval, a one-sided bound, or why there is none (what run prints first, and report.md)."""
    shallow, deep = pair
    nets = f"the {deep}-layer net {{}} the {shallow}-layer net of the same size"
    rule = f"each sign decided at α = {alpha:g}"
    positive = [p for p in points if p.sign > 0]
    negative = [p for p in points if p.sign < 0]
    quiet = [p for p in points if p.sign == 0]
    status = estimate.status
    if status == vocabulary.TransitionStatus.BRACKETED:
        return (
            f"N* = {estimate.n_star:.3g}, 95% interval [{estimate.n_star_low:.3g}, "
            f"{estimate.n_star_high:.3g}]: {nets.format('loses to')} below it "
            f"(Δ = {_listed(positive[-1:])}) and beats it above (Δ = {_listed(negative[:1])}); "
            f"{rule}."
        )
    if status == vocabulary.TransitionStatus.NON_MONOTONE:
        sizes = ", ".join(f"{n:.3g}" for n in estimate.crossings)
        return f"No single N*: Δ changes sign more than once (near N = {sizes}); {rule}."
    if estimate.bound_low is not None:
        above = [p for p in quiet if p.n > estimate.bound_low]
        rest = f"; above it Δ is within noise ({_listed(above)})" if above else ""
        return (
            f"N* > {estimate.bound_low:.3g} at 95%: {nets.format('loses to')} at every size up "
            f"to {estimate.bound_low:.3g} (Δ = {_listed(positive)}){rest}; {rule}."
        )
    if estimate.bound_high is not None:
        below = [p for p in quiet if p.n < estimate.bound_high]
        rest = f"; below it Δ is within noise ({_listed(below)})" if below else ""
        return (
            f"N* < {estimate.bound_high:.3g} at 95%: {nets.format('beats')} at every size "
            f"from {estimate.bound_high:.3g} on (Δ = {_listed(negative)}){rest}; {rule}."
        )
    return (
        f"Undecided: Δ is within noise at every size measured ({_listed(points)}); no sign is "
        f"decided at α = {alpha:g}, so nothing bounds N*."
    )


def make_transition(
    pair: tuple[int, int],
    points: Sequence[PairPoint],
    refine: RefineConfig,
    *,
    trials: int,
    rounds: int,
    simulated: bool,
    reason: str = "",
    convention: str = SizeConvention.NON_EMBEDDING.value,
) -> Transition:
    """The pair's transition: status, N* and its intervals from every point by the one rule
    (module doc); a pair that is not bracketed keeps the bounds its decided signs give."""
    shallow, deep = pair
    points = mark_unstable(points)
    measured = [p.delta_point() for p in points]
    estimate = crossing.estimate_crossing(
        measured, prior=noise_prior(refine), rule=sign_rule(refine)
    )
    said = statement(pair, estimate, signed_points(measured, refine), refine.alpha)
    common: dict[str, Any] = dict(  # the fields of a Transition that every status sets
        depth_shallow=shallow,
        depth_deep=deep,
        status=estimate.status,
        trials=trials,
        seeds=max((p.n for p in points), default=0),
        rounds=rounds,
        simulated=simulated,
        reason=reason,
        crossings=estimate.crossings,
        noise_source=estimate.noise_source,
        noise_dof=estimate.noise_dof,
        failures_deep=sum(p.failures_deep for p in points),
        failures_shallow=sum(p.failures_shallow for p in points),
        unstable_deep=sum(len(p.unstable_deep) for p in points),
        unstable_shallow=sum(len(p.unstable_shallow) for p in points),
        statement=said,
    )
    if estimate.status != vocabulary.TransitionStatus.BRACKETED:
        return Transition(
            n_star=math.nan,
            n_star_low=_bound(estimate.bound_low),
            n_star_high=_bound(estimate.bound_high),
            width_deep=math.nan,
            width_deep_err=math.nan,
            width_shallow=math.nan,
            **common,
        )
    # a bracketed estimate carries N*, its 95% and 68% intervals and σ(ln N*)
    assert estimate.n_star is not None and estimate.sigma_ln is not None
    assert estimate.n_star_low is not None and estimate.n_star_high is not None
    assert estimate.n_star_low_68 is not None and estimate.n_star_high_68 is not None
    log_star = math.log(estimate.n_star)
    width_deep = width_at(points, log_star, deep, convention)
    return Transition(
        n_star=estimate.n_star,
        n_star_low=estimate.n_star_low,
        n_star_high=estimate.n_star_high,
        n_star_low_68=estimate.n_star_low_68,
        n_star_high_68=estimate.n_star_high_68,
        sigma_ln=estimate.sigma_ln,
        width_deep=width_deep,
        width_deep_err=0.5 * width_deep * estimate.sigma_ln,
        width_shallow=width_deep * math.sqrt(deep / shallow),
        **common,
    )
