"""A pair's noise, signs and estimate; agreement with a law as a test; the fit's input
(pure: numpy, scipy).

See :mod:`dwtune.core.analysis` for the conventions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dwtune.core import vocabulary
from dwtune.core.analysis.jitter import JitterModel
from dwtune.core.analysis.matching import MatchedPoint, SizeGroup, pair_points
from dwtune.core.analysis.scatter import MIN_RESIDUALS, scatter_noise
from dwtune.core.errors import InputError
from dwtune.core.fit import TransitionObservation
from dwtune.core.fit.bootstrap import PairPoints, observation_from_estimate
from dwtune.core.refine.estimate import CrossingEstimate, estimate_crossing
from dwtune.core.refine.noise import Noise, NoisePrior
from dwtune.core.refine.signs import SignRule, pair_noise, point_signs

DEFAULT_ALPHA = 0.05  # false-sign rate of a point at a true Δ of 0 (two-sided)


def analysis_rule(alpha: float = DEFAULT_ALPHA) -> SignRule:
    """The sign rule of a fixed table: every point is looked at once, with all its runs
    (no sequential looks to pay for), and one run counts: its noise is measured elsewhere
    (replicates at other sizes, or its checkpoints)."""
    return SignRule(alpha=alpha, max_looks=1, min_looks=1)


# --------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class PairAnalysis:
    """A pair's points, the noise and signs they were judged with, and the estimate."""

    depth_shallow: float
    depth_deep: float
    points: tuple[MatchedPoint, ...]
    delta: tuple[float, ...]  # mean Δ per point (nats)
    delta_err: tuple[float, ...]  # its standard error: the noise and extra_sd
    signs: tuple[int, ...]  # the rule's sign per point: +1 deeper loses, −1 wins, 0 within noise
    boundary: tuple[float, ...]  # |Δ|/se a sign needed at each point
    noise: Noise
    estimate: CrossingEstimate

    @property
    def label(self) -> str:
        return f"{self.depth_shallow:g}-{self.depth_deep:g}"

    @property
    def status(self) -> str:
        """The analysis verdict (vocabulary.ANALYSIS_STATUS of the transition status)."""
        return vocabulary.ANALYSIS_STATUS[self.estimate.status]

    @property
    def trends(self) -> dict[str, int]:
        """How many points used each kind of size trend."""
        kinds: dict[str, int] = {}
        for p in self.points:
            kinds[p.trend] = kinds.get(p.trend, 0) + 1
        return kinds


def choose_noise(
    matched: Sequence[MatchedPoint], jitter: JitterModel | None, prior: NoisePrior
) -> Noise:
    """Replicates where the pair has them (the seed-to-seed noise itself, learned as the
    refine stage learns it); else its runs' checkpoint jitter; else Δ's scatter about its own
    trend (:mod:`.scatter`); else the prior alone."""
    replicates = pair_noise([m.point for m in matched], prior)
    if replicates.measured_dof > 0:
        return replicates
    if jitter is not None:
        measured = jitter.delta_noise([(m.rows_deep, m.rows_shallow) for m in matched])
        if measured is not None:
            return measured
    points = [m.point for m in matched]
    scatter = scatter_noise(
        [math.log(p.n) for p in points],
        [float(np.mean(p.deltas)) for p in points],
        [p.extra_sd for p in points],
    )
    return replicates if scatter is None else scatter


