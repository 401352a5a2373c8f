"""Projection of the transition law to any budget (pure: numpy, scipy).

With ``ln dx* = a + b·L`` and the paper's size convention ``N = 12·L·dx²``, the transition size
of depth ``L`` is ``N*(L) = 12·L·exp(2(a + b·L))``. The optimal depth for a budget ``N`` is the
depth whose transition size is ``N``. Substituting ``x = 2·b·L`` gives ``x·eˣ = N·b·e^(-2a)/6``,
so ``L = W₀(N·b·e^(-2a)/6) / (2b)`` with ``W₀`` the principal Lambert W branch (unique for b > 0).
The width there is ``exp(a + b·L)``, equivalently ``sqrt(N / (12·L))``.

Intervals (at ``level``, default 95%) come from the fit's covariance of (a, b), without Monte
Carlo and without linearising the projection. Their half-width is ``q·se`` with the fit's own
quantile ``q`` (``dwtune.core.intervals.interval_quantile``: Student's t scaled by the
transitions' scatter about the law, their stated σ a prior worth a quarter of a pseudo-observation);
below, ``z`` stands for that ``q``.

- depth -> transition size: ``ln N*(L) = ln(12L) + 2(a + bL)`` is linear in (a, b), so its
  standard error is exactly ``2·sqrt([1, L] cov [1, L]ᵀ)`` and the interval is exact for Gaussian
  (a, b); the width ``exp(a + bL)`` likewise.
- budget -> optimal depth: the interval is the set of depths whose transition-size interval
  contains ``N`` (inverting the band, as in calibration / Fieller intervals). At the true optimal
  depth the estimated ``ln N*`` is Gaussian around ``ln N``, so the coverage is exactly nominal;
  a delta method would instead assume ``L`` linear in (a, b), which fails far outside the fitted
  depths, and the interval it gives is symmetric where the truth is not. When the slope is not
  significantly positive at the level (b <= z·se_b) the set is unbounded above and the upper
  end is ``inf``: the data cannot rule out that any depth is still too shallow, and the
  projection says so. (In that case the set can have a gap; the reported interval is its
  hull, so the coverage is then at least nominal.)
- the width at the optimal depth is ``sqrt(N / (12·L))``, decreasing in ``L``, so its interval is
  the image of the depth interval (same coverage).

A law without covariance (the published reference) has NaN intervals.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy import optimize, special

from dwtune.core.errors import InputError
from dwtune.core.intervals import interval_quantile, line_with_se
from dwtune.core.units import parse_size
from dwtune.core.vocabulary import LEVEL

# Upper end of the search for the depth interval, in layers; beyond it the end is reported inf.
MAX_DEPTH = 1e9


class FittedLine(Protocol):
    """What a projection takes from a fit of ``ln dx* = a + b·L``
    (``dwtune.core.fit.FitResult``); named here so that the projection needs no fit."""

    @property
    def a(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def cov(self) -> tuple[tuple[float, float], tuple[float, float]]: ...
    @property
    def chi2_red(self) -> float: ...
    @property
    def dof(self) -> int: ...


@dataclass(frozen=True)
class DepthWidthLaw:
    """``ln dx* = a + b·L`` with an optional covariance of (a, b) for intervals."""

    name: str
    a: float
    b: float
    cov: tuple[tuple[float, float], tuple[float, float]] | None = None
    source: str = ""
    # The fit's scatter about the law (what widens its intervals); NaN / 0: none known.
    chi2_red: float = math.nan
    dof: int = 0

    @classmethod
    def from_fit(cls, fit: FittedLine, name: str = "study", source: str = "") -> DepthWidthLaw:
        return cls(name, fit.a, fit.b, fit.cov, source, fit.chi2_red, fit.dof)

    @property
    def has_intervals(self) -> bool:
        return self.cov is not None

    def quantile(self, level: float) -> float:
        """Half-width of a ``level`` interval in standard errors (the fit's rule)."""
        return interval_quantile(level, self.chi2_red, self.dof)


def no_projection_reason(fit: FittedLine) -> str:
    """Why a fit gives no projection ("" when it does): the slope must be positive."""
    if fit.b > 0:
        return ""
    return f"fitted slope b = {fit.b:.3g} is not positive: no optimal depth to project"


# Levine et al. 2020 (arXiv 2006.12467), published constants, natural log; no covariance given.
LEVINE2020 = DepthWidthLaw(
    name="levine2020",
    a=5.039,
    b=0.0555,
    source="Levine, Wies, Sharir, Bata, Shashua, NeurIPS 2020 (arXiv 2006.12467)",
)
REFERENCES = {LEVINE2020.name: LEVINE2020}


@dataclass(frozen=True)
class BudgetProjection:
    """Optimal depth and width for a budget (parameters, paper convention N = 12·L·dx²)."""

    law: str
    budget: float
    depth: float
    width: float
    depth_lo: float
    depth_hi: float
    width_lo: float
    width_hi: float
    level: float


@dataclass(frozen=True)
class DepthProjection:
    """Transition size and width for a depth: deeper nets pay off only above ``n_star``."""

    law: str
    depth: float
    n_star: float
    width: float
    n_lo: float
    n_hi: float
    width_lo: float
    width_hi: float
    level: float


def parse_budget(text: object, field: str = "budget") -> float:
    """``"1.75e11"``, ``"175B"``, ``"1T"``, ``"50M"``, ``"300k"`` -> parameters (InputError else).

    A thin name over ``dwtune.core.units.parse_size``, which owns the grammar.
    """
    return parse_size(text, field=field)


def reference(name: str) -> DepthWidthLaw:
    if name not in REFERENCES:
        known = ", ".join(sorted(REFERENCES))
        raise InputError(f"--reference: got {name!r}; expected a published fit: {known}")
    return REFERENCES[name]


def _check_slope(law: DepthWidthLaw) -> None:
    if not (math.isfinite(law.a) and math.isfinite(law.b) and law.b > 0):
        raise InputError(
            f"fit {law.name}: slope b = {law.b!r} is not positive, so the transition width does "
            "not grow with depth and no optimal depth exists; check the transitions behind it"
        )


def _exp(x: float) -> float:
    """exp that saturates to inf instead of raising (absurd depths of ~10⁴ layers)."""
    return math.inf if x > 709.0 else math.exp(x)  # NaN stays NaN


def transition_size(law: DepthWidthLaw, depth: float) -> float:
    """``N*(L) = 12·L·exp(2(a + b·L))`` in parameters."""
    return 12.0 * depth * _exp(2.0 * (law.a + law.b * depth))


def optimal_depth(law: DepthWidthLaw, budget: float) -> float:
    """The depth whose transition size is ``budget``: ``W₀(N·b·e^(-2a)/6) / (2b)``."""
    _check_slope(law)
    # The argument in logs, so that a large a (e^(-2a) -> 0) or budget cannot over/underflow
    # before they cancel; z > 0, where W₀ is real and increasing.
    z = _exp(math.log(budget) + math.log(law.b) - 2.0 * law.a - math.log(6.0))
    return float(special.lambertw(z, 0).real) / (2.0 * law.b)


def _log_n_and_se(law: DepthWidthLaw, depth: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ln N*(L)`` and its standard error (0 without covariance)."""
    cov = np.array(law.cov if law.cov is not None else np.zeros((2, 2)), dtype=float)
    line, se = line_with_se(law.a, law.b, cov, depth)
    return np.log(12.0 * np.asarray(depth, dtype=float)) + 2.0 * line, 2.0 * se


def project_depth(law: DepthWidthLaw, depth: float, level: float = LEVEL) -> DepthProjection:
    """Transition size and width at ``depth``, with exact intervals (see module doc)."""
    if not (math.isfinite(depth) and depth > 0):
        raise InputError(f"--depth: got {depth!r}; expected a positive number of layers")
    log_n, se = (float(v) for v in _log_n_and_se(law, depth))
    half = law.quantile(level) * se if law.has_intervals else math.nan
    root = math.sqrt(12.0 * depth)  # width = sqrt(N / 12L)
    return DepthProjection(
        law=law.name,
        depth=float(depth),
        n_star=_exp(log_n),
        width=_exp(log_n / 2.0) / root,
        n_lo=_exp(log_n - half),
        n_hi=_exp(log_n + half),
        width_lo=_exp((log_n - half) / 2.0) / root,
        width_hi=_exp((log_n + half) / 2.0) / root,
        level=level,
    )


def _band_edge(
    law: DepthWidthLaw, budget: float, z: float, sign: float
) -> Callable[[float | np.ndarray], np.ndarray]:
    """``ln N*(L) + sign·z·se(L) - ln N`` (vectorised): the depth set's ends are its zeros."""

    def edge(depth: float | np.ndarray) -> np.ndarray:
        log_n, se = _log_n_and_se(law, depth)
        return log_n + sign * z * se - math.log(budget)

    return edge


def _first_crossing(
    edge: Callable[[float | np.ndarray], np.ndarray], low: float, high: float
) -> float:
    """Smallest depth in [low, high] where ``edge`` turns non-negative (``edge(high) > 0``).

    A log-spaced scan first, so that with a weak slope, where ``edge`` need not be monotone,
    the smallest root is found and the reported interval holds the whole set.
    """
    grid = np.geomspace(low, high, 257)
    values = edge(grid)
    if values[0] >= 0:
        return 0.0  # even the shallowest depth tried is inside: the set reaches down to 0
    i = int(np.argmax(values >= 0))
    return optimize.brentq(lambda d: float(edge(d)), grid[i - 1], grid[i])


def _depth_interval(
    law: DepthWidthLaw, budget: float, best: float, z: float
) -> tuple[float, float]:
    """Hull of the depths whose transition-size interval contains ``budget``.

    ``ln N*(L) - z·se(L)`` is concave in L with limiting slope ``2(b - z·se_b)``. If the slope
    is significant (b > z·se_b) it rises monotonically and crosses ``ln N`` once: a finite
    upper end. Otherwise it falls again for large L, so arbitrarily deep nets stay inside the
    set and the upper end is inf.
    """
    if float(_log_n_and_se(law, best)[1]) == 0.0:
        return best, best  # an exact law (zero covariance): the interval is the point
    lower = _first_crossing(_band_edge(law, budget, z, +1.0), best * 1e-12, best)
    assert law.cov is not None  # without a covariance se is 0: returned above
    if law.b <= z * math.sqrt(law.cov[1][1]):
        return lower, math.inf
    upper_edge = _band_edge(law, budget, z, -1.0)  # < 0 at best, increasing
    far = 2.0 * best
    while upper_edge(far) <= 0:
        if far > MAX_DEPTH:
            return lower, math.inf
        far *= 2.0
    return lower, optimize.brentq(lambda d: float(upper_edge(d)), best, far)


def project_budget(law: DepthWidthLaw, budget: float, level: float = LEVEL) -> BudgetProjection:
    """Optimal depth and width for ``budget``, with intervals (see module doc)."""
    if not (math.isfinite(budget) and budget > 0):
        raise InputError(f"budget: got {budget!r}; expected a positive number of parameters")
    depth = optimal_depth(law, budget)
    lo, hi = (math.nan, math.nan)
    if law.has_intervals:
        lo, hi = _depth_interval(law, budget, depth, law.quantile(level))

    def width(d: float) -> float:
        # sqrt(N / 12L): d = inf -> 0, d = 0 -> inf, NaN (no covariance) stays NaN.
        return math.sqrt(budget / (12.0 * d)) if d > 0 else (math.inf if d == 0 else math.nan)

    return BudgetProjection(
        law=law.name,
        budget=float(budget),
        depth=depth,
        width=math.exp(law.a + law.b * depth),
        depth_lo=lo,
        depth_hi=hi,
        width_lo=width(hi),
        width_hi=width(lo),
        level=level,
    )
