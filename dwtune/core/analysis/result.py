"""What ``dwtune analyze`` found, as frozen dataclasses (pure).

:func:`dwtune.core.analysis.pipeline.analyse` builds an :class:`AnalysisResult`; the console text,
report.md and ``--json`` are renderings of it (:mod:`dwtune.outputs`), so they cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dwtune.core.analysis.jitter import JitterModel
from dwtune.core.analysis.loss_law import SeparableLossFit
from dwtune.core.analysis.table import Checkpoints
from dwtune.core.analysis.tokens import TargetMiss, TokenGap
from dwtune.core.analysis.verdicts import AgreementTest, LawView, PairAnalysis
from dwtune.core.fit import FitResult
from dwtune.core.fit.competing import LawComparison
from dwtune.core.projection import BudgetProjection, DepthWidthLaw, optimal_depth
from dwtune.core.refine.signs import SignRule

# What the rule tests, in words (`--json` ``rule.test``).
RULE_TEST = "two-sided Student t on the noise's dof: a sign where |Δ|/se > t(1 − α/2, dof)"


@dataclass(frozen=True)
class Reference:
    """A law to hold the table against, and how the summary names it."""

    law: DepthWidthLaw
    label: str


@dataclass(frozen=True)
class NoiseSummary:
    """How the noise of every pair was found (sd of one Δ, nats)."""

    method: str  # a noise source of core.vocabulary, or "mixed"
    descriptions: tuple[tuple[str, str], ...]  # (source, the method in words), by source
    pair_sources: tuple[tuple[str, str], ...]  # (pair label, source)
    sd_median: float
    sd_low: float
    sd_high: float
    dof_low: float
    jitter: JitterModel | None
    limits: str | None  # what checkpoint jitter cannot show, where a pair used it


@dataclass(frozen=True)
class TokenSummary:
    """Token warnings: the pairs whose points' runs differ in training length, and the runs
    far from ``--tokens``."""

    checked: bool  # the table has tokens or steps to compare
    gaps: tuple[TokenGap | None, ...]  # per pair, in the order of AnalysisResult.pairs
    miss: TargetMiss | None
    rule: str  # how the checkpoints were picked: "last" or "nearest"

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(g.describe(self.rule) for g in self.gaps if g is not None)

    @property
    def target_warning(self) -> str | None:
        return self.miss.describe() if self.miss is not None else None


@dataclass(frozen=True)
class Skipped:
    """A pair that could not be analysed, and why."""

    pair: str
    reason: str


@dataclass(frozen=True)
class AnalysedPair:
    """A pair's analysis and, with a reference, what the law says of each of its points."""

    analysis: PairAnalysis
    view: LawView | None = None
    verdicts: tuple[str, ...] | None = None  # per point: agrees, disagrees, ...
    law: DepthWidthLaw | None = None

    def law_depth(self, n: float) -> float | None:
        """The law's optimal depth L*(N) at size ``n`` (None where its slope is not
        positive)."""
        law = self.law
        if law is None or not (law.b > 0 and math.isfinite(law.a)):
            return None
        return optimal_depth(law, n)


@dataclass(frozen=True)
class ReferenceCheck:
    """The reference law against every point with a prediction, as a test."""

    reference: Reference
    test: AgreementTest


@dataclass(frozen=True)
class TableFit:
    """The censored fit of the table's transitions and its projections, or why there is
    none (``fit`` None)."""

    source: str
    simulated: bool
    fit: FitResult | None
    reason: str = ""
    projections: tuple[BudgetProjection, ...] = ()
    # The published laws fitted to the same pairs (dwtune.core.fit.competing); None: no fit.
    competing: LawComparison | None = None
    # The separable law fitted to the runs' losses and its crossings' error (loss_law).
    loss_fit: SeparableLossFit | None = None


@dataclass(frozen=True)
class AnalysisResult:
    """Every pair's points, noise, signs, status and N*; the reference's test; the fit."""

    source: str
    simulated: bool
    window: float  # e-folds of size
    checkpoints: Checkpoints
    rule: SignRule
    noise: NoiseSummary
    tokens: TokenSummary
    skipped: tuple[Skipped, ...]
    reference: ReferenceCheck | None
    pairs: tuple[AnalysedPair, ...]
    fit: TableFit
