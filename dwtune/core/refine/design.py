"""The design strategies of the refine stage: where a pair's points go (pure).

A design is chosen once from the spec (:func:`design_for`, ``refine.design``) and handed to
whatever places a point, the way an Optuna study is handed one sampler: the spec describes,
the design places. A :class:`RefineDesign` says

- the first sizes: the cells the grid stage trains (:meth:`~RefineDesign.first_wave_cells`), each
  pair's first budgets and the sizes of its shallower depth's trend;
- where later waves start: the runs of pairs that refine one after another
  (:meth:`~RefineDesign.waves`) and a later wave's first cells, placed by the law fitted on
  the waves before it;
- the step beyond a bracket (:meth:`~RefineDesign.extension`: a censored pair's next size, or
  none) and inside it (:meth:`~RefineDesign.cut`), and how many cuts a pair may spend
  (:meth:`~RefineDesign.round_cap`).

:class:`GridDesign` (``refine.design: grid``): every depth at every ``space.budgets``, one wave,
no extension, the cut at the bracket's midpoint in ln N. :class:`LawDesign` (``law``): two
sizes per pair, ``N*_law·e^(∓reach)`` around the N* of the law (``fit.reference`` for the
first wave, the running fit for later ones), extensions beyond a censored edge one first
span at a time within ``space.budgets``' range (:func:`extension`), the cut beside the
interpolated root of Δ, and a cut budget that grows with the span the extensions left
(:func:`round_cap`).
Every choice depends on the pair's own points and the law that placed its first sizes, so a
resumed study proposes the same sizes again. Rules and their reasons: docs/statistics.md
("Where the next size goes, and when a pair stops").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from dwtune.core.projection import DepthWidthLaw, reference, transition_size
from dwtune.core.refine.outcome import Outcome, censored_direction, undecided_lean
from dwtune.core.refine.points import PairPoint
from dwtune.core.vocabulary import Design

if TYPE_CHECKING:
    from dwtune.core.budget import GridCell
    from dwtune.core.spec import ExperimentSpec

Pair = tuple[int, int]
Waves = tuple[tuple[Pair, ...], ...]

GUARD = 0.25  # least share of the bracket's width between a cut and either bracket end
PLAN_Z = 5.0  # |Δ|/se a cut is placed to show with its first seeds: a sign the rule decides


class RefineDesign(Protocol):
    """Where a refine study's points go (module doc)."""

    name: str  # the spec's refine.design

    @property
    def summary(self) -> str:
        """Where the design puts a pair's points and what that costs or misses, in one line
        (``dwtune plan``'s ``refine design:`` line)."""
        ...

    def first_wave_cells(self) -> list[GridCell]: ...

    def first_cells(self) -> list[GridCell]: ...

    def waves(self) -> Waves: ...

    def wave_cells(
        self,
        pairs: Iterable[Pair],
        law: DepthWidthLaw | None = None,
        earlier: Mapping[int, Iterable[float]] | None = None,
    ) -> list[GridCell]: ...

    def pair_budgets(self, pair: Pair, law: DepthWidthLaw | None = None) -> tuple[float, ...]: ...

    def shallow_budgets(
        self, pair: Pair, law: DepthWidthLaw | None = None, earlier: Iterable[float] = ()
    ) -> tuple[float, ...]: ...

    def extension(
        self,
        points: Sequence[PairPoint],
        outcome: Outcome,
        span: tuple[float, float] | None,
    ) -> float | None: ...

    def cut(self, outcome: Outcome, within_noise: Sequence[float], seeds: int) -> float: ...

    def round_cap(self, points: Sequence[PairPoint], max_rounds: int) -> int: ...


def design_for(spec: ExperimentSpec) -> RefineDesign:
    """The design ``spec.refine.design`` names: the one choice, made once."""
    design: RefineDesign = DESIGNS[spec.refine.design](spec)
    return design


def unseen(name: str) -> str | None:
    """What the design named ``name`` cannot see (report.md's limits), or None."""
    design = DESIGNS.get(name)
    return design.unseen if design is not None else None


def midpoint(low: float, high: float, within_noise: Sequence[float]) -> float:
    """Midpoint in ln N of the bracket, or of its wider side of a point within noise."""
    if within_noise:
        middle = within_noise[0]
        low, high = (low, middle) if middle - low >= high - middle else (middle, high)
    return 0.5 * (low + high)


