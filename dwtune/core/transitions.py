"""Brackets, sign decisions and bisection proposals of the refine stage (pure: numpy).

For a pair of depths ``Ls < Ld`` the refine stage locates ``N*``, where
``Δ(N) = loss_Ld(N) − loss_Ls(N)`` turns from positive (the deeper net loses) to negative. This
module holds the decisions; :mod:`dwtune.study.refine` trains and records (Optuna).

Sizes. A point is a budget at which both depths were trained, each at its own rounded width, so
their paper sizes ``12·L·w²`` differ by a few percent. ``N`` of a point is the deeper net's size
(``x = ln N``); the transition is reported on that axis, so ``dx* = sqrt(N*/(12·Ld))`` is the
width the deeper net really had. Δ is compared at equal ``N``: the shallower net's loss is moved
along its own size trend, ``loss_Ls(x) ≈ loss_Ls(x_s) + slope·(x − x_s)``, where ``slope`` is the
derivative of the shallower depth's mean grid loss in ``ln N`` (central differences between grid
budgets, interpolated). Without it, width rounding alone shifts Δ by ~0.005 nats at 1e7
parameters, more than a seed's noise.

Paired seeds. Each seed trains both depths (same data order and initialisation seed), so Δ is
taken seed by seed and its noise is that of a paired difference. Its standard deviation ``sd``
is pooled over every point of the pair with two or more seeds; with fewer than
``MIN_POOLED_DOF`` degrees of freedom the larger of the pooled value and the prior is used, and
with none the prior: ``paired_noise_sd`` of the simulated surface for simulated specs, else
``PAIRED_NOISE_PRIOR`` (the paper's losses were "stable to the third digit": sd ≈ 0.002 per
run, ≈ 0.003 for a difference). Set ``space.seeds`` ≥ 2 to measure it on the grid instead.

Sequential test. A point's sign is decided once ``|mean Δ| > noise_z · sd / sqrt(n)``; else
seeds are added (at once as many as the current mean suggests, at least one) up to
``refine.max_seeds``. A point still within noise at ``max_seeds`` is *within noise*: it does not
bound a bracket.

Outcome of a pair from its points sorted by ``N`` (those within noise left out): no point with
Δ < 0 → ``censored_high``; the smallest already Δ < 0 → ``censored_low``; else the bracket is
the last positive point before the first negative one. Where Δ stayed within noise beyond the
range's decided edge, or no point could be decided at all, the pair is ``undecided``. The points
that decide the outcome are first given seeds until decided (``verify`` steps); then the bracket
is bisected in ``ln N`` (``bisect`` steps) until ``N_high / N_low − 1 ≤ refine.tolerance``, or
``refine.max_rounds`` bisection rounds, or the second point within noise inside the bracket
(the noise floor: after the first, bisection continues on the wider side of it).

Uncertainty of a bracketed ``N*`` (the geometric midpoint of the final bracket), in ``ln N``::

    σ = sqrt(h² + (se / |s|)²)

with ``h`` the bracket's half-width, ``se`` the larger standard error of mean Δ at its two ends
and ``s`` the least-squares slope of mean Δ over the points between the grid sizes around the
bracket (nats per e-fold): the bracket's own extent plus how far seed noise in Δ moves its
zero. The width's error follows from ``ln dx* = (ln N* − ln(12·Ld)) / 2``:
``width_deep_err = width_deep · σ / 2``. σ is deliberately a bound more than a standard
deviation: with correct sign decisions the true N* is never further than ``h`` from the
midpoint (a uniform position in the bracket would have sd ``h/√3``), so a fit over such errors
reports χ²_red well below 1 (0.08 on ``search_spaces/simulated.yaml``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from dwtune.core.errors import InputError
from dwtune.core.records import TrialRecord
from dwtune.core.spec import RefineConfig
from dwtune.core.vocabulary import PointKind, StepKind, TransitionStatus

PAIRED_NOISE_PRIOR = 0.003  # nats: sd of a paired loss difference when nothing measures it
MIN_POOLED_DOF = 10  # degrees of freedom below which the pooled sd is not trusted alone


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Decision:
    """The sign test of one point: mean paired Δ (nats), its standard error and the verdict."""

    mean: float
    se: float
    sd: float  # paired-difference sd the test used
    decided: bool

    @property
    def sign(self) -> int:
        """+1: the deeper net loses here; -1: it wins; 0: within noise."""
        return int(np.sign(self.mean)) if self.decided else 0


def decide(deltas: Sequence[float], sd: float, z: float) -> Decision:
    """Decided when |mean Δ| exceeds z standard errors; no data is never decided."""
    if not deltas:
        return Decision(math.nan, math.nan, sd, False)
    mean = float(np.mean(deltas))
    se = sd / math.sqrt(len(deltas))
    return Decision(mean, se, sd, abs(mean) > z * se)


def seeds_wanted(decision: Decision, n: int, refine: RefineConfig) -> int:
    """Seeds to have next at an undecided point: enough for its current |mean| (capped)."""
    if math.isfinite(decision.mean) and decision.mean != 0 and decision.sd > 0:
        needed = math.ceil((refine.noise_z * decision.sd / abs(decision.mean)) ** 2)
    else:
        needed = refine.max_seeds
    return min(refine.max_seeds, max(n + 1, needed))


def pooled_sd(groups: Iterable[Sequence[float]], prior: float) -> float:
    """Pooled sd of paired differences over groups of ≥ 2 seeds (see the module doc)."""
    squares, dof = 0.0, 0
    for deltas in groups:
        if len(deltas) >= 2:
            squares += float(np.sum((np.asarray(deltas) - np.mean(deltas)) ** 2))
            dof += len(deltas) - 1
    if dof == 0:
        return prior
    pooled = math.sqrt(squares / dof)
    return pooled if dof >= MIN_POOLED_DOF else max(pooled, prior)


def seed_sequence(grid_seeds: Sequence[int], count: int) -> tuple[int, ...]:
    """The grid's seeds first, then new ones counting up: at least ``count`` seeds."""
    fresh = itertools.count(max(grid_seeds, default=-1) + 1)
    extra = max(count - len(grid_seeds), 0)
    return (*grid_seeds, *itertools.islice(fresh, extra))


