"""The transition analysis of a table of runs that dwtune did not train (pure: numpy).

Input: a :class:`RunTable` of plain columns, one row per run or per checkpoint of a run
(``depth``, ``width``, ``params``: the size N as the table counts it, never recomputed, and
``loss``; optionally ``seed``, ``tokens`` or ``step``, ``run``). Output: per depth pair, Δ
points and the transition from :func:`dwtune.core.refine.estimate.estimate_crossing`, the estimator
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
has are left out. Failures are outcomes, as in the refine stage (:mod:`dwtune.core.refine.points`):
a failed training (``failed`` rows) takes the worst loss its depth completed at that size; where
it completed none there, Δ is +inf (the deeper net failed) or −inf (the shallower one), which
the estimator counts as the pair's most extreme Δ of that sign; a seed where both failed is
dropped. Without common seeds (or without a seed column) the
groups are unpaired: Δ is each deeper run minus the mean of the moved shallower runs, and the
shallower mean's standard error joins ``extra_sd`` (from its own runs where it has two or more,
else from the deeper runs' spread: the same seed noise is assumed for both depths).

Noise (nats, the sd of one Δ). Where the pair has replicate runs (two or more Δ at a point:
several seeds of a shape), the seed-to-seed noise is learned from them as the refine stage
learns it (:func:`dwtune.core.refine.signs.pair_noise`, the 0.003-nats guess worth half a
pseudo-observation). Where it has one run per shape, each run's checkpoint-to-checkpoint
jitter about a smooth curve in ln tokens, pooled per depth (:mod:`.jitter`, which also says
what jitter cannot show). Where it has neither but 8 or more sizes along the pair's axis, Δ's
scatter about its own trend: a difference-based estimate, robust to the bends near N*, on the
degrees of freedom it is worth (:mod:`.scatter`, which also says what it cannot show). Where it
has none of these, the guess alone: on a quarter of a degree of freedom its t boundary is so
wide that nothing is decided, which is the honest answer. The output states the method of
every pair, and for a pair left undecided what would decide it
(:func:`~.verdicts.to_decide`).

Signs. Every point is judged by the one sign rule (:class:`dwtune.core.refine.signs.SignRule`)
with one look (a fixed table: all its runs at once) at ``--alpha`` (default 0.05): a sign
where ``|Δ|/se`` exceeds the two-sided Student-t quantile ``t(1 − α/2, dof)`` on the noise's
degrees of freedom, else *within noise*. The status and N* come from
:func:`dwtune.core.refine.estimate.estimate_crossing` with the same noise and rule.

Agreement with a law (``ln dx* = a + b·L``, ``N*(L) = 12·L·exp(2(a + b·L))`` in the paper's
convention ``N = 12·L·dx²``). The law's transitions are statements about neighbouring depths:
``N*(L)`` is where depth L starts to beat the depth before it. For a pair ``Ls < Ld`` with the
table's depths ``Ls < L1 < … < Ld`` the law therefore says, by transitivity along that chain:
the deeper net wins where ``N > N*(Ld)`` (every link wins; the law's optimal depth ``L*(N)``,
the depth whose transition size is N, is at least Ld), loses where ``N < N*(L1)`` (every link
loses; ``L*(N) < L1``), and is silent between (``L1 ≤ L*(N) ≤ Ld``: some links win, some
lose, and the law does not say which sum is larger): *no prediction*. For an adjacent pair
``L1 = Ld``: the law's N*(Ld) rule, silent only at N*(Ld) itself. (Reading "loses where
``L*(N) ≤ Ls``" instead would not reduce to that rule: it would leave an adjacent pair
silent over the whole range N*(Ls) to N*(Ld), 3.3e6 to 1.3e7 for pair 6-12 under
levine2020.) A fitted law is also silent inside its own 95% interval of N*(Ld) and N*(L1).
A point *agrees* where the rule's sign is the law's, *disagrees* where the rule decided the
opposite sign, and is *within noise* where the rule decided none.

The agreement as a test. If the law is right, the true Δ at each point where it predicts a
sign has that sign (or is 0 at a transition), so the rule decides the opposite sign there with
probability at most α/2 (its one-sided false-sign rate). The number of disagreements among the
``m`` points with a prediction is then at most Binomial(m, α/2); the law is rejected where the
one-sided binomial p-value (scipy.stats.binomtest) is below α. Caveats: points of adjacent
pairs share a depth's runs and so are not independent (a shared run that is off by chance
moves two points together; the binomial tail is then too thin and the test rejects somewhat too
often); the law's constants are taken as exact unless it carries an interval; and with noise
from checkpoint jitter the test inherits jitter's blindness to seed-to-seed variation.

The law fit (``ln dx* = a + b·L``) is the interval-censored likelihood
(:func:`dwtune.core.fit.fit_law`): bracketed pairs with their N*, censored pairs and undecided
pairs with a one-sided bound with that bound
(:func:`dwtune.core.fit.bootstrap.observation_from_estimate`).

Tokens: :mod:`.tokens`. Pairs that cannot be analysed (sizes that never meet within the
window, no Δ, no size trend) are skipped with their reason; the analysis fails only where no
pair can be analysed.
"""

from dwtune.core.analysis.jitter import JitterModel, jitter_model
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
from dwtune.core.analysis.table import (
    Checkpoints,
    RunTable,
    run_name,
    select_checkpoints,
    validate,
)
from dwtune.core.analysis.tokens import TokenGap, pair_token_gap, target_misses
from dwtune.core.analysis.verdicts import (
    DEFAULT_ALPHA,
    AgreementTest,
    LawView,
    PairAnalysis,
    agreement_test,
    analyse_pair,
    analysis_rule,
    fit_observations,
    noise_range,
    pair_verdicts,
    point_verdict,
)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_WINDOW",
    "AgreementTest",
    "Checkpoints",
    "JitterModel",
    "LawView",
    "MatchedPoint",
    "PairAnalysis",
    "RunTable",
    "SizeGroup",
    "TokenGap",
    "Trend",
    "agreement_test",
    "analyse_pair",
    "analysis_rule",
    "choose_pairs",
    "fit_observations",
    "jitter_model",
    "match_sizes",
    "noise_range",
    "pair_points",
    "pair_token_gap",
    "pair_verdicts",
    "parse_pairs",
    "point_verdict",
    "run_name",
    "select_checkpoints",
    "size_groups",
    "target_misses",
    "validate",
]
