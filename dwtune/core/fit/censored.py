"""Interval-censored likelihood fit of the transition law (pure: numpy, scipy).

Why: a pair whose transition lies outside the budget range is exactly a pair whose N* is
extreme; leaving it out (as least squares on bracketed points must) biases the slope towards
the pairs that happened to bracket. Here every pair that bounds N* enters the likelihood.

Model, on the width axis ``y = ln dx* = (ln N* − ln(12·Ld)) / 2`` of the deeper depth ``Ld``:
the law is linear in its parameters, ``y = x(L)·θ`` (design row ``x(L) = [1, L]`` for
``ln dx* = a + b·L``; other forms in :mod:`dwtune.core.fit.forms`). A pair contributes

- estimated (status ``bracketed``): the normal density of its estimate ``ŷ`` with sd
  ``σ_y = σ(ln N*) / 2``;
- ``censored_high`` (the deeper net loses at every size compared): the probability that its
  transition lies above the range bound, ``Φ((x·θ − c) / s)`` with ``c`` the ``y`` of the
  largest size compared;
- ``censored_low`` (it wins at every size): ``Φ((c − x·θ) / s)``, ``c`` at the smallest size;
- ``undecided`` with a bound (its decided points all say one thing, and points within noise
  lie beyond them): the same one-sided term at that bound, so a pair measured closer to its
  N* never leaves the fit (an ``undecided`` pair that bounds nothing is excluded).

``s`` is the pair's own σ(ln N*)/2 where the estimator gives one, else the median ``σ_y`` of
the estimated transitions: how precisely a transition at the bound would have been located.
``non_monotone`` pairs (and ``undecided`` ones without a bound) are excluded with their reason.

The negative log-likelihood is convex (quadratic Gaussian terms; ``−log Φ`` is convex), so it
is minimised by a trust-region Newton method with its analytic gradient and Hessian; with no
censored pair its minimum is the weighted least-squares solution exactly. Covariance: the
inverse observed information (the Hessian at the estimate), absolute sigma as in
:mod:`dwtune.core.fit.wls`. ``χ²_red`` is taken over the estimated transitions:
``Σ ((ŷ − x·θ)/σ_y)² / (n_estimated − k)``; censored pairs carry little information on the
scatter and are not counted in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.fit.wls import MIN_POINTS, CensoredPair, FitResult
from dwtune.core.projection import DepthWidthLaw

BRACKETED = vocabulary.TransitionStatus.BRACKETED
CENSORED_LOW = vocabulary.TransitionStatus.CENSORED_LOW
CENSORED_HIGH = vocabulary.TransitionStatus.CENSORED_HIGH
NON_MONOTONE = vocabulary.TransitionStatus.NON_MONOTONE
UNDECIDED = vocabulary.TransitionStatus.UNDECIDED
# Direction of a censored bound: +1 means y lies above c, -1 below, 0 an estimated transition.
DIRECTION: dict[str, int] = {BRACKETED: 0, CENSORED_HIGH: +1, CENSORED_LOW: -1}
EXCLUDED_REASON: dict[str, str] = {
    NON_MONOTONE: "Δ changes sign more than once: no single N* to fit",
    UNDECIDED: "Δ within noise at every decided size: the pair bounds no N*",
}
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class TransitionObservation:
    """What one depth pair says about its transition, as the fit uses it.

    ``log_n``: ln N* (estimated) or ln of the range bound (censored), parameters on the pair's
    size axis; NaN where the pair bounds nothing. ``sigma_ln``: σ(ln N*) (NaN if unknown).
    """

    label: str
    depth_shallow: float
    depth_deep: float
    status: str
    log_n: float
    sigma_ln: float = math.nan
    seeds: int = 0
    reason: str = ""
    sigma_field: str = "sigma_ln"  # the input field σ came from, named in errors
    # +1: N* lies above log_n, −1: below, 0: estimated; None: the status's own (DIRECTION).
    # An undecided pair's bound says which way it points.
    direction: int | None = None

    @property
    def sense(self) -> int | None:
        """Which way the observation points (+1 / −1 / 0), None where it bounds nothing."""
        return DIRECTION.get(self.status) if self.direction is None else self.direction

    @property
    def log_width(self) -> float:
        """``ln dx* = (ln N* − ln(12·Ld)) / 2`` (or of the bound)."""
        return 0.5 * (self.log_n - math.log(12.0 * self.depth_deep))

    @property
    def sigma_log_width(self) -> float:
        return 0.5 * self.sigma_ln

    @property
    def fitted(self) -> bool:
        return self.sense is not None and math.isfinite(self.log_n)

    def exclusion(self) -> str:
        """Why the pair is not in the fit ("" if it is)."""
        if self.fitted:
            return ""
        if self.reason:
            return self.reason
        if self.status in EXCLUDED_REASON:
            return EXCLUDED_REASON[self.status]
        if self.sense is not None:
            return "no finite size bound recorded"
        return f"status {self.status!r} bounds no N*"

    def as_censored_pair(self) -> CensoredPair:
        """The listing of a pair that was not bracketed (bound on the N axis)."""
        n = math.exp(self.log_n) if math.isfinite(self.log_n) else math.nan
        low, high = (n, math.nan) if self.sense == +1 else (math.nan, n)
        return CensoredPair(
            self.label, self.status, int(self.depth_shallow), int(self.depth_deep), low, high,
            self.seeds,
        )  # fmt: skip


@dataclass(frozen=True)
class Prepared:
    """The fitted observations as arrays: depth, y, sd, direction (0 / +1 / -1)."""

    depth: NDArray[np.float64]
    y: NDArray[np.float64]
    sd: NDArray[np.float64]
    direction: NDArray[np.int_]
    labels: tuple[str, ...]
    excluded: tuple[tuple[str, str], ...]

    @property
    def estimated(self) -> NDArray[np.bool_]:
        estimated: NDArray[np.bool_] = self.direction == 0  # ndarray's == is typed Any
        return estimated


def _censor_sd(observations: Sequence[TransitionObservation]) -> float:
    """Median σ_y of the estimated transitions: the scale of a censored pair's term."""
    sds = [o.sigma_log_width for o in observations if o.fitted and o.status == BRACKETED]
    return float(np.median(sds)) if sds else math.nan


