"""Weighted least-squares fit of the transition law ``ln dx* = a + b·L`` (pure: numpy, scipy).

The method of the published tables (bracketed points only). A study's own transitions are
fitted by :func:`dwtune.core.fit.censored.fit_law`, which keeps censored pairs in the fit and
equals this fit exactly when there are none.

Each bracketed transition gives a point: the deeper net's depth ``L`` and its width ``dx*`` at
the transition, with an uncertainty ``width_err`` (same units as the width). On the log scale the
uncertainty is ``sigma = width_err / width`` (first-order error propagation of ``ln``), and each
point is weighted by ``1 / sigma²``.

Standard errors and intervals. The covariance is ``(Xᵀ W X)⁻¹`` with the uncertainties taken
as absolute (``absolute_sigma=True`` in scipy's words): ``se_a``, ``se_b`` and ``cov`` are
never rescaled. The intervals are not built from them alone: a ``level`` interval is
``estimate ± q·se`` with

    q = t_level,n · s,   n = ν₀ + dof,   s² = (ν₀ + dof·χ²_red) / n

(:func:`interval_quantile`, ν₀ = ``SCALE_PRIOR_DOF`` = 0.25). The stated σ(ln N*) are a prior
on the scale of the transitions' errors, worth ν₀ pseudo-observations, never taken as known:
the scatter about the law (χ²_red on ``dof``) updates it, and t on ``n`` degrees of freedom
carries how uncertain the learned scale still is with the 3-7 pairs a study has. Why learned:
each pair's σ(ln N*) is conservative by construction (its interval holds the chord's
replicates with and without the kink correction and the broken stick's profile band), so the
pairs scatter less than their σ say, and a rule that never went below the normal interval
over-covers. Why not ν₀ = 0 (Student's t alone): the pairs' σ overstate their errors unevenly,
and t alone under-covers. The figures: docs/method.md ("The fit's interval rule").
``chi2_red`` is reported beside the errors as the check: near 1 (the paper's 0.854) means the
transitions scatter as their σ say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dwtune.core.errors import InputError
from dwtune.core.intervals import interval_quantile, line_with_se
from dwtune.core.vocabulary import CENSORED_STATUSES, FIT_MIN_PAIRS, LEVEL, TransitionStatus

MIN_POINTS = FIT_MIN_PAIRS  # two parameters and a point more to test them (dof >= 1)


@dataclass(frozen=True)
class CensoredPair:
    """A depth pair whose transition was not bracketed, so it is listed but not fitted.

    ``status`` is ``censored_low`` (the deeper net already won at the smallest size tried),
    ``censored_high`` (it never won inside the range) or ``undecided`` (Δ within noise).
    ``n_low``/``n_high`` are the bracket bounds in parameters (NaN where unknown).
    """

    pair: str
    status: str
    depth_shallow: int
    depth_deep: int
    n_low: float = math.nan
    n_high: float = math.nan
    seeds: int = 0

    @property
    def bound(self) -> float:
        """The finite limit on N* the censoring gives (parameters), NaN if none.

        censored_high: N* lies above the largest size tried, so the larger bracket bound;
        censored_low: N* lies below the smallest size tried, so the smaller one.
        """
        known = [n for n in (self.n_low, self.n_high) if math.isfinite(n) and n > 0]
        if self.status == TransitionStatus.UNDECIDED and len(known) == 1:
            return known[0]  # an undecided pair's one-sided bound (dwtune.core.refine.estimate)
        if not known or self.status not in CENSORED_STATUSES:
            return math.nan
        return max(known) if self.status == TransitionStatus.CENSORED_HIGH else min(known)

    @property
    def direction(self) -> int | None:
        """+1 where N* lies above the bound, −1 below, None where the pair bounds nothing."""
        if not math.isfinite(self.bound):
            return None
        if self.status == TransitionStatus.UNDECIDED:
            return +1 if math.isfinite(self.n_low) else -1
        return +1 if self.status == TransitionStatus.CENSORED_HIGH else -1

    def describe(self) -> str:
        """One plain sentence: what was found for this pair, and on how many seeds."""
        seeds = f"{self.seeds} seed{'s' if self.seeds != 1 else ''}"
        if self.status == TransitionStatus.CENSORED_HIGH:
            found = f"depth {self.depth_deep} never beat depth {self.depth_shallow}"
            where = f" up to N = {self.bound:.3g}" if math.isfinite(self.bound) else ""
            return f"{found}{where}: transition above the range ({seeds})"
        if self.status == TransitionStatus.CENSORED_LOW:
            found = f"depth {self.depth_deep} already beat depth {self.depth_shallow}"
            where = f" at N = {self.bound:.3g}" if math.isfinite(self.bound) else ""
            return f"{found}{where}: transition below the range ({seeds})"
        if self.status == TransitionStatus.UNDECIDED:
            if self.direction == +1:
                return (
                    f"undecided above N = {self.bound:.3g}: depth {self.depth_deep} loses to "
                    f"depth {self.depth_shallow} up to there, then Δ is within noise; "
                    f"N* > {self.bound:.3g} ({seeds})"
                )
            if self.direction == -1:
                return (
                    f"undecided below N = {self.bound:.3g}: depth {self.depth_deep} beats "
                    f"depth {self.depth_shallow} from there on, Δ within noise below; "
                    f"N* < {self.bound:.3g} ({seeds})"
                )
            span = f" between N = {self.n_low:.3g} and {self.n_high:.3g}" if self._bracket else ""
            return f"undecided: Δ within seed noise{span} ({seeds})"
        return f"status {self.status!r}: not bracketed ({seeds})"

    @property
    def _bracket(self) -> bool:
        return math.isfinite(self.n_low) and math.isfinite(self.n_high)


@dataclass(frozen=True)
class FitResult:
    """``ln dx* = a + b·L`` fitted by weighted least squares (natural log, dx in units of width)."""

    a: float
    b: float
    se_a: float
    se_b: float
    cov: tuple[tuple[float, float], tuple[float, float]]  # of (a, b), absolute sigma
    r2: float  # weighted coefficient of determination
    chi2_red: float  # chi² / dof with the given uncertainties
    dof: int
    n_points: int
    depths: tuple[float, ...]
    widths: tuple[float, ...]
    width_errs: tuple[float, ...]
    labels: tuple[str, ...]
    censored: tuple[CensoredPair, ...] = ()
    # "wls" (bracketed points only) or "censored_mle" (see dwtune.core.fit.censored).
    method: str = "wls"
    log_likelihood: float = math.nan  # of the Gaussian (and censored) terms at the estimate
    # Censored pairs that entered the likelihood, by label (the rest of ``censored`` is listed).
    censored_fitted: tuple[str, ...] = ()
    excluded: tuple[tuple[str, str], ...] = ()  # (label, reason) of pairs left out of the fit

    @property
    def cov_matrix(self) -> np.ndarray:
        return np.array(self.cov, dtype=float)

    def quantile(self, level: float = LEVEL) -> float:
        """Half-width of a ``level`` interval in standard errors (see module doc)."""
        return interval_quantile(level, self.chi2_red, self.dof)

    def interval(self, name: str, level: float = LEVEL) -> tuple[float, float]:
        """Two-sided interval for ``a`` or ``b``: ``value ± quantile(level)·se``."""
        value, se = {"a": (self.a, self.se_a), "b": (self.b, self.se_b)}[name]
        half = self.quantile(level) * se
        return value - half, value + half

    def line(self, depths: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fitted ``ln dx`` at ``depths`` and its standard error (pointwise, from ``cov``)."""
        return line_with_se(self.a, self.b, self.cov_matrix, depths)


