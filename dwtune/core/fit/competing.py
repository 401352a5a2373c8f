"""Competing published laws fitted to the same transitions, and which the data prefer (pure).

Two laws of the optimal shape, each fitted by the interval-censored likelihood of
:mod:`dwtune.core.fit.censored` (same pairs, same σ(ln N*), censored pairs included), so their
log-likelihoods are comparable:

- ``levine2020``: ``ln dx* = a + b·L`` (Levine et al. 2020), L the deeper depth. The optimal
  depth grows about logarithmically in N: the transition width grows exponentially with depth.
- ``separable``: loss ``A/dx + B/L + E`` with separate width and depth terms, at
  ``N = 12·L·dx²``. At equal N the deeper depth ``L2`` of a pair ``L1 < L2`` gains
  ``B(1/L1 − 1/L2)`` on the depth term and loses ``A·sqrt(12/N)(√L2 − √L1)`` on the width
  term, so Δ = loss(L2) − loss(L1) is positive below the crossing and negative above it (the
  sign convention of the transitions), and the crossing is

      sqrt(N*) = e^c · sqrt(12) · L1·L2 / (√L1 + √L2),   c = ln(A/B);

  on the width axis ``ln dx* = c + ln(L1·√L2 / (√L1 + √L2))``: one free parameter, and a
  pair's N* depends on both its depths. Its optimum at a budget N (minimise ``A/dx + B/L`` at
  ``12·L·dx² = N``) has the aspect ratio ``dx/L = e^c / 2`` at every N, so
  ``L* = (N / (12·(e^c/2)²))^(1/3)``: the optimal depth grows as N^(1/3).

Which law the data prefer: the smaller AICc (AIC where a law has too few pairs for AICc's
correction, which then applies to none), with a difference under ``NO_PREFERENCE`` = 2 read
as no preference. Beside it, each law's leave-one-pair-out error: every bracketed pair's
ln N* predicted by the law fitted without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dwtune.core.errors import InputError
from dwtune.core.fit.censored import (
    Prepared,
    TransitionObservation,
    check_enough,
    linear_design,
    maximise,
    prepare,
)
from dwtune.core.fit.forms import InformationCriteria, projection_rows
from dwtune.core.projection import DepthWidthLaw
from dwtune.core.projection import optimal_depth as levine_optimal_depth

NO_PREFERENCE = 2.0  # an information-criterion difference below this prefers neither law
Shape = tuple[float, float]  # (optimal depth, width) at a budget


def _zero_offset(shallow: np.ndarray, deep: np.ndarray) -> np.ndarray:
    return np.zeros_like(deep)


def _levine_design(shallow: np.ndarray, deep: np.ndarray) -> np.ndarray:
    return linear_design(deep)


def _levine_optimum(theta: np.ndarray, budget: float) -> Shape:
    """The depth whose transition size is the budget (dwtune.core.projection's rule)."""
    a, b = float(theta[0]), float(theta[1])
    if not (math.isfinite(b) and b > 0):
        return math.nan, math.nan
    depth = levine_optimal_depth(DepthWidthLaw("levine2020 fit", a, b), budget)
    return depth, math.sqrt(budget / (12.0 * depth))


def separable_log_width(shallow: np.ndarray, deep: np.ndarray) -> np.ndarray:
    """``ln dx* − c`` of the separable law for pairs (shallow, deep): ``ln(L1·√L2/(√L1+√L2))``."""
    root_s, root_d = np.sqrt(shallow), np.sqrt(deep)
    offset: np.ndarray = np.log(shallow * root_d / (root_s + root_d))
    return offset


def _separable_design(shallow: np.ndarray, deep: np.ndarray) -> np.ndarray:
    return np.ones((deep.size, 1))


def _separable_optimum(theta: np.ndarray, budget: float) -> Shape:
    return separable_optimum(float(theta[0]), budget)


def separable_optimum(c: float, budget: float) -> Shape:
    """Minimum of ``A/dx + B/L`` at ``12·L·dx² = budget`` with ``A/B = e^c``.

    Setting the derivative along the budget to zero gives ``dx³ = e^c·N/24``, i.e. the aspect
    ratio ``dx/L = e^c/2`` at every budget."""
    ratio = math.exp(c) / 2.0
    depth = (budget / (12.0 * ratio * ratio)) ** (1.0 / 3.0)
    return depth, ratio * depth


@dataclass(frozen=True)
class CompetingLaw:
    """A law as the likelihood fits it: ``y = design(L1, L2)·θ + offset(L1, L2)``."""

    name: str
    formula: str
    citation: str
    params: tuple[str, ...]
    design: Callable[[np.ndarray, np.ndarray], np.ndarray]
    offset: Callable[[np.ndarray, np.ndarray], np.ndarray]
    optimum: Callable[[np.ndarray, float], Shape]

    def predict(self, theta: np.ndarray, shallow: np.ndarray, deep: np.ndarray) -> np.ndarray:
        """``ln dx*`` of each pair (deeper net's width at the transition)."""
        y: np.ndarray = self.design(shallow, deep) @ theta + self.offset(shallow, deep)
        return y


LEVINE = CompetingLaw(
    "levine2020",
    "ln dx* = a + b·L",
    "Levine et al. 2020, arXiv 2006.12467",
    ("a", "b"),
    _levine_design,
    _zero_offset,
    _levine_optimum,
)
SEPARABLE = CompetingLaw(
    "separable",
    "loss = A/dx + B/L + E, c = ln(A/B)",
    "additive width and depth terms, after Hoffmann et al. 2022's additive N and D terms",
    ("c",),
    _separable_design,
    separable_log_width,
    _separable_optimum,
)
LAWS = (LEVINE, SEPARABLE)


@dataclass(frozen=True)
class Pairs:
    """The likelihood's arrays and each fitted pair's shallower depth (same order)."""

    data: Prepared
    shallow: np.ndarray

    @classmethod
    def of(cls, observations: Sequence[TransitionObservation]) -> Pairs:
        shallow = [o.depth_shallow for o in observations if o.fitted]
        return cls(prepare(observations), np.array(shallow, dtype=float))

    def subset(self, keep: np.ndarray) -> Pairs:
        d = self.data
        labels = tuple(label for label, kept in zip(d.labels, keep, strict=True) if kept)
        data = replace(d, depth=d.depth[keep], y=d.y[keep], sd=d.sd[keep],
                       direction=d.direction[keep], labels=labels)  # fmt: skip
        return Pairs(data, self.shallow[keep])


def _maximise(law: CompetingLaw, pairs: Pairs) -> tuple[np.ndarray, np.ndarray, float, int]:
    """θ, its covariance, log L and the χ² dof: the offset moves y and the bounds alike."""
    data = pairs.data
    shifted = replace(data, y=data.y - law.offset(pairs.shallow, data.depth))
    result = maximise(law.design(pairs.shallow, data.depth), shifted)
    return result.theta, result.cov, result.log_likelihood, result.dof


@dataclass(frozen=True)
class LawFit(InformationCriteria):
    """One law's fit, its criteria, its leave-one-pair-out error and its projections."""

    law: str
    formula: str
    citation: str
    params: dict[str, float]
    se: dict[str, float]
    log_likelihood: float
    k: int
    n: int
    loo_rms_ln_n: float  # root mean square of (predicted − estimated) ln N*, held-out pairs
    loo_pairs: int  # bracketed pairs predicted without themselves
    projections: dict[float, Shape]

    def to_dict(self) -> dict[str, object]:
        return {
            "law": self.law,
            "formula": self.formula,
            "citation": self.citation,
            "params": self.params,
            "se": self.se,
            **self.criteria_dict(),
            "loo_rms_ln_n": self.loo_rms_ln_n,
            "loo_pairs": self.loo_pairs,
            "projections": projection_rows(self.projections),
        }


def loo_errors(law: CompetingLaw, pairs: Pairs) -> np.ndarray:
    """Each bracketed pair's ``ln N*`` error, predicted by the law fitted without it (NaN where
    the rest cannot fix the law's parameters)."""
    k = len(law.params)
    estimated = np.flatnonzero(pairs.data.estimated)
    errors = np.full(estimated.size, math.nan)
    for j, i in enumerate(estimated):
        keep = np.arange(pairs.data.depth.size) != i
        rest = pairs.subset(keep)
        if int(rest.data.estimated.sum()) < k:
            continue
        try:
            theta = _maximise(law, rest)[0]
        except (InputError, np.linalg.LinAlgError):
            continue
        at = np.array([i])
        predicted = law.predict(theta, pairs.shallow[at], pairs.data.depth[at])[0]
        errors[j] = 2.0 * (predicted - pairs.data.y[i])  # ln N* = ln(12·L2) + 2·ln dx*
    return errors


def fit_competing(
    law: CompetingLaw, observations: Sequence[TransitionObservation], budgets: Sequence[float]
) -> LawFit:
    """One law fitted to every pair the likelihood takes; raises InputError on too few."""
    pairs = Pairs.of(observations)
    k = len(law.params)
    check_enough(pairs.data, k)
    theta, cov, log_likelihood, _ = _maximise(law, pairs)
    errors = loo_errors(law, pairs)
    held = errors[np.isfinite(errors)]
    return LawFit(
        law=law.name,
        formula=law.formula,
        citation=law.citation,
        params=dict(zip(law.params, theta.tolist(), strict=True)),
        se=dict(zip(law.params, np.sqrt(np.diag(cov)).tolist(), strict=True)),
        log_likelihood=log_likelihood,
        k=k,
        n=int(pairs.data.depth.size),
        loo_rms_ln_n=float(np.sqrt(np.mean(held**2))) if held.size else math.nan,
        loo_pairs=int(held.size),
        projections={float(n): law.optimum(theta, float(n)) for n in budgets},
    )


@dataclass(frozen=True)
class LawComparison:
    """The laws that could be fitted, the criterion and the preferred law (None: no preference
    or nothing to compare)."""

    fits: tuple[LawFit, ...]
    skipped: tuple[tuple[str, str], ...]  # (law, why it could not be fitted)
    criterion: str  # "aicc" or "aic"

    def ranked(self) -> tuple[LawFit, ...]:
        return tuple(sorted(self.fits, key=lambda f: getattr(f, self.criterion)))

    @property
    def margin(self) -> float:
        """Criterion of the runner-up minus the best (NaN with fewer than two laws)."""
        ranked = self.ranked()
        if len(ranked) < 2:
            return math.nan
        return float(getattr(ranked[1], self.criterion) - getattr(ranked[0], self.criterion))

    @property
    def preferred(self) -> str | None:
        return self.ranked()[0].law if self.margin >= NO_PREFERENCE else None

    def to_dict(self) -> dict[str, object]:
        ranked = self.ranked()
        return {
            "laws": [f.to_dict() for f in self.fits],
            "skipped": [{"law": n, "reason": r} for n, r in self.skipped],
            "criterion": self.criterion,
            "no_preference_below": NO_PREFERENCE,
            "best": ranked[0].law if ranked else None,
            "margin": self.margin,
            "preferred": self.preferred,
        }


def compare_laws(
    observations: Sequence[TransitionObservation], budgets: Sequence[float]
) -> LawComparison:
    """Fit every law in ``LAWS``; one with too few pairs is skipped with the reason."""
    fits, skipped = [], []
    for law in LAWS:
        try:
            fits.append(fit_competing(law, observations, budgets))
        except InputError as exc:
            skipped.append((law.name, str(exc)))
    criterion = "aicc" if all(math.isfinite(f.aicc) for f in fits) else "aic"
    return LawComparison(tuple(fits), tuple(skipped), criterion)