class GridDesign:
    """Every depth at every ``space.budgets``; one wave; bisection at the midpoint."""

    name = Design.GRID.value
    unseen: str | None = None  # every depth at every size, scanned between them

    def __init__(self, spec: ExperimentSpec):
        self.spec = spec

    @property
    def summary(self) -> str:
        return "every depth at every space.budgets; sees a second sign change, trains every cell"

    def first_wave_cells(self) -> list[GridCell]:
        """The grid stage's cells: every depth at every budget."""
        space = self.spec.space
        return [self.spec.cell(d, n) for d in sorted(space.depths) for n in space.budgets]

    def first_cells(self) -> list[GridCell]:
        """Every cell the study's first points train (``dwtune plan`` checks their memory)."""
        return self.first_wave_cells()

    def waves(self) -> Waves:
        return (tuple((int(s), int(d)) for s, d in self.spec.refine.pairs),)

    def wave_cells(
        self,
        pairs: Iterable[Pair],
        law: DepthWidthLaw | None = None,
        earlier: Mapping[int, Iterable[float]] | None = None,
    ) -> list[GridCell]:
        return wave_cells(self, pairs, law, earlier)

    def depth_budgets(
        self,
        depth: int,
        pairs: Iterable[Pair] | None = None,
        law: DepthWidthLaw | None = None,
        earlier: Iterable[float] = (),
    ) -> tuple[float, ...]:
        return tuple(sorted(self.spec.space.budgets))

    def pair_budgets(self, pair: Pair, law: DepthWidthLaw | None = None) -> tuple[float, ...]:
        return self.spec.space.budgets

    def shallow_budgets(
        self, pair: Pair, law: DepthWidthLaw | None = None, earlier: Iterable[float] = ()
    ) -> tuple[float, ...]:
        return tuple(sorted(set(self.spec.space.budgets)))

    def extension(
        self,
        points: Sequence[PairPoint],
        outcome: Outcome,
        span: tuple[float, float] | None,
    ) -> float | None:
        return None  # the grid spans space.budgets already: a censored pair stays censored

    def cut(self, outcome: Outcome, within_noise: Sequence[float], seeds: int) -> float:
        return midpoint(outcome.low, outcome.high, within_noise)

    def round_cap(self, points: Sequence[PairPoint], max_rounds: int) -> int:
        return max_rounds  # the grid's brackets are one budget step wide from the start


