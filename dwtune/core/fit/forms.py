"""The law's form is tested, not assumed: alternative forms on the same likelihood (pure).

Every form is linear in its parameters on the same response ``y = ln dx*`` with the same
censored-normal likelihood (:mod:`dwtune.core.fit.censored`), so their log-likelihoods are
comparable and AIC / BIC / an LR test apply directly:

- ``linear``:    ``ln dx* = a + b·L`` (the paper's law);
- ``quadratic``: ``ln dx* = a + b·L + c·L²`` (curvature; nests ``linear``, so the likelihood
  ratio ``2(ℓ_quadratic − ℓ_linear)`` is χ²₁ under the linear law: an exact test when no pair
  is censored, since the errors are Gaussian with known σ);
- ``power``:     the optimal depth is a power of the budget, ``L_opt = k·N^p``. The transition
  of depth L is where L is optimal, so ``ln N* = (ln L − ln k) / p``; on the width axis
  (``N* = 12·L·dx*²``) this is ``ln dx* = a' + b'·ln L`` with ``p = 1 / (1 + 2b')`` and
  ``ln k = −p·(ln 12 + 2a')``. Fitted with N* as the response (depth is exact, N* is the noisy
  quantity), which is the same law as regressing ln L on ln N* without its errors-in-variables
  bias.

AIC = 2k − 2ℓ, AICc = AIC + 2k(k+1)/(n−k−1) (small samples: a study has 5-7 pairs),
BIC = k·ln n − 2ℓ, with n the pairs in the likelihood (censored ones included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from dwtune.core.errors import InputError
from dwtune.core.fit.censored import (
    TransitionObservation,
    check_enough,
    linear_design,
    maximise,
    prepare,
)


@dataclass(frozen=True)
class LawForm:
    name: str
    formula: str
    params: tuple[str, ...]
    design: Callable[[np.ndarray], np.ndarray]


def _quadratic_design(depth: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(depth), depth, depth * depth])


def _power_design(depth: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(depth), np.log(depth)])


LINEAR = LawForm("linear", "ln dx* = a + b·L", ("a", "b"), linear_design)
QUADRATIC = LawForm("quadratic", "ln dx* = a + b·L + c·L²", ("a", "b", "c"), _quadratic_design)
POWER = LawForm("power", "L_opt = k·N^p  (ln dx* = a' + b'·ln L)", ("a'", "b'"), _power_design)
FORMS = (LINEAR, QUADRATIC, POWER)
LR_LEVEL = 0.05  # the LR test's size


class InformationCriteria:
    """AIC and AICc of a maximum-likelihood fit with ``k`` parameters on ``n`` points (AICc
    infinite where ``n - k - 1`` leaves no room for its correction)."""

    k: int
    n: int
    log_likelihood: float

    @property
    def aic(self) -> float:
        return 2.0 * self.k - 2.0 * self.log_likelihood

    @property
    def aicc(self) -> float:
        spare = self.n - self.k - 1
        return self.aic + 2.0 * self.k * (self.k + 1) / spare if spare > 0 else math.inf

    def criteria_dict(self) -> dict[str, object]:
        """The likelihood, its counts and both criteria, as fit.json writes them."""
        return {
            "log_likelihood": self.log_likelihood,
            "k": self.k,
            "n": self.n,
            "aic": self.aic,
            "aicc": self.aicc,
        }


def projection_rows(projections: dict[float, tuple[float, float]]) -> list[dict[str, float]]:
    """Budget -> (optimal depth, width) as fit.json's rows."""
    return [{"budget": n, "depth": d, "width": w} for n, (d, w) in projections.items()]


@dataclass(frozen=True)
class FormFit(InformationCriteria):
    """One form's maximum-likelihood fit, its information criteria and its projections."""

    form: str
    formula: str
    params: dict[str, float]
    se: dict[str, float]
    log_likelihood: float
    k: int
    n: int
    chi2_red: float
    dof: int
    projections: dict[float, tuple[float, float]]  # budget -> (optimal depth, width)

    @property
    def bic(self) -> float:
        return self.k * math.log(self.n) - 2.0 * self.log_likelihood

    def to_dict(self) -> dict[str, object]:
        return {
            "form": self.form,
            "formula": self.formula,
            "params": self.params,
            "se": self.se,
            **self.criteria_dict(),
            "bic": self.bic,
            "chi2_red": self.chi2_red,
            "dof": self.dof,
            "projections": projection_rows(self.projections),
        }


