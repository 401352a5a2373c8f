"""An early sign decision for a pair point from partial validation curves (pure: numpy, scipy).

A pair point trains a shallower and a deeper net at one size with paired seeds and decides the
sign of the end-of-training Δ = loss(deeper) − loss(shallower). Often that sign is settled long
before the end: this rule predicts it from the two nets' partial curves of every seed and says
when the prediction may stop the trainings.

Input: the paired Δ of each seed at the eval steps reported so far (both nets evaluated at the
same steps), as fractions ``p`` of the total steps, and the pair's noise of one paired end-Δ
(``seed_sd`` on ``seed_dof`` degrees of freedom: :mod:`dwtune.core.refine.noise`, learned
from seeds).

What the rule assumes (the end is never seen, so it must assume something about it):

1. Over the last ``WINDOW_FRACTION`` of the steps seen so far and the rest of training, the
   seed-mean Δ is a smooth curve plus independent per-eval noise, and it moves monotonically,
   its rate of change not growing (the nets' gap closes or opens at a slowing rate, as a
   transient decays). Then the end Δ lies between its current value ``C`` (the line fitted to
   the window, at the current step) and the line's extrapolation ``E`` to the end: a convex
   decreasing curve lies above the fitted line's extension and below its current value
   (mirrored for an increasing one). A curve whose trend turns after the window (a deeper net
   that only starts to catch up later) breaks this; ``min_fraction`` keeps the first part of
   training, where that is common, from deciding anything.
2. A seed's offset of the end Δ (its data order, initialisation) is already in its partial Δ
   and stays: the mean over ``k`` seeds carries seed variance ``seed_sd² / k``.

The test: the window's Δ of each seed is fitted by a line in ``p``; the residuals, pooled over
seeds, give the per-eval variance ``s²`` on ``k·(m − 2)`` degrees of freedom (``m`` evals in the
window). ``C`` and ``E`` are the seed-mean line at the current ``p`` and at ``p = 1``, each with
``se² = seed_sd² / k + s² · leverage / k`` and Welch-Satterthwaite degrees of freedom. The sign
``s`` is settled only when both ``s·C`` and ``s·E`` exceed ``c · se`` (an intersection of two
tests: its error is at most that of either, so no correction for the pair of them).

Repeated looks: every eval step from ``min_fraction`` of the run to the one before the last is a
look (``K`` of them). Look ``k`` spends ``α(k/K) − α((k−1)/K)`` of the Pocock-type spending
function of :mod:`dwtune.core.refine.sequential`, as a marginal two-sided tail of the Student-t. The
looks of one training are strongly correlated, so the boundaries are not the exact group-
sequential ones; by the union bound the chance that any look settles a wrong sign is still at
most ``alpha`` whatever the correlation (conservative: the exact boundaries would be lower).
A point that is not settled early trains to the end and goes to the end-of-training rule
(:mod:`dwtune.core.refine.signs`), which spends its own ``alpha``; so a point at a true Δ of 0 gets
a sign from either rule at most ``2·alpha`` of the time (union bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from dwtune.core import vocabulary
from dwtune.core.records import TrialRequest, request_spec
from dwtune.core.refine import sequential
from dwtune.core.spec import ExperimentSpec

WINDOW_FRACTION = 0.25  # of the steps seen so far: the evals the trend is fitted to


MIN_WINDOW_EVALS = 3  # a line and a residual need at least three evals per seed


DEFAULT_MIN_FRACTION = 0.3  # of the total steps before a training may be stopped


@dataclass(frozen=True)
class EarlyCall:
    """What the rule says at one look: the settled sign (0: keep training) and its evidence."""

    sign: int  # +1 deeper loses, −1 deeper wins, 0 not settled
    current: float  # C: the seed-mean Δ's fitted value now (nats)
    predicted: float  # E: its trend extrapolated to the end of training (nats)
    se_current: float
    se_predicted: float
    boundary: float  # |value| / se both ends need
    dof: float

    @property
    def settled(self) -> bool:
        return self.sign != 0


NOT_SETTLED = EarlyCall(0, math.nan, math.nan, math.nan, math.nan, math.inf, 0.0)


@dataclass(frozen=True)
class EarlyRule:
    """The early sign rule of the module doc at two-sided level ``alpha`` over its looks."""

    alpha: float = 0.05
    min_fraction: float = DEFAULT_MIN_FRACTION

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha}")
        if not 0 < self.min_fraction < 1:
            raise ValueError(f"min_fraction must be in (0, 1), got {self.min_fraction}")

    def look_steps(self, eval_steps: list[int], total_steps: int) -> list[int]:
        """The eval steps at which the rule may stop the trainings (the last one excluded)."""
        return [s for s in eval_steps if self.min_fraction * total_steps <= s < total_steps]

    def boundary(self, look: int, looks: int, dof: float) -> float:
        """The Student-t boundary of look ``look`` (1-based) of ``looks`` (module doc)."""
        spent = sequential.spent(self.alpha, look / looks) - sequential.spent(
            self.alpha, (look - 1) / looks
        )
        return float(stats.t.isf(spent / 2.0, max(dof, 1e-3)))

    def call(
        self,
        progress: np.ndarray,
        deltas: np.ndarray,
        seed_sd: float,
        seed_dof: float,
        look: int,
        looks: int,
    ) -> EarlyCall:
        """The call at look ``look`` of ``looks`` from ``deltas`` (seeds × evals, nats) at
        ``progress`` (fractions of the total steps, increasing; the last one is now)."""
        if look < 1 or looks < 1 or look > looks:
            return NOT_SETTLED
        fit = trend_fit(np.asarray(progress, float), np.atleast_2d(np.asarray(deltas, float)))
        if fit is None:
            return NOT_SETTLED
        now = float(progress[-1])
        current, se_c, dof_c = fit.at(now, seed_sd, seed_dof)
        predicted, se_e, dof_e = fit.at(1.0, seed_sd, seed_dof)
        dof = min(dof_c, dof_e)
        c = self.boundary(look, looks, dof)
        sign = 0
        for candidate in (1, -1):
            if candidate * current > c * se_c and candidate * predicted > c * se_e:
                sign = candidate
        return EarlyCall(sign, current, predicted, se_c, se_e, c, dof)


@dataclass(frozen=True)
class TrendFit:
    """The seed-mean line of the window's Δ, its per-eval residual variance and its design."""

    intercept: float
    slope: float
    residual_var: float  # s² per eval per seed (nats²)
    residual_dof: float
    seeds: int
    x_mean: float
    sxx: float
    evals: int
    seed_intercepts: np.ndarray
    seed_slopes: np.ndarray

    def at(self, p: float, seed_sd: float, seed_dof: float) -> tuple[float, float, float]:
        """(value, se, Welch-Satterthwaite dof) of the seed-mean line at progress ``p``."""
        leverage = 1.0 / self.evals + (p - self.x_mean) ** 2 / self.sxx
        seed_part = seed_sd**2 / self.seeds
        fit_part = self.residual_var * leverage / self.seeds
        variance = seed_part + fit_part
        denominator = seed_part**2 / max(seed_dof, 1e-9) + fit_part**2 / self.residual_dof
        dof = variance**2 / denominator if denominator > 0 else math.inf
        return self.intercept + self.slope * p, math.sqrt(variance), dof


