"""The transition-law fit (pure: numpy, scipy).

- :mod:`.wls`: weighted least squares of ``ln dx* = a + b·L`` over bracketed transitions (the
  published tables' method), its result type and the interval helpers;
- :mod:`.censored`: the interval-censored likelihood that keeps censored pairs in the fit;
- :mod:`.forms`: alternative law forms (curvature, power law) with AIC/BIC and an LR test;
- :mod:`.competing`: competing published laws (levine2020, separable width and depth terms) on
  the same pairs, compared by AICc and leave-one-pair-out error;
- :mod:`.loo`: leave-one-pair-out projections;
- :mod:`.bootstrap`: the study-level bootstrap (seeds resampled jointly across pairs).
"""

from dwtune.core.fit.censored import TransitionObservation, fit_law
from dwtune.core.fit.wls import (
    MIN_POINTS,
    CensoredPair,
    FitResult,
    chi2_tail,
    fit_transitions,
    residual_z,
)
from dwtune.core.intervals import interval_quantile, line_with_se, z_value

__all__ = [
    "MIN_POINTS",
    "CensoredPair",
    "FitResult",
    "TransitionObservation",
    "chi2_tail",
    "fit_law",
    "fit_transitions",
    "interval_quantile",
    "line_with_se",
    "residual_z",
    "z_value",
]
