"""``dwtune analyze`` from a runs table to an :class:`~.result.AnalysisResult` (pure).

Checkpoints are picked, the noise model built, every chosen pair analysed (one that cannot be
is skipped with its reason), each point held against a reference law where one is given, and
the censored fit made where enough pairs cross. The logic is in the package's other modules
and :mod:`dwtune.core.refine.estimate` (N* and its intervals); the fit is :mod:`dwtune.core.fit`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.analysis.jitter import JitterModel, jitter_model
from dwtune.core.analysis.loss_law import fit_separable_losses
from dwtune.core.analysis.matching import SizeGroup, choose_pairs, size_groups
from dwtune.core.analysis.result import (
    AnalysedPair,
    AnalysisResult,
    NoiseSummary,
    Reference,
    ReferenceCheck,
    Skipped,
    TableFit,
    TokenSummary,
)
from dwtune.core.analysis.table import Checkpoints, RunTable, select_checkpoints, validate
from dwtune.core.analysis.tokens import pair_token_gap, target_misses
from dwtune.core.analysis.verdicts import (
    DEFAULT_ALPHA,
    LawView,
    PairAnalysis,
    agreement_test,
    analyse_pair,
    analysis_rule,
    fit_observations,
    pair_verdicts,
)
from dwtune.core.errors import InputError
from dwtune.core.fit import MIN_POINTS, fit_law
from dwtune.core.fit.competing import compare_laws
from dwtune.core.fit.loo import LOO_BUDGETS
from dwtune.core.projection import (
    BudgetProjection,
    DepthWidthLaw,
    project_budget,
    project_depth,
    transition_size,
)
from dwtune.core.refine.noise import DEFAULT_NOISE_PRIOR, DEFAULT_PRIOR_DOF
from dwtune.core.refine.signs import SignRule
from dwtune.core.vocabulary import LEVEL

PROJECTION_BUDGETS = (1.75e11, 1e12, 1e13)  # parameters: GPT-3, 1T, 10T (as a study's report)
TABLE_FIT = "table fit"  # the name of the law fitted to the table
NOISE_TEXT = {
    vocabulary.NOISE_MEASURED: (
        "replicate runs: the seed-to-seed spread of each point's Δ, pooled along ln N, with "
        f"the {DEFAULT_NOISE_PRIOR:g}-nats guess worth {DEFAULT_PRIOR_DOF:g} pseudo-observations"
    ),
    vocabulary.NOISE_TREND_SCATTER: (
        "scatter about the trend: no replicate runs and no checkpoints, so the sd of one Δ is "
        "estimated from each point's distance to the straight line through its two neighbours "
        "along ln N (a median, so bends near N* do not set it), on the dof such a median is "
        "worth; it cannot see a seed's luck shared across sizes (that looks like trend), and "
        "replicate runs at a few sizes would measure the noise itself"
    ),
    vocabulary.NOISE_PRIOR: (
        f"assumed: no replicate runs and no checkpoints to measure it; the {DEFAULT_NOISE_PRIOR:g}"
        f"-nats guess on {DEFAULT_PRIOR_DOF:g} pseudo-observations, whose t boundary decides "
        "almost nothing; replicate runs (a seed column) or checkpoints (a tokens or step column) "
        "would measure it"
    ),
}
JITTER_LIMITS = (
    "checkpoint jitter is the evaluation and optimisation noise of one run near its end, not "
    "seed-to-seed variation (data order, initialisation), which is usually larger: a sign "
    "decided on it says the two runs' curves end apart, not that reruns would order them so"
)
MIXED = "mixed"  # the noise method where pairs used different ones


def _law_n(law: DepthWidthLaw, depth: float) -> tuple[float, float, float]:
    """The law's N* of ``depth`` and, for a fitted law, its 95% interval (NaN otherwise)."""
    if law.has_intervals:
        p = project_depth(law, depth, LEVEL)
        return p.n_star, p.n_lo, p.n_hi
    return transition_size(law, depth), math.nan, math.nan


def law_view(law: DepthWidthLaw, pair: tuple[float, float], depths: Sequence[float]) -> LawView:
    """What ``law`` says of ``pair`` given the table's ``depths`` between its two depths
    (the deeper net wins above N*(Ld), loses below N*(L1))."""
    shallow, deep = pair
    first = min((d for d in depths if shallow < d <= deep), default=deep)
    n_star, low, high = _law_n(law, deep)
    if first == deep:
        return LawView(law.name, n_star, low, high)
    return LawView(law.name, n_star, low, high, first, *_law_n(law, first))


def analyse_pairs(
    groups: dict[float, list[SizeGroup]],
    chosen: Sequence[tuple[float, float]],
    window: float,
    rule: SignRule,
    jitter: JitterModel | None,
    n_boot: int,
) -> tuple[list[PairAnalysis], list[Skipped]]:
    """Every chosen pair; one that cannot be analysed (sizes that never meet, no Δ, no size
    trend) is skipped with its reason; InputError only where none can be."""
    pairs, skipped = [], []
    for pair in chosen:
        try:
            pairs.append(
                analyse_pair(groups, pair, window, rule=rule, jitter=jitter, n_boot=n_boot)
            )
        except InputError as exc:
            skipped.append(Skipped(f"{pair[0]:g}-{pair[1]:g}", str(exc)))
    if not pairs:
        reasons = "; ".join(s.reason for s in skipped)
        many = len(skipped) > 1
        raise InputError(f"no depth pair can be analysed: {reasons}" if many else reasons)
    return pairs, skipped


