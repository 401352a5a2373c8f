"""A pair's transition record: one row of transitions.parquet and its one-sentence statement
(pure: numpy).

:func:`make_transition` estimates N* from every point of the pair by the one rule
(:func:`~dwtune.core.refine.estimate.estimate_crossing`); a bracketed pair reports N*, its
68%/95% intervals, σ(ln N*) and ``width_deep_err = width_deep · σ / 2``; any other pair keeps
the bounds its decided signs give. A bracketed pair that stopped on its round cap with its
bracket still wider than ``WIDE`` tolerances (:func:`capped_wide`) reports a 95% interval that
spans the whole bracket and says so in its reason: between its ends only the decided signs
hold, and an estimate interpolated across a wide bracket is no better than its shape. A
bracketed pair whose Δ bends against one smooth crossing beside its bracket
(:func:`kinked_bracket`) says so in its reason and statement. See docs/statistics.md
("Status, bounds and the statement").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.refine.estimate import CrossingEstimate, estimate_crossing
from dwtune.core.refine.kink import kinked
from dwtune.core.refine.points import PairPoint, mark_unstable
from dwtune.core.refine.signs import SignedPoint, noise_prior, sign_rule
from dwtune.core.spec import RefineConfig
from dwtune.core.vocabulary import SizeConvention


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
    capped_wide: bool = False  # stopped on the round cap with a wide bracket (capped_wide())
    kinked: bool = False  # bracketed across a bend (kinked_bracket())

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


WIDE = 2.0  # a bracket wider than this many tolerances (in ln N) is wide at the round cap
CAPPED_WIDE = "the bracket is still wide at the round cap: the 95% interval spans it"
# the statement's closing sentence for such a pair (older transitions.parquet files, written
# before the capped_wide column, keep the fact only here)
CAPPED_SENTENCE = (
    "The pair stopped on its round cap with its bracket still wide, so this interval spans "
    "the bracket: between its ends only the decided signs hold."
)


KINKED = "the bracket is kinked: Δ beside it rises against ln N"
# the statement's closing sentence for a kinked pair (likewise before the kinked column)
KINKED_SENTENCE = (
    "Beside its bracket Δ rises against ln N where one smooth crossing would fall, so this N* "
    "is interpolated across a bend."
)


def kinked_bracket(estimate: CrossingEstimate) -> bool:
    """Whether a bracketed pair's decided points bend against one smooth crossing around its
    bracket (:func:`~dwtune.core.refine.kink.kinked`)."""
    if estimate.status != vocabulary.TransitionStatus.BRACKETED:
        return False
    return kinked(estimate.signed, estimate.bound_low, estimate.bound_high)


def capped_wide(estimate: CrossingEstimate, round_capped: bool, tolerance: float) -> bool:
    """Whether a bracketed pair that stopped on its round cap (``round_capped``: the closing
    step's :attr:`~dwtune.core.refine.steps.Step.round_capped`) has its bracket (the decided
    signs' bounds) wider than ``WIDE · ln(1 + tolerance)`` in ln N."""
    low, high = estimate.bound_low, estimate.bound_high
    if not round_capped or low is None or high is None or low <= 0:
        return False
    return math.log(high / low) > WIDE * math.log1p(tolerance)


def _spanning(estimate: CrossingEstimate) -> CrossingEstimate:
    """``estimate`` with its 95% interval widened to span its bracket (:func:`capped_wide`)."""
    assert estimate.n_star_low is not None and estimate.n_star_high is not None
    assert estimate.bound_low is not None and estimate.bound_high is not None
    low = min(estimate.n_star_low, estimate.bound_low)
    high = max(estimate.n_star_high, estimate.bound_high)
    return dataclasses.replace(estimate, n_star_low=low, n_star_high=high)


def _bound(size: float | None) -> float:
    return math.nan if size is None else float(size)


def _listed(points: Sequence[SignedPoint]) -> str:
    return ", ".join(p.text() for p in points)


def statement(
    pair: tuple[int, int],
    estimate: CrossingEstimate,
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


def _common_fields(
    pair: tuple[int, int],
    points: Sequence[PairPoint],
    estimate: CrossingEstimate,
    said: str,
) -> dict[str, Any]:
    """The fields of a Transition that every status sets, from the pair's points."""
    return dict(
        depth_shallow=pair[0],
        depth_deep=pair[1],
        status=estimate.status,
        seeds=max((p.n for p in points), default=0),
        crossings=estimate.crossings,
        noise_source=estimate.noise_source,
        noise_dof=estimate.noise_dof,
        failures_deep=sum(p.failures_deep for p in points),
        failures_shallow=sum(p.failures_shallow for p in points),
        unstable_deep=sum(len(p.unstable_deep) for p in points),
        unstable_shallow=sum(len(p.unstable_shallow) for p in points),
        statement=said,
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
    round_capped: bool = False,
) -> Transition:
    """The pair's transition: status, N* and its intervals from every point by the one rule
    (module doc); a pair that is not bracketed keeps the bounds its decided signs give."""
    shallow, deep = pair
    points = mark_unstable(points)
    measured = [p.delta_point() for p in points]
    estimate = estimate_crossing(measured, prior=noise_prior(refine), rule=sign_rule(refine))
    capped = capped_wide(estimate, round_capped, refine.tolerance)
    if capped:
        estimate, reason = _spanning(estimate), f"{reason}; {CAPPED_WIDE}"
    bent = kinked_bracket(estimate)
    reason = f"{reason}; {KINKED}" if bent else reason
    said = statement(pair, estimate, estimate.signed, refine.alpha)
    said = f"{said} {CAPPED_SENTENCE}" if capped else said
    said = f"{said} {KINKED_SENTENCE}" if bent else said
    common = _common_fields(pair, points, estimate, said)
    common.update(
        trials=trials,
        rounds=rounds,
        simulated=simulated,
        reason=reason,
        capped_wide=capped,
        kinked=bent,
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