def transition_log_n(form: LawForm, theta: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """``ln N*(L) = ln(12·L) + 2·y(L)`` of a fitted form."""
    log_n: np.ndarray = np.log(12.0 * depth) + 2.0 * (form.design(depth) @ theta)
    return log_n


def optimal_depth(form: LawForm, theta: np.ndarray, budget: float) -> float:
    """Smallest depth whose transition size is ``budget`` (NaN if the form never reaches it).

    A log-spaced scan from 0.1 to 10⁶ layers, then Brent's method on the first sign change, so
    a quadratic whose transition size turns over is reported as NaN, not as a spurious root.
    """
    grid = np.geomspace(0.1, 1e6, 2049)
    gap = transition_log_n(form, theta, grid) - math.log(budget)
    rising = np.flatnonzero((gap[:-1] < 0) & (gap[1:] >= 0))
    if not rising.size:
        return math.nan
    i = int(rising[0])

    def f(d: float) -> float:
        return float(transition_log_n(form, theta, np.array([d]))[0] - math.log(budget))

    return optimize.brentq(f, grid[i], grid[i + 1], xtol=1e-10)


def _projections(
    form: LawForm, theta: np.ndarray, budgets: Sequence[float]
) -> dict[float, tuple[float, float]]:
    out: dict[float, tuple[float, float]] = {}
    for budget in budgets:
        depth = optimal_depth(form, theta, budget)
        width = math.sqrt(budget / (12.0 * depth)) if math.isfinite(depth) else math.nan
        out[float(budget)] = (depth, width)
    return out


def _power_constants(a: float, b: float) -> dict[str, float]:
    """p and k of ``L_opt = k·N^p`` from ``ln dx* = a' + b'·ln L`` (NaN where undefined)."""
    slope = 1.0 + 2.0 * b  # d ln N* / d ln L
    if slope == 0:
        return {"p": math.nan, "k": math.nan}
    p = 1.0 / slope
    log_k = -p * (math.log(12.0) + 2.0 * a)
    return {"p": p, "k": math.exp(log_k) if log_k < 709.0 else math.inf}


def fit_form(
    observations: Sequence[TransitionObservation], form: LawForm, budgets: Sequence[float] = ()
) -> FormFit:
    """Maximum-likelihood fit of one form (censored pairs included)."""
    data = prepare(observations)
    k = len(form.params)
    check_enough(data, k)
    result = maximise(form.design(data.depth), data)
    se = np.sqrt(np.diag(result.cov))
    params = dict(zip(form.params, result.theta.tolist(), strict=True))
    if form is POWER:
        params |= _power_constants(params["a'"], params["b'"])
    return FormFit(
        form=form.name,
        formula=form.formula,
        params=params,
        se=dict(zip(form.params, se.tolist(), strict=True)),
        log_likelihood=result.log_likelihood,
        k=k,
        n=int(data.depth.size),
        chi2_red=result.chi2 / result.dof if result.dof > 0 else math.nan,
        dof=result.dof,
        projections=_projections(form, result.theta, budgets),
    )


@dataclass(frozen=True)
class FormComparison:
    """Every form that could be fitted, the LR test of curvature and the preferred forms."""

    fits: tuple[FormFit, ...]
    skipped: tuple[tuple[str, str], ...]  # (form, why it could not be fitted)
    lr_statistic: float  # 2(ℓ_quadratic − ℓ_linear)
    lr_p_value: float

    def best(self, criterion: str) -> str:
        """Name of the form with the smallest ``aic``, ``aicc`` or ``bic``."""
        return min(self.fits, key=lambda f: getattr(f, criterion)).form

    @property
    def curvature_detected(self) -> bool:
        return self.lr_p_value < LR_LEVEL

    def to_dict(self) -> dict[str, object]:
        return {
            "forms": [f.to_dict() for f in self.fits],
            "skipped": [{"form": n, "reason": r} for n, r in self.skipped],
            "lr_test": {
                "null": LINEAR.name,
                "alternative": QUADRATIC.name,
                "statistic": self.lr_statistic,
                "dof": 1,
                "p_value": self.lr_p_value,
                "level": LR_LEVEL,
                "curvature_detected": self.curvature_detected,
            },
            "best_aic": self.best("aic") if self.fits else None,
            "best_aicc": self.best("aicc") if self.fits else None,
            "best_bic": self.best("bic") if self.fits else None,
        }


def compare_forms(
    observations: Sequence[TransitionObservation], budgets: Sequence[float] = ()
) -> FormComparison:
    """Fit every form; a form with too few pairs for its parameters is skipped with the reason."""
    fits, skipped = [], []
    for form in FORMS:
        try:
            fits.append(fit_form(observations, form, budgets))
        except InputError as exc:
            skipped.append((form.name, str(exc)))
    by_name = {f.form: f for f in fits}
    lr, p = math.nan, math.nan
    if LINEAR.name in by_name and QUADRATIC.name in by_name:
        lr = max(2.0 * (by_name["quadratic"].log_likelihood - by_name["linear"].log_likelihood), 0)
        p = float(stats.chi2.sf(lr, 1))
    return FormComparison(tuple(fits), tuple(skipped), lr, p)