def analyse_pair(
    groups: dict[float, list[SizeGroup]],
    pair: tuple[float, float],
    window: float,
    *,
    rule: SignRule | None = None,
    jitter: JitterModel | None = None,
    prior: NoisePrior | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> PairAnalysis:
    """Points of a pair, their noise (:func:`choose_noise`) and signs under ``rule``, and
    :func:`estimate_crossing` on them with the same noise and rule."""
    matched = [m for m in pair_points(groups, pair, window) if m.point.deltas]
    if not matched:
        raise InputError(
            f"pair {pair[0]:g}-{pair[1]:g}: every matched size has failed runs on both sides; "
            "no Δ can be formed"
        )
    rule = rule or analysis_rule()
    points = [m.point for m in matched]  # sorted by size, as estimate_crossing sorts them
    noise = choose_noise(matched, jitter, prior or NoisePrior())
    signs = point_signs(points, noise, rule)
    return PairAnalysis(
        depth_shallow=pair[0],
        depth_deep=pair[1],
        points=tuple(matched),
        delta=tuple(float(v) for v in signs.means),
        delta_err=tuple(float(v) for v in signs.se),
        signs=tuple(int(s) for s in signs.signs),
        boundary=tuple(float(b) for b in signs.bounds),
        noise=noise,
        estimate=estimate_crossing(points, rule=rule, noise=noise, n_boot=n_boot, seed=seed),
    )


# --------------------------------------------------------------------------- what would decide


def to_decide(pair: PairAnalysis) -> str | None:
    """What would decide a pair whose signs leave N* open (undecided, or bounded on one side
    only), in words; None where its status is decided (a crossing, a censored one, several).

    Rule: where no method measured the noise, the three things that would; else, at the point
    within noise with the largest |Δ|/se, the seeds ``k`` that would put |Δ| beyond its
    boundary at the measured sd (``se = sd/√k``, Δ unchanged: a planning figure, not a
    promise), and sizes beyond the decided signs' bound, where |Δ| grows."""
    if pair.estimate.status != vocabulary.TransitionStatus.UNDECIDED:
        return None
    source = pair.noise.source
    if source == vocabulary.NOISE_PRIOR:
        return (
            "nothing measures the noise: two or more seeds at a few sizes (replicate runs), "
            "each run's checkpoints (a tokens or step column), or more sizes along the pair's "
            f"axis (the scatter about the trend needs {MIN_RESIDUALS + 2})"
        )
    open_points = [i for i, sign in enumerate(pair.signs) if sign == 0]
    if not open_points:
        return None
    ratio = [abs(pair.delta[i]) / pair.delta_err[i] for i in open_points]
    best = open_points[int(np.argmax(ratio))]
    sd, delta = float(pair.noise.sd[best]), abs(pair.delta[best])
    sizes = "sizes beyond the decided signs' bound, where |Δ| is larger"
    if delta <= 0 or not math.isfinite(delta):
        return f"{sizes}; at N = {pair.points[best].point.n:.3g} Δ is 0 to the digit"
    seeds = math.ceil((pair.boundary[best] * sd / delta) ** 2)
    return (
        f"seeds: at N = {pair.points[best].point.n:.3g} (Δ = {pair.delta[best]:+.4f} nats) "
        f"about {seeds} seed(s) of each depth, if Δ holds and the sd of one Δ is "
        f"{sd:.2g} nats ({source.replace('_', ' ')}); or {sizes}"
    )


# --------------------------------------------------------------------------- a law's prediction


@dataclass(frozen=True)
class LawView:
    """What a law says of a pair (Ls, Ld): the deeper net wins above N*(Ld), loses below
    N*(L1), with L1 the first depth of the table above Ls (Ld for an adjacent pair), and is
    silent between (package doc). ``*_low``/``*_high``: a fitted law's interval (NaN for a
    published law, whose constants are taken as exact)."""

    name: str
    n_star: float  # N*(Ld)
    n_low: float
    n_high: float
    first_depth: float = math.nan  # L1; NaN: Ld (an adjacent pair)
    first_n_star: float = math.nan  # N*(L1)
    first_low: float = math.nan
    first_high: float = math.nan

    @property
    def wins_above(self) -> float:
        """Above this size the law says the deeper net wins."""
        return self.n_high if math.isfinite(self.n_high) else self.n_star

    @property
    def loses_below(self) -> float:
        """Below this size the law says the deeper net loses."""
        if math.isfinite(self.first_n_star):
            return self.first_low if math.isfinite(self.first_low) else self.first_n_star
        return self.n_low if math.isfinite(self.n_low) else self.n_star

    def predicted(self, n: float) -> int:
        """+1 (deeper loses), −1 (deeper wins) or 0 (the law is silent) at size ``n``."""
        if n > self.wins_above:
            return -1
        return 1 if n < self.loses_below else 0


def point_verdict(n: float, sign: int, law: LawView) -> str:
    """agrees / disagrees / within_noise / no_prediction of a point whose rule sign is
    ``sign`` (package doc): a disagreement is a decided sign against the law's."""
    predicted = law.predicted(n)
    if predicted == 0:
        return vocabulary.AGREEMENT_NO_PREDICTION
    if sign == 0:
        return vocabulary.AGREEMENT_WITHIN_NOISE
    return vocabulary.AGREEMENT_AGREES if sign == predicted else vocabulary.AGREEMENT_DISAGREES


def pair_verdicts(pair: PairAnalysis, law: LawView) -> tuple[str, ...]:
    return tuple(
        point_verdict(m.point.n, s, law) for m, s in zip(pair.points, pair.signs, strict=True)
    )


# --------------------------------------------------------------------------- the test


@dataclass(frozen=True)
class AgreementTest:
    """Disagreements with a law against the rate the law allows (package doc)."""

    law: str
    alpha: float
    predicted: int  # points where the law predicts a sign
    agree: int
    disagree: int
    within_noise: int
    no_prediction: int
    p_value: float  # P(≥ disagree of predicted | each at rate α/2): binomial, one-sided
    rejected: bool  # p_value < alpha

    @property
    def rate(self) -> float:
        """Largest chance a point disagrees if the law is right: a false sign, one side."""
        return self.alpha / 2

    @property
    def conclusion(self) -> str:
        if self.predicted == 0:
            return f"no test: {self.law} predicts no sign at any point"
        if self.rejected:
            return f"the law is rejected: p = {self.p_value:.3g} < α = {self.alpha:g}"
        return f"consistent with {self.law} at α = {self.alpha:g} (p = {self.p_value:.3g})"

    @property
    def summary(self) -> str:
        counts = (
            f"{self.disagree} of {self.predicted} points where {self.law} predicts a sign "
            f"disagree ({self.agree} agree, {self.within_noise} within noise; it is silent at "
            f"{self.no_prediction})"
        )
        if self.predicted == 0:
            return f"{counts}; {self.conclusion}"
        return (
            f"{counts}. If it were right, each would disagree at most α/2 = {self.rate:.3g} of "
            f"the time; by a one-sided binomial test, {self.conclusion}"
        )


def agreement_test(verdicts: Sequence[str], law: str, alpha: float) -> AgreementTest:
    """The number of disagreements against Binomial(predicted, α/2) (package doc)."""
    count = {v: sum(x == v for x in verdicts) for v in set(verdicts)}
    agree = count.get(vocabulary.AGREEMENT_AGREES, 0)
    disagree = count.get(vocabulary.AGREEMENT_DISAGREES, 0)
    within = count.get(vocabulary.AGREEMENT_WITHIN_NOISE, 0)
    predicted = agree + disagree + within
    p_value = 1.0
    if predicted:
        test = stats.binomtest(disagree, predicted, alpha / 2, alternative="greater")
        p_value = float(test.pvalue)
    silent = count.get(vocabulary.AGREEMENT_NO_PREDICTION, 0)
    rejected = bool(predicted) and p_value < alpha
    return AgreementTest(law, alpha, predicted, agree, disagree, within, silent, p_value, rejected)


# --------------------------------------------------------------------------- fit hand-off


def fit_observations(pairs: Sequence[PairAnalysis]) -> list[TransitionObservation]:
    """Every pair as the censored fit sees it: a bracketed N*, or the bound its decided signs
    give (censored, or undecided with a one-sided bound); the rest with the reason they are
    left out."""
    observations = []
    for pair in pairs:
        points = [m.point for m in pair.points]
        view = PairPoints(pair.label, pair.depth_shallow, pair.depth_deep, tuple(points))
        observations.append(observation_from_estimate(view, pair.estimate, points))
    return observations


def noise_range(pair: PairAnalysis) -> tuple[float, float, float]:
    """(smallest sd, largest sd, fewest dof) of one Δ over the pair's points (nats)."""
    sd, dof = np.asarray(pair.noise.sd), np.asarray(pair.noise.dof)
    return float(sd.min()), float(sd.max()), float(dof.min())