# --------------------------------------------------------------------------- points


@dataclass(frozen=True)
class PairPoint:
    """Both depths of a pair trained at one budget, with paired seeds."""

    budget: float
    log_n: float  # ln of the deeper net's paper size 12·Ld·w²
    width_deep: int
    width_shallow: int
    seeds: tuple[int, ...]  # seeds both depths completed
    deltas: tuple[float, ...]  # Δ per seed at equal N (nats)
    decision: Decision
    kind: str = PointKind.GRID
    requested: int = 0  # seeds asked for (some trainings may have failed)

    @property
    def n(self) -> int:
        return len(self.deltas)

    def within_noise(self, max_seeds: int) -> bool:
        """Undecided with every seed it may have: it cannot bound a bracket."""
        return not self.decision.decided and max(self.requested, self.n) >= max_seeds

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> PairPoint:
        raw = dict(raw)
        raw["decision"] = Decision(**raw["decision"])
        raw["seeds"] = tuple(raw["seeds"])
        raw["deltas"] = tuple(raw["deltas"])
        return cls(**raw)


class SizeTrend:
    """d loss / d ln N of the shallower depth, from its mean grid losses (nats per e-fold)."""

    def __init__(self, log_n: Sequence[float], losses: Sequence[float]):
        order = np.argsort(log_n)
        self.x = np.asarray(log_n, dtype=float)[order]
        y = np.asarray(losses, dtype=float)[order]
        self.slopes = np.gradient(y, self.x) if self.x.size >= 2 else np.zeros_like(self.x)

    def slope_at(self, log_n: float) -> float:
        return float(np.interp(log_n, self.x, self.slopes)) if self.x.size else 0.0