def noise_summary(pairs: Sequence[PairAnalysis], jitter: JitterModel | None) -> NoiseSummary:
    """How the noise of every pair was found, in words and numbers (nats)."""
    sources = sorted({p.noise.source for p in pairs})
    sd = np.concatenate([np.asarray(p.noise.sd) for p in pairs])
    dof = np.concatenate([np.asarray(p.noise.dof) for p in pairs])
    texts = dict(NOISE_TEXT)
    if jitter is not None:
        texts[vocabulary.NOISE_CHECKPOINT_JITTER] = jitter.describe()
    used_jitter = vocabulary.NOISE_CHECKPOINT_JITTER in sources
    return NoiseSummary(
        method=sources[0] if len(sources) == 1 else MIXED,
        descriptions=tuple((s, texts[s]) for s in sources),
        pair_sources=tuple((p.label, p.noise.source) for p in pairs),
        sd_median=float(np.median(sd)),
        sd_low=float(sd.min()),
        sd_high=float(sd.max()),
        dof_low=float(dof.min()),
        jitter=jitter,
        limits=JITTER_LIMITS if used_jitter else None,
    )


def token_summary(
    pairs: Sequence[PairAnalysis], table: RunTable, checkpoints: Checkpoints, tokens: float | None
) -> TokenSummary:
    """Token warnings: once per pair whose points' runs differ, and runs far from --tokens."""
    return TokenSummary(
        checked=table.tokens is not None or table.step is not None,
        gaps=tuple(pair_token_gap(p.label, p.points, table) for p in pairs),
        miss=target_misses(table, tokens),
        rule=checkpoints.rule,
    )


def table_fit(
    pairs: Sequence[PairAnalysis], source: str, simulated: bool, used: RunTable | None = None
) -> TableFit:
    """The censored fit (bracketed, censored and bounded-undecided pairs), its projections
    and the competing laws fitted to the same pairs (the separable one also to ``used``'s
    losses), where at least MIN_POINTS pairs are bracketed."""
    observations = fit_observations(pairs)
    crossing = sum(o.status == vocabulary.TransitionStatus.BRACKETED for o in observations)
    if crossing < MIN_POINTS:
        reason = f"{crossing} pair(s) cross; the fit needs at least {MIN_POINTS}"
        return TableFit(source, simulated, None, reason)
    try:
        fit = fit_law(observations)
    except InputError as exc:
        return TableFit(source, simulated, None, str(exc))
    law = DepthWidthLaw.from_fit(fit, name=TABLE_FIT, source=source)
    competing = compare_laws(observations, LOO_BUDGETS)
    losses = fit_separable_losses(used, observations, fit) if used is not None else None
    projections: tuple[BudgetProjection, ...] = ()
    if law.b > 0:
        projections = tuple(project_budget(law, n, LEVEL) for n in PROJECTION_BUDGETS)
    return TableFit(source, simulated, fit, "", projections, competing, losses)


def held_against(
    pairs: Sequence[PairAnalysis], ref: Reference | None, depths: Sequence[float], alpha: float
) -> tuple[tuple[AnalysedPair, ...], ReferenceCheck | None]:
    """Each pair with what ``ref`` says of its points, and the test of the disagreements."""
    if ref is None:
        return tuple(AnalysedPair(p) for p in pairs), None
    held: list[AnalysedPair] = []
    verdicts: list[str] = []
    for pair in pairs:
        view = law_view(ref.law, (pair.depth_shallow, pair.depth_deep), depths)
        mine = pair_verdicts(pair, view)
        verdicts += mine
        held.append(AnalysedPair(pair, view, mine, ref.law))
    return tuple(held), ReferenceCheck(ref, agreement_test(verdicts, ref.label, alpha))


def analyse(
    table: RunTable,
    source: str,
    simulated: bool,
    *,
    pairs: Sequence[tuple[float, float]] | None = None,
    window: float,
    tokens: float | None = None,
    ref: Reference | None = None,
    alpha: float = DEFAULT_ALPHA,
    n_boot: int = 2000,
) -> AnalysisResult:
    """Every pair's points, noise, signs, status and N*; agreement with ``ref`` as a test;
    token warnings; the censored fit where it can be."""
    try:
        validate(table)
    except InputError as exc:  # name the file: the row numbers are its rows
        raise InputError(f"{source}: {exc}") from None
    used, checkpoints = select_checkpoints(table, tokens)
    jitter = jitter_model(table, tokens)
    groups = size_groups(used)
    usable = sorted(d for d, gs in groups.items() if any(g.ok.any() for g in gs))
    rule = analysis_rule(alpha)
    chosen = choose_pairs(usable, pairs)
    analysed, skipped = analyse_pairs(groups, chosen, window, rule, jitter, n_boot)
    held, check = held_against(analysed, ref, usable, alpha)
    return AnalysisResult(
        source=source,
        simulated=simulated,
        window=window,
        checkpoints=checkpoints,
        rule=rule,
        noise=noise_summary(analysed, jitter),
        tokens=token_summary(analysed, used, checkpoints, tokens),
        skipped=tuple(skipped),
        reference=check,
        pairs=held,
        fit=table_fit(analysed, source, simulated, used),
    )