class LawDesign:
    """Two sizes per pair around a law's N*, waves, extensions and interpolated cuts."""

    name = Design.LAW.value
    unseen: str | None = (
        "A second sign change away from each N*: `refine.design: law` trains each pair "
        "near its own N* only, so a dip of Δ beyond the sizes it trained stays unseen and "
        "the pair is reported bracketed, not non_monotone (`refine.design: grid` trains "
        "every depth at every size of `space.budgets` and scans between them)."
    )

    def __init__(self, spec: ExperimentSpec):
        self.spec = spec
        self.reach = spec.refine.reach

    @property
    def summary(self) -> str:
        return (
            f"each pair's first sizes at {self.spec.fit.reference}'s N*·e^(±{self.reach:g}); "
            "fewer trainings, blind to a second sign change away from N*"
        )

    # ------------------------------------------------------------------ first sizes and waves

    def first_wave_cells(self) -> list[GridCell]:
        """The grid stage's cells: the first wave's first points (:meth:`wave_cells`)."""
        return self.wave_cells(self.waves()[0])

    def first_cells(self) -> list[GridCell]:
        """Every pair's first cells, each wave's placed by fit.reference (the running fit moves
        the later waves'), which ``dwtune plan`` checks against the GPU's memory."""
        return self.wave_cells(self.spec.refine.pairs)

    def waves(self) -> Waves:
        """refine.pairs in ``refine.waves`` runs: ranked by their deeper (then shallower)
        depth and cut into runs of near-equal size, the first runs the larger; each run lists
        its pairs in refine.pairs' order."""
        pairs = [(int(shallow), int(deep)) for shallow, deep in self.spec.refine.pairs]
        ranked = sorted(pairs, key=lambda pair: (pair[1], pair[0]))
        count = self.spec.refine.waves
        size, extra = divmod(len(ranked), count)
        waves: list[tuple[Pair, ...]] = []
        start = 0
        for index in range(count):
            stop = start + size + (1 if index < extra else 0)
            members = set(ranked[start:stop])
            waves.append(tuple(pair for pair in pairs if pair in members))
            start = stop
        return tuple(waves)

    def wave_cells(
        self,
        pairs: Iterable[Pair],
        law: DepthWidthLaw | None = None,
        earlier: Mapping[int, Iterable[float]] | None = None,
    ) -> list[GridCell]:
        """The first points of a wave's ``pairs``: each depth at its :meth:`depth_budgets` by
        ``law`` (default fit.reference); ``earlier``: the sizes each depth was given by the
        waves before."""
        return wave_cells(self, pairs, law, earlier)

    def depth_budgets(
        self,
        depth: int,
        pairs: Iterable[Pair] | None = None,
        law: DepthWidthLaw | None = None,
        earlier: Iterable[float] = (),
    ) -> tuple[float, ...]:
        """Every budget a wave's first points train ``depth`` at, sorted: the budgets of the
        wave's ``pairs`` (default: the first wave's) it belongs to, and, where it is the
        shallower net of a pair and would have fewer than three sizes with the ``earlier``
        waves', that pair's law N* too: Δ is moved to equal N along the shallower depth's
        size trend, and two sizes show no bend."""
        wave = self.waves()[0] if pairs is None else tuple(pairs)
        members = [pair for pair in wave if depth in pair]
        budgets = {n for pair in members for n in self.pair_budgets(pair, law)}
        if len(budgets | set(earlier)) < 3:
            budgets |= {self.law_centre(pair, law) for pair in members if pair[0] == depth}
        return tuple(sorted(budgets))

    def shallow_budgets(
        self, pair: Pair, law: DepthWidthLaw | None = None, earlier: Iterable[float] = ()
    ) -> tuple[float, ...]:
        """The sizes of a pair's shallower-depth size trend, sorted: the pair's budgets, and
        its law N* where its wave trains the shallower net there (:meth:`depth_budgets`); not
        every size the depth is trained at (two neighbouring pairs' sizes may lie a few
        hundredths of an e-fold apart, and a slope between their noisy means misleads)."""
        budgets = set(self.pair_budgets(pair, law))
        wave = next(w for w in self.waves() if tuple(pair) in w)
        centre = self.law_centre(pair, law)
        if centre in self.depth_budgets(pair[0], wave, law, earlier):
            budgets.add(centre)
        return tuple(sorted(budgets))

    def law_centre(self, pair: Pair, law: DepthWidthLaw | None = None) -> float:
        """``law``'s N* of a refine pair (its deeper depth; default fit.reference), within
        space.budgets."""
        return self._within_budgets(transition_size(self._law(law), pair[1]))

    def pair_budgets(self, pair: Pair, law: DepthWidthLaw | None = None) -> tuple[float, ...]:
        """A pair's two first sizes around ``law``'s N* (:func:`law_sizes`), kept within
        space.budgets' range."""
        sizes = law_sizes(self._law(law), pair[1], self.reach)
        return tuple(self._within_budgets(size) for size in sizes)

    def _law(self, law: DepthWidthLaw | None) -> DepthWidthLaw:
        return reference(self.spec.fit.reference) if law is None else law

    def _within_budgets(self, size: float) -> float:
        budgets = self.spec.space.budgets
        return min(max(size, min(budgets)), max(budgets))

    # ------------------------------------------------------------------ steps

    def extension(
        self,
        points: Sequence[PairPoint],
        outcome: Outcome,
        span: tuple[float, float] | None,
    ) -> float | None:
        """ln N of a pair's next size beyond its decided edge (:func:`extension`), towards the
        side its mean Δ leans to where no sign is decided; None without a span."""
        if span is None:
            return None
        direction = censored_direction(outcome) or undecided_lean(points, outcome)
        return extension([p.log_n for p in points], direction, self.reach, span)

    def cut(self, outcome: Outcome, within_noise: Sequence[float], seeds: int) -> float:
        """The interpolated cut (:func:`interpolated_cut`) from the bracket ends' mean Δ, the
        se of a new point's first ``seeds``; the midpoint rule where a point within noise lies
        inside the bracket or an end is missing."""
        low_point, high_point = outcome.low_point, outcome.high_point
        if within_noise or low_point is None or high_point is None:
            return midpoint(outcome.low, outcome.high, within_noise)
        low_end, high_end = low_point.decision, high_point.decision
        # the se a new point's first seeds give: the ends' per-seed paired sd over √seeds
        sd = max(low_end.sd, high_end.sd)
        se = sd / math.sqrt(seeds) if math.isfinite(sd) else 0.0
        return interpolated_cut(outcome.low, outcome.high, low_end.mean, high_end.mean, se)

    def round_cap(self, points: Sequence[PairPoint], max_rounds: int) -> int:
        """``max_rounds`` plus the halvings the extensions added (:func:`round_cap`)."""
        return round_cap([p.log_n for p in points], max_rounds, self.reach)


