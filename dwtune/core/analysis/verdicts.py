"""A pair's estimate, agreement with a law and the fit's input (pure: numpy).

See :mod:`dwtune.core.analysis` for the conventions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.analysis.matching import MatchedPoint, pair_points
from dwtune.core.crossing import (
    CrossingEstimate,
    DeltaPoint,
    estimate_crossing,
    pair_noise,
    point_means,
)
from dwtune.core.decision import SignRule
from dwtune.core.errors import InputError
from dwtune.core.fit import CensoredPair
from dwtune.core.noise import NoisePrior

# A fixed table is one look at each point (dwtune.core.decision).
ANALYSIS_RULE = SignRule(alpha=0.05, max_looks=1, min_looks=1)

# --------------------------------------------------------------------------- pairs and laws


@dataclass(frozen=True)
class PairAnalysis:
    """A pair's points, their uncertainties, and the estimator's verdict."""

    depth_shallow: float
    depth_deep: float
    points: tuple[MatchedPoint, ...]
    delta: tuple[float, ...]  # mean Δ per point (nats)
    delta_err: tuple[float, ...]  # its standard error: estimator's noise and extra_sd
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


def point_errors(points: Sequence[DeltaPoint]) -> tuple[np.ndarray, np.ndarray]:
    """Mean Δ and its standard error per point, with the estimator's noise model."""
    noise = pair_noise(points, NoisePrior())
    counts = np.array([len(p.deltas) for p in points], dtype=float)
    extra = np.array([p.extra_sd for p in points], dtype=float)
    return point_means(points), np.sqrt(noise.sd**2 / counts + extra**2)


def analyse_pair(groups, pair, window: float, *, n_boot: int = 2000, seed: int = 0):
    """Points of a pair and :func:`estimate_crossing` on them."""
    matched = [m for m in pair_points(groups, pair, window) if m.point.deltas]
    if not matched:
        raise InputError(
            f"pair {pair[0]:g}-{pair[1]:g}: every matched size has failed runs on both sides; "
            "no Δ can be formed"
        )
    points = [m.point for m in matched]
    means, errors = point_errors(points)
    return PairAnalysis(
        depth_shallow=pair[0],
        depth_deep=pair[1],
        points=tuple(matched),
        delta=tuple(float(v) for v in means),
        delta_err=tuple(float(v) for v in errors),
        estimate=estimate_crossing(points, rule=ANALYSIS_RULE, n_boot=n_boot, seed=seed),
    )


@dataclass(frozen=True)
class LawView:
    """What a law predicts for a pair: N* of the deeper depth and its 95% interval."""

    name: str
    n_star: float
    n_low: float  # NaN for a law without covariance
    n_high: float


def point_verdict(n: float, delta: float, err: float, law: LawView) -> str:
    """agrees / disagrees / within_noise / no_prediction (module doc)."""
    if math.isfinite(law.n_low) and law.n_low <= n <= law.n_high:
        return vocabulary.AGREEMENT_NO_PREDICTION
    if not abs(delta) > ANALYSIS_RULE.boundary(1, math.inf) * err:
        return vocabulary.AGREEMENT_WITHIN_NOISE
    predicted = 1 if n < law.n_star else -1
    observed = 1 if delta > 0 else -1
    return vocabulary.AGREEMENT_AGREES if predicted == observed else vocabulary.AGREEMENT_DISAGREES


def pair_verdicts(pair: PairAnalysis, law: LawView) -> tuple[str, ...]:
    return tuple(
        point_verdict(m.point.n, d, e, law)
        for m, d, e in zip(pair.points, pair.delta, pair.delta_err, strict=True)
    )


def agreement_line(verdicts: Sequence[str], law_name: str) -> tuple[int, int, str]:
    """(agreeing, decided, "k of m decided points agree with <law>")."""
    agree = sum(v == vocabulary.AGREEMENT_AGREES for v in verdicts)
    decided = agree + sum(v == vocabulary.AGREEMENT_DISAGREES for v in verdicts)
    return agree, decided, f"{agree} of {decided} decided points agree with {law_name}"


# --------------------------------------------------------------------------- fit hand-off


@dataclass(frozen=True)
class FitPoints:
    """The law fit's input from analysed pairs (paper convention N = 12·L·dx²)."""

    depths: tuple[float, ...]
    widths: tuple[float, ...]  # dx* = sqrt(N* / (12·Ld))
    width_errs: tuple[float, ...]  # dx*·σ(ln N*)/2
    labels: tuple[str, ...]
    censored: tuple  # CensoredPair of the pairs that do not cross


def fit_points(pairs: Sequence[PairAnalysis]) -> FitPoints:
    """Crossing pairs as fit points; the others as censored pairs with their size bounds."""
    depths, widths, errs, labels, censored = [], [], [], [], []
    for pair in pairs:
        est = pair.estimate
        if est.status == vocabulary.TransitionStatus.BRACKETED:
            width = math.sqrt(est.n_star / (12.0 * pair.depth_deep))
            depths.append(pair.depth_deep)
            widths.append(width)
            errs.append(0.5 * width * est.sigma_ln)
            labels.append(f"pair {pair.label}")
            continue
        sizes = [m.point.n for m in pair.points]
        low = max(sizes) if est.status == vocabulary.TransitionStatus.CENSORED_HIGH else math.nan
        high = min(sizes) if est.status == vocabulary.TransitionStatus.CENSORED_LOW else math.nan
        seeds = max(len(m.point.deltas) for m in pair.points)
        shallow, deep = int(pair.depth_shallow), int(pair.depth_deep)
        censored.append(CensoredPair(pair.label, est.status, shallow, deep, low, high, seeds))
    return FitPoints(tuple(depths), tuple(widths), tuple(errs), tuple(labels), tuple(censored))