def trend_fit(progress: np.ndarray, deltas: np.ndarray) -> TrendFit | None:
    """The line through the last ``WINDOW_FRACTION`` of the evals seen (at least
    ``MIN_WINDOW_EVALS``); None with too few evals or a non-finite Δ in the window."""
    now = float(progress[-1])
    inside = progress >= now * (1.0 - WINDOW_FRACTION)
    if inside.sum() < MIN_WINDOW_EVALS:
        inside = np.zeros_like(inside)
        inside[-MIN_WINDOW_EVALS:] = True
    x, y = progress[inside], deltas[:, inside]
    if x.size < MIN_WINDOW_EVALS or not np.all(np.isfinite(y)):
        return None
    x_mean = float(x.mean())
    sxx = float(np.sum((x - x_mean) ** 2))
    if sxx <= 0:
        return None
    slopes = (y - y.mean(axis=1, keepdims=True)) @ (x - x_mean) / sxx
    intercepts = y.mean(axis=1) - slopes * x_mean
    residuals = y - (intercepts[:, None] + slopes[:, None] * x[None, :])
    seeds = y.shape[0]
    residual_dof = float(seeds * (x.size - 2))
    residual_var = float(np.sum(residuals**2)) / residual_dof
    return TrendFit(
        float(intercepts.mean()),
        float(slopes.mean()),
        residual_var,
        residual_dof,
        seeds,
        x_mean,
        sxx,
        int(x.size),
        intercepts,
        slopes,
    )


def first_settled(
    rule: EarlyRule,
    steps: list[int],
    deltas: np.ndarray,
    total_steps: int,
    seed_sd: float,
    seed_dof: float,
) -> tuple[int, EarlyCall]:
    """Walk the looks of a point's curves (``deltas``: seeds × ``steps``, the paired Δ at each
    eval step) and return (the step it is settled at, the call there); (``total_steps``,
    NOT_SETTLED) when no look settles it and the trainings run to the end."""
    looks = rule.look_steps(steps, total_steps)
    progress = np.asarray(steps, float) / total_steps
    for look, step in enumerate(looks, start=1):
        upto = steps.index(step) + 1
        call = rule.call(progress[:upto], deltas[:, :upto], seed_sd, seed_dof, look, len(looks))
        if call.settled:
            return step, call
    return total_steps, NOT_SETTLED