def round_cap(log_ns: Sequence[float], max_rounds: int, reach: float) -> int:
    """Cuts a law-design pair may spend: ``max_rounds`` for its first span (``2·reach``
    e-folds), one more for every doubling of the span its points cover beyond it. Why: a pair
    whose guess was far off may reach its bracket with a bracket wider than the first span
    (extensions that doubled the span did; one-span :func:`extension` steps leave one first
    span, and the grown cap is then a ceiling), and a cap set for the first span stops such a
    pair with its bracket still wide (docs/statistics.md,
    "Where the next size goes, and when a pair stops"). ``max_rounds: 0`` stays 0."""
    if max_rounds <= 0 or len(log_ns) < 2 or reach <= 0:
        return max_rounds
    span = max(log_ns) - min(log_ns)
    doublings = math.ceil(math.log2(span / (2.0 * reach)) - 1e-9) if span > 2.0 * reach else 0
    return max_rounds + doublings


def wave_cells(
    design: GridDesign | LawDesign,
    pairs: Iterable[Pair],
    law: DepthWidthLaw | None,
    earlier: Mapping[int, Iterable[float]] | None,
) -> list[GridCell]:
    """Every depth of ``pairs`` at each budget the design's ``depth_budgets`` gives it."""
    pairs = tuple(pairs)
    depths = sorted({d for pair in pairs for d in pair})
    earlier = earlier or {}
    return [
        design.spec.cell(d, n)
        for d in depths
        for n in design.depth_budgets(d, pairs, law, earlier.get(d, ()))
    ]


def law_sizes(law: DepthWidthLaw, deep: int, reach: float) -> tuple[float, float]:
    """A pair's first two sizes (parameters): the law's N* at the deeper depth, e^(∓reach)."""
    centre = math.log(transition_size(law, deep))
    return math.exp(centre - reach), math.exp(centre + reach)


def extension(
    log_ns: Sequence[float], direction: int, reach: float, span: tuple[float, float]
) -> float | None:
    """ln N of a censored pair's next size: ``2·reach`` e-folds (the first span) beyond its
    outermost point in ``direction`` (+1: N* lies above them, −1: below), within ``span`` (ln
    of space.budgets' least and greatest); None where the points reach that end already.

    Rule: an extension lands at most one first span beyond the pair's outermost point, never
    further, however far the points already reach. Guarantee: a censored pair's outermost
    point is a first size or an earlier extension, where the shallower net was trained and
    joined its size trend (:func:`~dwtune.core.refine.first_points.extended_trend`); so the
    trend's sizes on the extended side lie at most ``2·reach`` apart, the spacing of the
    pair's first two, and every point between them takes a slope interpolated between sizes
    that close, never the secant of a jump that doubled the span (which stretched the end
    slope over e-folds no shallower net was trained in). The price: a guess D e-folds off
    costs about D / (2·reach) extensions instead of log2(D / reach)."""
    if not log_ns or direction == 0:
        return None
    low, high = min(log_ns), max(log_ns)
    step = 2.0 * reach
    if direction > 0:
        target = min(high + step, span[1])
        return target if target > high + 1e-9 else None
    target = max(low - step, span[0])
    return target if target < low - 1e-9 else None


def interpolated_cut(
    low: float, high: float, mean_low: float, mean_high: float, se: float = 0.0
) -> float:
    """ln N of the next size inside the bracket ``[low, high]`` (module doc).

    The line through the ends' mean Δ (positive at ``low``, negative at ``high``) puts the root
    at ``r``; a point at ``r`` itself would sit at Δ ≈ 0 and decide no sign, so the cut lies
    ``PLAN_Z · se / slope`` e-folds from ``r`` (where the line expects ``|Δ| = PLAN_Z·se``, ``se``
    the standard error a new point's first seeds give), on the bracket's wider side of ``r``,
    so the bracket shrinks to about ``r`` ± that offset within two cuts. The cut stays at least
    ``GUARD`` of the width from either end; the midpoint where a mean is not a finite number
    of its end's sign."""
    finite = math.isfinite(mean_low) and math.isfinite(mean_high)
    if not finite or mean_low <= 0 or mean_high >= 0 or high <= low:
        return 0.5 * (low + high)
    slope = (mean_low - mean_high) / (high - low)  # nats per e-fold, > 0
    root = low + mean_low / slope
    offset = PLAN_Z * max(se, 0.0) / slope
    cut = root - offset if root - low >= high - root else root + offset
    width = high - low
    return min(max(cut, low + GUARD * width), high - GUARD * width)


# The designs by their spec name (refine.design): the factory's one table.
DESIGNS: dict[str, type[GridDesign] | type[LawDesign]] = {
    GridDesign.name: GridDesign,
    LawDesign.name: LawDesign,
}