def _check_sd(obs: TransitionObservation) -> None:
    if obs.status == BRACKETED and not (math.isfinite(obs.sigma_ln) and obs.sigma_ln > 0):
        raise InputError(
            f"{obs.sigma_field} at {obs.label}: got {obs.sigma_ln!r}; expected a positive finite "
            "number; give each estimated transition a measured uncertainty > 0"
        )
    if not (math.isfinite(obs.depth_deep) and obs.depth_deep > 0):
        raise InputError(f"depth_deep at {obs.label}: got {obs.depth_deep!r}; expected layers > 0")


def prepare(observations: Sequence[TransitionObservation]) -> Prepared:
    """Arrays of the pairs that enter the likelihood; the rest with their reasons."""
    fitted = [o for o in observations if o.fitted]
    for obs in fitted:
        _check_sd(obs)
    fallback = _censor_sd(fitted)
    sd = [
        o.sigma_log_width if math.isfinite(o.sigma_ln) and o.sigma_ln > 0 else fallback
        for o in fitted
    ]
    return Prepared(
        depth=np.array([o.depth_deep for o in fitted], dtype=float),
        y=np.array([o.log_width for o in fitted], dtype=float),
        sd=np.array(sd, dtype=float),
        direction=np.array([o.sense for o in fitted], dtype=int),
        labels=tuple(o.label for o in fitted),
        excluded=tuple((o.label, o.exclusion()) for o in observations if not o.fitted),
    )


def check_enough(data: Prepared, k: int) -> None:
    """At least max(MIN_POINTS, k + 1) estimated transitions at k or more distinct depths, so
    that χ²_red has a degree of freedom; censored pairs add information, not that check."""
    est = data.depth[data.estimated]
    distinct = sorted(set(est.tolist()))
    need = max(MIN_POINTS, k + 1)
    if est.size < need or len(distinct) < k:
        shown = ", ".join(f"{d:g}" for d in distinct) or "none"
        censored = int((~data.estimated).sum())
        also = f"; {censored} censored pair(s) in the likelihood" if censored else ""
        left = f"; {len(data.excluded)} pair(s) excluded" if data.excluded else ""
        raise InputError(
            f"fit needs at least {need} bracketed transitions at {k} or more distinct depths; "
            f"got {est.size} at depth(s) {shown}{also}{left}; bracket more depth pairs "
            "(widen the size range or add seeds)"
        )


# ---------------------------------------------------------------- the likelihood


def _censored_terms(
    mu: np.ndarray, data: Prepared
) -> tuple[NDArray[np.bool_], np.ndarray, np.ndarray, np.ndarray]:
    """w = direction·(μ − c)/s of the censored rows, and λ = φ(w)/Φ(w) (inverse Mills)."""
    cens = ~data.estimated
    w = data.direction[cens] * (mu[cens] - data.y[cens]) / data.sd[cens]
    log_cdf = special.log_ndtr(w)
    mills = np.exp(-0.5 * w * w - LOG_SQRT_2PI - log_cdf)
    return cens, w, log_cdf, mills


def negative_log_likelihood(
    theta: np.ndarray, design: np.ndarray, data: Prepared
) -> tuple[float, np.ndarray, np.ndarray]:
    """(−log L, gradient, Hessian) in θ."""
    mu = design @ theta
    est = data.estimated
    z = (data.y[est] - mu[est]) / data.sd[est]
    value = float(np.sum(0.5 * z * z + np.log(data.sd[est]) + LOG_SQRT_2PI))
    x_est = design[est] / data.sd[est, None]
    grad = -(x_est.T @ z)
    hess = x_est.T @ x_est
    cens, w, log_cdf, mills = _censored_terms(mu, data)
    if cens.any():
        x_c = design[cens] / data.sd[cens, None]
        value -= float(np.sum(log_cdf))
        grad -= x_c.T @ (mills * data.direction[cens])
        hess += (x_c * (mills * (w + mills))[:, None]).T @ x_c
    return value, grad, hess