def planned_evals(total_steps: int, eval_every: int) -> list[int]:
    """The eval steps of a run: every ``eval_every`` steps, and the last step."""
    return [*range(eval_every, total_steps, eval_every), total_steps]


def paired_curves(
    deep: Sequence[Sequence[Mapping[str, Any]]],
    shallow: Sequence[Sequence[Mapping[str, Any]]],
    upto: int,
) -> tuple[list[int], np.ndarray]:
    """(eval steps up to ``upto`` that every curve reports, seeds × steps of deep − shallow
    validation loss) from reported curves (one list of reports per seed and depth, seeds in
    the same order)."""

    def losses(curve: Sequence[Mapping[str, Any]]) -> dict[int, float]:
        return {
            int(r[vocabulary.STEP]): float(r[vocabulary.VAL_LOSS])
            for r in curve
            if vocabulary.VAL_LOSS in r and int(r[vocabulary.STEP]) <= upto
        }

    pairs = [(losses(d), losses(s)) for d, s in zip(deep, shallow, strict=True)]
    common = sorted(set.intersection(*(set(d) & set(s) for d, s in pairs))) if pairs else []
    deltas = np.array([[d[t] - s[t] for t in common] for d, s in pairs], dtype=float)
    return common, deltas.reshape(len(pairs), len(common))


def call_at(
    rule: EarlyRule,
    steps: list[int],
    deltas: np.ndarray,
    evals: list[int],
    noise: tuple[float, float],
) -> EarlyCall:
    """The rule's call at the last of ``steps`` (a look when it is one of the run's looks,
    ``evals`` being the run's planned eval steps), the pair's noise (sd, dof) given."""
    looks = rule.look_steps(evals, evals[-1])
    if not steps or steps[-1] not in looks:
        return NOT_SETTLED
    progress = np.asarray(steps, float) / evals[-1]
    look = looks.index(steps[-1]) + 1
    return rule.call(progress, deltas, noise[0], noise[1], look, len(looks))


@dataclass(frozen=True)
class PointNoise:
    """What the rule needs of a pair point's noise context: the pair's paired end-Δ noise
    nearest the point (``sd`` nats on ``dof`` degrees of freedom) and the equal-N correction
    (nats) that every Δ of the pair has subtracted."""

    sd: float
    dof: float
    correction: float


@dataclass(frozen=True)
class PointLook:
    """The rule's call on a point's curves at one step, and the equal-N Δ it was made from."""

    call: EarlyCall
    steps: list[int]
    deltas: np.ndarray  # seeds × steps, equal-N Δ (nats)


def point_call(
    rule: EarlyRule,
    deep: Sequence[Sequence[Mapping[str, Any]]],
    shallow: Sequence[Sequence[Mapping[str, Any]]],
    step: int,
    evals: list[int],
    noise: PointNoise,
) -> PointLook | None:
    """The rule's call on a point's reported curves (deep and shallow, one curve per seed in
    the same order) at eval step ``step`` of a run whose planned evals are ``evals``: the one
    computation that both stops a point's trainings and decides the point from its records.
    None when it cannot be made: a curve has not reached ``step``, or the pair's noise is not
    a finite positive sd (nothing learned yet)."""
    steps, deltas = paired_curves(deep, shallow, step)
    if not steps or steps[-1] != step:
        return None
    if not (math.isfinite(noise.sd) and noise.sd > 0):
        return None
    deltas = deltas - noise.correction  # at equal N, as every Δ of the pair
    call = call_at(rule, steps, deltas, evals, (noise.sd, noise.dof))
    return PointLook(call, steps, deltas)


def seed_end_estimates(steps: list[int], deltas: np.ndarray, total_steps: int) -> np.ndarray:
    """Each seed's end Δ as the rule sees it: the midpoint of its window line's current value
    and its extrapolation to the end (the end lies between them, module doc); each seed's
    last Δ where the window has too few evals."""
    progress = np.asarray(steps, float) / total_steps
    fit = trend_fit(progress, deltas)
    if fit is None:
        return deltas[:, -1].copy()
    now = float(progress[-1])
    return fit.seed_intercepts + fit.seed_slopes * 0.5 * (now + 1.0)


def run_evals(spec: ExperimentSpec, request: TrialRequest) -> list[int]:
    """The planned eval steps of a request's training (its own length: tokens_per_param)."""
    trained = request_spec(spec, request)
    return planned_evals(trained.train.total_steps(trained.data.seq_len), trained.train.eval_every)


# point kinds whose first trainings may stop early
EARLY_KINDS = (vocabulary.PointKind.CUT, vocabulary.PointKind.SCAN)


def may_stop(request: TrialRequest) -> bool:
    """Whether a request's training may be stopped by the early rule: a refine training of a
    new size (bisect or scan; a verify point's seeds join seeds already trained to the end)."""
    return request.stage == vocabulary.Stage.REFINE and request.point_kind in EARLY_KINDS