def paired_deltas(
    deep: dict[int, TrialRecord], shallow: dict[int, TrialRecord], trend: SizeTrend
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Seeds where both depths completed, and their Δ at the deeper net's size."""
    seeds = tuple(sorted(s for s in deep if s in shallow))
    deltas = []
    for seed in seeds:
        x_deep = math.log(deep[seed].params_non_embedding)
        x_shallow = math.log(shallow[seed].params_non_embedding)
        at_equal_n = shallow[seed].best_val_loss + trend.slope_at(x_shallow) * (x_deep - x_shallow)
        deltas.append(deep[seed].best_val_loss - at_equal_n)
    return seeds, tuple(deltas)


def make_point(
    budget: float,
    sizes: tuple[float, int, int],
    deep: dict[int, TrialRecord],
    shallow: dict[int, TrialRecord],
    trend: SizeTrend,
    sd_of: Callable[[Sequence[float]], float],
    z: float,
    kind: str,
    requested: int,
) -> PairPoint:
    """A point from both depths' records at ``budget``; ``sd_of(deltas)`` pools the sd.

    ``sizes`` is (ln N of the deeper net, deeper width, shallower width).
    """
    seeds, deltas = paired_deltas(deep, shallow, trend)
    log_n, width_deep, width_shallow = sizes
    return PairPoint(
        budget=float(budget),
        log_n=float(log_n),
        width_deep=int(width_deep),
        width_shallow=int(width_shallow),
        seeds=seeds,
        deltas=deltas,
        decision=decide(deltas, sd_of(deltas), z),
        kind=kind,
        requested=requested,
    )


def _sizes_of(deep: dict[int, TrialRecord], shallow: dict[int, TrialRecord]):
    any_deep, any_shallow = next(iter(deep.values())), next(iter(shallow.values()))
    return math.log(any_deep.params_non_embedding), any_deep.width, any_shallow.width


def _usable(record: TrialRecord) -> bool:
    return record.completed and math.isfinite(record.best_val_loss)


def finished_by_budget(
    records: Iterable[TrialRecord], depth: int, budgets: Sequence[float], seeds: Sequence[int]
) -> dict[float, dict[int, TrialRecord]]:
    """Completed records of ``depth`` at grid ``budgets`` and ``seeds``: budget -> seed -> rec."""
    table: dict[float, dict[int, TrialRecord]] = {}
    for record in records:
        if record.depth != depth or record.seed not in seeds or not _usable(record):
            continue
        budget = next((b for b in budgets if math.isclose(b, record.budget, rel_tol=1e-9)), None)
        if budget is not None:
            table.setdefault(budget, {})[record.seed] = record
    return table


def shallow_trend(table: dict[float, dict[int, TrialRecord]]) -> SizeTrend:
    """The size trend of one depth's grid means (rows with one rounded width merged)."""
    by_size: dict[int, list[float]] = {}
    for row in table.values():
        for record in row.values():
            by_size.setdefault(record.params_non_embedding, []).append(record.best_val_loss)
    sizes = sorted(by_size)
    return SizeTrend([math.log(s) for s in sizes], [float(np.mean(by_size[s])) for s in sizes])


@dataclass(frozen=True)
class PairGrid:
    """What the grid knows of one pair: its points and the shallower depth's size trend."""

    depth_shallow: int
    depth_deep: int
    points: tuple[PairPoint, ...]
    trend: SizeTrend = field(repr=False)
    sd: float  # paired-difference sd the grid points were decided with

    @property
    def label(self) -> str:
        return f"{self.depth_shallow}-{self.depth_deep}"


def grid_pair(
    records: Sequence[TrialRecord],
    pair: tuple[int, int],
    budgets: Sequence[float],
    seeds: Sequence[int],
    z: float,
    prior: float,
) -> PairGrid:
    """The pair's grid points (mean over seeds, depths matched by budget); InputError if a
    depth has no finished grid trial."""
    shallow_depth, deep_depth = pair
    tables = {d: finished_by_budget(records, d, budgets, seeds) for d in pair}
    for depth in pair:
        if not tables[depth]:
            raise InputError(
                f"refine pair [{shallow_depth}, {deep_depth}]: depth {depth} has no finished grid "
                f"trials; add it to space.depths and rerun `dwtune run`"
            )
    trend = shallow_trend(tables[shallow_depth])
    common = [b for b in budgets if b in tables[deep_depth] and b in tables[shallow_depth]]
    groups = [
        paired_deltas(tables[deep_depth][b], tables[shallow_depth][b], trend)[1] for b in common
    ]
    sd = pooled_sd(groups, prior)
    points = tuple(
        make_point(
            b,
            _sizes_of(tables[deep_depth][b], tables[shallow_depth][b]),
            tables[deep_depth][b],
            tables[shallow_depth][b],
            trend,
            lambda _: sd,
            z,
            PointKind.GRID,
            len(seeds),
        )
        for b in common
    )
    return PairGrid(shallow_depth, deep_depth, points, trend, sd)


def merge_points(grid: Sequence[PairPoint], later: Sequence[PairPoint]) -> list[PairPoint]:
    """All points sorted by size; a later point at the same budget replaces the earlier one."""
    merged = {p.budget: p for p in grid}
    for point in later:
        merged[point.budget] = point
    return sorted(merged.values(), key=lambda p: (p.log_n, p.budget))


# --------------------------------------------------------------------------- outcome and steps


@dataclass(frozen=True)
class Outcome:
    """Where the pair stands: status, the points that decide it and the bracket."""

    status: str
    decisive: tuple[PairPoint, ...]  # the bracket ends, or the edge point of a censored pair
    low: float = math.nan  # ln N bounds known for N*
    high: float = math.nan
    low_point: PairPoint | None = None
    high_point: PairPoint | None = None


def outcome_of(points: Sequence[PairPoint], max_seeds: int) -> Outcome:
    """Status of sorted points; those within noise at max seeds are left out (module doc)."""
    usable = [p for p in points if not p.within_noise(max_seeds)]
    noisy = [p.log_n for p in points if p.within_noise(max_seeds)]
    if not usable:
        return Outcome(
            TransitionStatus.UNDECIDED,
            (),
            min(noisy, default=math.nan),
            max(noisy, default=math.nan),
        )
    first_negative = next((i for i, p in enumerate(usable) if p.decision.mean < 0), None)
    if first_negative is None:
        edge = usable[-1]
        beyond = [x for x in noisy if x > edge.log_n]
        if beyond:
            return Outcome(TransitionStatus.UNDECIDED, (edge,), edge.log_n, max(beyond), edge, None)
        return Outcome(TransitionStatus.CENSORED_HIGH, (edge,), edge.log_n, math.nan, edge, None)
    if first_negative == 0:
        edge = usable[0]
        beyond = [x for x in noisy if x < edge.log_n]
        if beyond:
            return Outcome(TransitionStatus.UNDECIDED, (edge,), min(beyond), edge.log_n, None, edge)
        return Outcome(TransitionStatus.CENSORED_LOW, (edge,), math.nan, edge.log_n, None, edge)
    low, high = usable[first_negative - 1], usable[first_negative]
    return Outcome(TransitionStatus.BRACKETED, (low, high), low.log_n, high.log_n, low, high)


@dataclass(frozen=True)
class Step:
    """What the refine stage does next for a pair."""

    kind: str  # a StepKind
    outcome: Outcome
    point: PairPoint | None = None  # for verify
    log_n: float = math.nan  # for bisect: ln of the budget to train next
    reason: str = ""  # for done: why the pair stopped


def next_step(points: Sequence[PairPoint], refine: RefineConfig, rounds: int) -> Step:
    """Verify an undecided decisive point, else bisect the bracket, else stop."""
    outcome = outcome_of(points, refine.max_seeds)
    pending = [p for p in outcome.decisive if not p.decision.decided]
    if pending:
        return Step(StepKind.VERIFY, outcome, point=pending[0])
    if outcome.status != TransitionStatus.BRACKETED:
        return Step(StepKind.DONE, outcome, reason=outcome.status)
    inside = [
        p
        for p in points
        if p.within_noise(refine.max_seeds) and outcome.low < p.log_n < outcome.high
    ]
    if math.exp(outcome.high - outcome.low) - 1.0 <= refine.tolerance:
        return Step(StepKind.DONE, outcome, reason="tolerance reached")
    if rounds >= refine.max_rounds:
        return Step(StepKind.DONE, outcome, reason=f"max_rounds ({refine.max_rounds}) reached")
    if len(inside) >= 2:
        return Step(StepKind.DONE, outcome, reason="noise floor: Δ within noise at max_seeds")
    return Step(
        StepKind.BISECT,
        outcome,
        log_n=proposal(outcome.low, outcome.high, [p.log_n for p in inside]),
    )


def proposal(low: float, high: float, within_noise: Sequence[float]) -> float:
    """Midpoint in ln N of the bracket, or of its wider side of a point within noise."""
    if within_noise:
        middle = within_noise[0]
        low, high = (low, middle) if middle - low >= high - middle else (middle, high)
    return 0.5 * (low + high)


# --------------------------------------------------------------------------- transitions


@dataclass(frozen=True)
class Transition:
    """One row of transitions.parquet (see dwtune.outputs.schemas.TRANSITION_SCHEMA)."""

    depth_shallow: int
    depth_deep: int
    status: str
    n_star: float
    n_star_low: float
    n_star_high: float
    width_deep: float
    width_deep_err: float
    width_shallow: float
    trials: int  # new trainings the refine stage spent on this pair
    seeds: int  # most seeds used at one point
    rounds: int  # bisection rounds
    simulated: bool
    reason: str = ""  # why the pair stopped (console and report; not a column)

    @property
    def pair(self) -> str:
        return f"{self.depth_shallow}-{self.depth_deep}"

    @property
    def log_n_sigma(self) -> float:
        """σ of ln N* (module doc), recovered from the width error."""
        return 2.0 * self.width_deep_err / self.width_deep


def delta_slope(points: Sequence[PairPoint], low: float, high: float) -> float:
    """d mean Δ / d ln N around a bracket: least squares over the points between the grid
    points that enclose it (nats per e-fold). A wide base keeps seed noise from inflating it."""
    grid = [p.log_n for p in points if p.kind == PointKind.GRID]
    start = max((x for x in grid if x <= low), default=-math.inf)
    stop = min((x for x in grid if x >= high), default=math.inf)
    near = [p for p in points if start <= p.log_n <= stop and p.n]
    x = np.array([p.log_n for p in near])
    y = np.array([p.decision.mean for p in near])
    return float(np.polyfit(x, y, 1, w=np.sqrt([p.n for p in near]))[0])


def log_n_sigma(outcome: Outcome, points: Sequence[PairPoint]) -> float:
    """σ of ln N* of a bracketed outcome: half-width and seed noise (module doc)."""
    half = 0.5 * (outcome.high - outcome.low)
    slope = delta_slope(points, outcome.low, outcome.high)
    se = max(outcome.low_point.decision.se, outcome.high_point.decision.se)
    noise = se / abs(slope) if slope != 0 and math.isfinite(se) else 0.0
    return math.hypot(half, noise)


def make_transition(
    pair: tuple[int, int],
    outcome: Outcome,
    points: Sequence[PairPoint],
    *,
    trials: int,
    rounds: int,
    simulated: bool,
    reason: str = "",
) -> Transition:
    shallow, deep = pair
    common = dict(
        depth_shallow=shallow,
        depth_deep=deep,
        status=outcome.status,
        n_star_low=math.exp(outcome.low),
        n_star_high=math.exp(outcome.high),
        trials=trials,
        seeds=max((p.n for p in points), default=0),
        rounds=rounds,
        simulated=simulated,
        reason=reason,
    )
    if outcome.status != TransitionStatus.BRACKETED:
        return Transition(
            n_star=math.nan,
            width_deep=math.nan,
            width_deep_err=math.nan,
            width_shallow=math.nan,
            **common,
        )
    n_star = math.exp(0.5 * (outcome.low + outcome.high))
    width_deep = math.sqrt(n_star / (12.0 * deep))
    return Transition(
        n_star=n_star,
        width_deep=width_deep,
        width_deep_err=0.5 * width_deep * log_n_sigma(outcome, points),
        width_shallow=math.sqrt(n_star / (12.0 * shallow)),
        **common,
    )