def _start(design: np.ndarray, data: Prepared) -> np.ndarray:
    """Weighted least squares on the estimated transitions: the optimum without censoring."""
    est = data.estimated
    whitened = design[est] / data.sd[est, None]
    coef, *_ = np.linalg.lstsq(whitened, data.y[est] / data.sd[est], rcond=None)
    return coef


@dataclass(frozen=True)
class LikelihoodFit:
    """θ maximising the likelihood, its covariance (inverse observed information), log L."""

    theta: np.ndarray
    cov: np.ndarray
    log_likelihood: float
    chi2: float  # over the estimated transitions
    dof: int  # n_estimated − k


def maximise(design: np.ndarray, data: Prepared) -> LikelihoodFit:
    """The censored-normal maximum likelihood estimate of θ (see the module doc)."""
    start = _start(design, data)
    if (~data.estimated).any():
        # named functions, not lambdas: minimize's overloads type its callbacks, and a lambda
        # matches none of them
        def value_and_gradient(t: np.ndarray) -> tuple[float, np.ndarray]:
            return negative_log_likelihood(t, design, data)[:2]

        def hessian(t: np.ndarray) -> np.ndarray:
            return negative_log_likelihood(t, design, data)[2]

        result = optimize.minimize(
            value_and_gradient,
            start,
            jac=True,
            hess=hessian,
            method="trust-exact",
            options={"gtol": 1e-10},
        )
        theta = result.x
    else:
        theta = start
    value, _, hess = negative_log_likelihood(theta, design, data)
    cov = np.linalg.inv(hess)
    if not (np.all(np.isfinite(cov)) and np.all(np.diag(cov) > 0)):
        raise InputError(
            "fit: the likelihood's information matrix is singular (σ(ln N*) of "
            f"{data.sd.min() * 2:.2g} against {data.sd.max() * 2:.2g}); check the transitions' "
            "uncertainties"
        )
    est = data.estimated
    resid = (data.y[est] - design[est] @ theta) / data.sd[est]
    return LikelihoodFit(
        theta=theta,
        cov=cov,
        log_likelihood=-value,
        chi2=float(resid @ resid),
        dof=int(est.sum()) - design.shape[1],
    )


def linear_design(depth: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(depth), depth])


def _weighted_r2(y: np.ndarray, sd: np.ndarray, chi2: float) -> float:
    weight = 1.0 / sd**2
    total = float(np.sum(weight * (y - np.sum(weight * y) / np.sum(weight)) ** 2))
    return 1.0 - chi2 / total if total > 0 else math.nan


def fit_law(
    observations: Sequence[TransitionObservation],
    *,
    listed: Sequence[CensoredPair] | None = None,
) -> FitResult:
    """``ln dx* = a + b·L`` by the interval-censored likelihood (module doc).

    ``listed``: how the pairs that are not bracketed are described (default: from the
    observations); the ones with a bound are in the fit (``censored_fitted``)."""
    data = prepare(observations)
    check_enough(data, 2)
    result = maximise(linear_design(data.depth), data)
    (a, b), cov = result.theta, result.cov
    est = data.estimated
    by_label = {o.label: o for o in observations}
    return FitResult(
        a=float(a),
        b=float(b),
        se_a=math.sqrt(cov[0, 0]),
        se_b=math.sqrt(cov[1, 1]),
        cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
        r2=_weighted_r2(data.y[est], data.sd[est], result.chi2),
        chi2_red=result.chi2 / result.dof if result.dof > 0 else math.nan,
        dof=result.dof,
        n_points=int(est.sum()),
        depths=tuple(data.depth[est].tolist()),
        widths=tuple(np.exp(data.y[est]).tolist()),
        width_errs=tuple((np.exp(data.y[est]) * data.sd[est]).tolist()),
        labels=tuple(label for label, e in zip(data.labels, est, strict=True) if e),
        censored=tuple(listed)
        if listed is not None
        else tuple(o.as_censored_pair() for o in observations if o.status != BRACKETED),
        method="censored_mle",
        log_likelihood=result.log_likelihood,
        censored_fitted=tuple(lab for lab, e in zip(data.labels, est, strict=True) if not e),
        excluded=tuple((by_label[lab].label, why) for lab, why in data.excluded),
    )


RUNNING_FIT = "running fit"  # the name of running_law's law (a later wave's first sizes)


def running_law(
    observations: Sequence[TransitionObservation], fallback: DepthWidthLaw
) -> DepthWidthLaw:
    """The law fitted on the pairs refined so far (``ln dx* = a + b·L``, the fit stage's
    likelihood), or ``fallback`` where they give none with a positive slope (fewer than
    ``FIT_MIN_PAIRS`` bracketed, say): a later wave's first sizes are placed by it."""
    try:
        fit = fit_law(observations)
    except InputError:
        return fallback
    if not (math.isfinite(fit.a) and math.isfinite(fit.b) and fit.b > 0):
        return fallback
    labels = ", ".join(o.label for o in observations if o.fitted)
    return DepthWidthLaw.from_fit(fit, name=RUNNING_FIT, source=labels)
