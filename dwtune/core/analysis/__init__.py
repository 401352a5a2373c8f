"""The transition analysis of a table of runs that dwtune did not train (pure: numpy).

Input: a :class:`RunTable` of plain columns, one row per run or per checkpoint of a run
(``depth``, ``width``, ``params``: the size N as the table counts it, never recomputed, and
``loss``; optionally ``seed``, ``tokens`` or ``step``, ``run``). Output: per depth pair, Δ
points and the transition from :func:`dwtune.core.crossing.estimate_crossing`, the estimator
the refine stage uses (this module computes no N* of its own).

Checkpoints. Rows that share a run (the ``run`` column; else, in a table with ``tokens`` or
``step``, depth, width, params and seed; else every row is its own run) are checkpoints of
it: the last one (largest ``tokens``, else ``step``, else the last row) is used, or with
``tokens=T`` the one nearest to T tokens in ``ln`` tokens.

Matching. For a pair ``Ls < Ld`` the runs of each depth are grouped by size (equal ``params``).
A deeper group and a shallower group are compared when their sizes lie within the window:
``|ln N_d − ln N_s| ≤ window`` (default 0.25, sizes within a factor e^0.25 ≈ 1.28). Each group
is used at most once per pair, closest sizes first. Δ is taken at the deeper net's size
``N_d``: the shallower loss is moved there along a size trend of ``ln loss`` in ``ln N``::

    loss_s(N_d) = loss_s(N_s) · exp(c · (ln N_d − ln N_s))

with ``c`` the least-squares slope of ``ln loss`` on ``ln N`` over the shallower depth's own
runs at sizes within ``TREND_SPAN`` e-folds of the two sizes' midpoint (the
``TREND_MIN_SIZES`` nearest sizes where fewer lie there): the *own* trend. A depth with too few
runs for that (fewer than 2 sizes, or no residual degree of freedom) uses one slope shared by
all depths, each with its own intercept, over the same neighbourhood of every depth's runs: the
*pooled* trend. The slope's standard error (from the fit's residuals) times ``|ln N_d − ln N_s|``
times the loss is the trend's uncertainty in Δ; it is shared by every seed of the point, so it
enters the estimator as ``DeltaPoint.extra_sd``. Equal sizes need no trend (``none``).

Seeds. Where both groups have seeds in common, Δ is paired seed by seed; seeds only one side
has are left out. Failures are outcomes, as in the refine stage (:mod:`dwtune.core.pair_points`):
a failed training (``failed`` rows) takes the worst loss its depth completed at that size; where
it completed none there, Δ is +inf (the deeper net failed) or −inf (the shallower one), which
the estimator counts as the pair's most extreme Δ of that sign; a seed where both failed is
dropped. Without common seeds (or without a seed column) the
groups are unpaired: Δ is each deeper run minus the mean of the moved shallower runs, and the
shallower mean's standard error joins ``extra_sd`` (from its own runs where it has two or more,
else from the deeper runs' spread: the same seed noise is assumed for both depths).

Agreement with a law (``ln dx* = a + b·L``): the law predicts ``N*(Ld) = 12·Ld·exp(2(a + b·Ld))``
in the paper's convention ``N = 12·L·dx²``; a point below it should have Δ > 0 (the deeper net
loses), above it Δ < 0. A point whose Δ lies within ``DECIDE_Z`` of its uncertainty (the
estimator's own threshold) is *within noise*, not a disagreement; a point inside the law's own
95% interval of N* (a fitted law) gets no prediction.
"""

from dwtune.core.analysis.matching import (
    DEFAULT_WINDOW,
    MatchedPoint,
    SizeGroup,
    Trend,
    choose_pairs,
    match_sizes,
    pair_points,
    parse_pairs,
    size_groups,
)
from dwtune.core.analysis.table import Checkpoints, RunTable, select_checkpoints, validate
from dwtune.core.analysis.verdicts import (
    FitPoints,
    LawView,
    PairAnalysis,
    agreement_line,
    analyse_pair,
    fit_points,
    pair_verdicts,
    point_verdict,
)

__all__ = [
    "DEFAULT_WINDOW",
    "Checkpoints",
    "FitPoints",
    "LawView",
    "MatchedPoint",
    "PairAnalysis",
    "RunTable",
    "SizeGroup",
    "Trend",
    "agreement_line",
    "analyse_pair",
    "choose_pairs",
    "fit_points",
    "match_sizes",
    "pair_points",
    "pair_verdicts",
    "parse_pairs",
    "point_verdict",
    "select_checkpoints",
    "size_groups",
    "validate",
]