def chi2_tail(chi2_red: float, dof: int) -> float:
    """P(χ²_dof ≥ chi2_red·dof): how often correct uncertainties give a χ²_red this large.

    Why: with the 3-7 transitions a study has, χ²_red alone is hard to read (for 4 degrees of
    freedom 5% of studies with exact σ(ln N*) exceed 2.37); its tail probability is not."""
    if dof <= 0 or not math.isfinite(chi2_red):
        return math.nan
    return float(stats.chi2.sf(chi2_red * dof, dof))


def residual_z(
    a: float,
    b: float,
    depths: Sequence[float] | np.ndarray,
    widths: Sequence[float] | np.ndarray,
    errs: Sequence[float] | np.ndarray,
) -> np.ndarray:
    """Each transition's distance from the law in its own σ: ``(ln dx* − a − b·L)/σ(ln dx*)``."""
    depth, width, err = (np.asarray(v, dtype=float) for v in (depths, widths, errs))
    z: np.ndarray = (np.log(width) - (a + b * depth)) / (err / width)
    return z


def _as_array(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: expected numbers ({exc})") from exc


def _check_positive(values: np.ndarray, name: str, labels: Sequence[str], fix: str) -> None:
    """Every value finite and > 0, else one line naming the first bad point and the fix."""
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        got = float(values[i])
        raise InputError(
            f"{name} at {labels[i]}: got {got!r}; expected a positive finite number; {fix}"
        )


def _validated(
    depths: Sequence[float] | np.ndarray,
    widths: Sequence[float] | np.ndarray,
    width_errs: Sequence[float] | np.ndarray,
    labels: Sequence[str] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """Arrays of equal length with positive, finite entries; labels name points in errors."""
    depth = _as_array(depths, "depth")
    width = _as_array(widths, "width")
    err = _as_array(width_errs, "width_err")
    if not depth.size == width.size == err.size:
        raise InputError(
            f"depth, width, width_err: lengths {depth.size}, {width.size}, {err.size} differ; "
            "give one value of each per transition"
        )
    names = list(labels) if labels is not None else [f"point {i + 1}" for i in range(depth.size)]
    _check_positive(depth, "depth", names, "depths count layers")
    _check_positive(width, "width", names, "dx* must be > 0 to take its log")
    _check_positive(err, "width_err", names, "give each transition a measured uncertainty > 0")
    _check_relative_errors(width, err, names)
    return depth, width, err, tuple(names)


# σ(ln dx*) below this is no measurement (seeds alone move dx* by percents), and its weight
# 1/σ² overflows the fit's arithmetic long before σ reaches the smallest float.
MIN_RELATIVE_ERR = 1e-6


def _check_relative_errors(width: np.ndarray, err: np.ndarray, labels: Sequence[str]) -> None:
    small = err < MIN_RELATIVE_ERR * width
    if small.any():
        i = int(np.flatnonzero(small)[0])
        raise InputError(
            f"width_err at {labels[i]}: got {float(err[i])!r} for width {float(width[i]):g}; "
            f"expected at least {MIN_RELATIVE_ERR:g} of the width (a measured uncertainty)"
        )


def _check_enough(depth: np.ndarray, censored: Sequence[CensoredPair]) -> None:
    distinct = sorted(set(depth.tolist()))
    shown = ", ".join(f"{d:g}" for d in distinct) or "none"
    listed = f"; {len(censored)} pair(s) censored, not fitted" if censored else ""
    if depth.size < MIN_POINTS or len(distinct) < 2:
        raise InputError(
            f"fit needs at least {MIN_POINTS} bracketed transitions at 2 or more distinct depths; "
            f"got {depth.size} at depth(s) {shown}{listed}; bracket more depth pairs "
            "(widen the size range or add seeds)"
        )


def fit_transitions(
    depths: Sequence[float] | np.ndarray,
    widths: Sequence[float] | np.ndarray,
    width_errs: Sequence[float] | np.ndarray,
    *,
    labels: Sequence[str] | None = None,
    censored: Sequence[CensoredPair] = (),
) -> FitResult:
    """Weighted least squares of ``ln width = a + b·depth`` (see the module doc for the errors)."""
    depth, width, err, names = _validated(depths, widths, width_errs, labels)
    _check_enough(depth, censored)
    y = np.log(width)
    sigma = err / width  # sigma of ln(width), dimensionless
    # Whitened system: rows divided by sigma, so ordinary least squares minimises chi².
    design = np.column_stack([np.ones_like(depth), depth]) / sigma[:, None]
    coef, _, _, _ = np.linalg.lstsq(design, y / sigma, rcond=None)
    cov = np.linalg.inv(design.T @ design)
    resid = residual_z(coef[0], coef[1], depth, width, err)
    dof = depth.size - 2
    return FitResult(
        a=float(coef[0]),
        b=float(coef[1]),
        se_a=float(math.sqrt(cov[0, 0])),
        se_b=float(math.sqrt(cov[1, 1])),
        cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
        r2=_weighted_r2(y, resid, sigma),
        chi2_red=float(resid @ resid) / dof,
        dof=dof,
        n_points=int(depth.size),
        depths=tuple(depth.tolist()),
        widths=tuple(width.tolist()),
        width_errs=tuple(err.tolist()),
        labels=names,
        censored=tuple(censored),
    )


def _weighted_r2(y: np.ndarray, whitened_resid: np.ndarray, sigma: np.ndarray) -> float:
    """``1 - chi² / Σ w (y - ȳ_w)²``: the share of the weighted spread the line explains."""
    weight = 1.0 / sigma**2
    mean = float(np.sum(weight * y) / np.sum(weight))
    total = float(np.sum(weight * (y - mean) ** 2))
    return 1.0 - float(whitened_resid @ whitened_resid) / total if total > 0 else math.nan
