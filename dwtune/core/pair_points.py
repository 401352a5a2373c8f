"""A depth pair's points: paired Δ per seed at one budget, from trial records (pure: numpy).

Sizes. A point is a budget at which both depths were trained, each at its own rounded width, so
their paper sizes ``12·L·w²`` differ by a few percent. ``N`` of a point is the deeper net's size
(``x = ln N``); the transition is reported on that axis, so ``dx* = sqrt(N*/(12·Ld))`` is the
width the deeper net really had. Δ is compared at equal ``N``: the shallower net's loss is moved
along its own size trend, ``loss_Ls(x) ≈ loss_Ls(x_s) + slope·(x − x_s)``, where ``slope`` is the
derivative of the shallower depth's mean grid loss in ``ln N`` (central differences between grid
budgets, interpolated; a law-design pair's extension points join it, :func:`extended_trend`).
Without it, width rounding alone shifts Δ by ~0.005 nats at 1e7 parameters, more than a seed's
noise. What the interpolated slope cannot know (the loss curve's bend between grid budgets,
:class:`SizeTrend`) times the size gap is an error shared by every seed of the point: it joins
the point's ``extra_sd``.

Paired seeds. Each seed trains both depths (same data order and initialisation seed), so Δ is
taken seed by seed and its noise is that of a paired difference. The noise model (learned from
the seeds, allowed to change with size; the spec's guess worth a stated number of
pseudo-observations) is :mod:`dwtune.core.noise`.

Paired evaluation. Both nets of a point are scored on the same held-out windows (the trainer
records each window's loss at the evaluation that gave ``best_val_loss``). The evaluation's
sampling error of Δ is therefore the standard error of the per-window difference, averaged
over the point's seeds, ``sd_w(mean_s(l_deep − l_shallow)) / sqrt(W)``: the windows that are
hard for one net are hard for the other, so this is several times smaller than the two nets'
errors in quadrature (0.007-0.013 against 0.045-0.055 nats on the quickstart's layout). It is
shared by every seed (the windows are the same), so it joins ``extra_sd``. Records without
window losses (trained before they were kept) fall back to the quadrature, which overstates it.

Unstable trainings. A training whose loss ends far above its twins' (the same shape, other
seeds, at the same point) is *unstable* (:func:`dwtune.core.noise.unstable_trainings`, with the
pair's robust twin sd as the scale). It counts as a failure of its net at that seed (below), so
it costs its shape the sign there, and says nothing of the seed noise.

Failures are outcomes. A training that diverged, failed or went unstable at a seed where the
other depth
completed takes the worst (largest) loss its depth completed at that point, so it counts against
its shape without outweighing the seeds that trained; where its depth completed nothing at that
point, Δ is +inf (the deeper net failed: it loses there) or −inf (the shallower one failed). A
seed where both failed carries no sign and is dropped. Every failure is counted on its point
(``failures_deep``/``failures_shallow``) and on the pair's transition. An infinite Δ decides a
sign only once the point has ``max_seeds`` seeds (more seeds are trained first), and in means
and estimates stands for the pair's most extreme finite Δ of that sign
(:func:`dwtune.core.crossing.point_means`); a budget where one depth failed at every seed is a
point, never absent.

Sizes follow ``model.size_convention``: ``params_non_embedding`` (the paper's 12·L·w²) or
``params_total``, both for a point's ``ln N`` and for the equal-N correction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from dwtune.core.crossing import DeltaPoint
from dwtune.core.errors import InputError
from dwtune.core.noise import robust_twin_sd, unstable_trainings
from dwtune.core.records import TrialRecord
from dwtune.core.vocabulary import OTHER_LENGTH_STAGES, PointKind, SizeConvention


@dataclass(frozen=True)
class Decision:
    """The sign test of one point: mean paired Δ (nats), its standard error and the verdict."""

    mean: float
    se: float
    sd: float  # paired-difference sd the test used
    decided: bool
    boundary: float = math.nan  # |mean|/se the test required (the look's α-spending boundary)
    confirm: float = 3.0  # |mean|/se that makes a run count outside the + then − pattern

    @property
    def sign(self) -> int:
        """+1: the deeper net loses here; -1: it wins; 0: within noise."""
        return int(np.sign(self.mean)) if self.decided else 0


UNTESTED = Decision(math.nan, math.nan, math.nan, False)  # a point before its sign test


# --------------------------------------------------------------------------- points


@dataclass(frozen=True)
class PairPoint:
    """Both depths of a pair trained at one budget, with paired seeds."""

    budget: float
    log_n: float  # ln of the deeper net's size (model.size_convention)
    width_deep: int
    width_shallow: int
    seeds: tuple[int, ...]  # seeds with a Δ (at least one depth completed)
    deltas: tuple[float, ...]  # Δ per seed at equal N (nats); ±inf for a failure (module doc)
    decision: Decision
    kind: str = PointKind.GRID
    requested: int = 0  # seeds asked for (some trainings may have failed)
    extra_sd: float = 0.0  # nats: evaluation and size-trend error shared by every seed
    failures_deep: int = 0  # trainings that failed, diverged or went unstable here
    failures_shallow: int = 0
    verified: bool = False  # re-tested with more seeds before the pair closed
    # (seed, deep loss, shallow loss) of every seed trained, NaN where a training failed: the
    # input Δ is rebuilt from when the instability rule flags a training
    losses: tuple[tuple[int, float, float], ...] = ()
    size_correction: float = 0.0  # nats: the equal-N move subtracted from every Δ
    size_correction_sd: float = 0.0  # nats: that move's error, the trend's share of extra_sd
    unstable_deep: tuple[int, ...] = ()  # seeds whose deeper training is flagged unstable
    unstable_shallow: tuple[int, ...] = ()  # (each also counts as a failure)
    # the sign the early rule settled from partial curves (refine.early_stop: its trainings
    # stopped, its deltas the rule's end estimates, dwtune.core.early_decision); 0: none
    early_sign: int = 0

    @property
    def n(self) -> int:
        return len(self.deltas)

    def within_noise(self, max_seeds: int) -> bool:
        """Undecided with every seed it may have: it cannot bound a bracket."""
        return not self.decision.decided and max(self.requested, self.n) >= max_seeds

    def delta_point(self) -> DeltaPoint:
        unstable = tuple(
            ("deep" if s in self.unstable_deep else "")
            + ("shallow" if s in self.unstable_shallow else "")
            for s in self.seeds
        )
        return DeltaPoint(
            n=math.exp(self.log_n),
            deltas=self.deltas,
            extra_sd=self.extra_sd,
            seeds=self.seeds,
            failures_deep=self.failures_deep,
            failures_shallow=self.failures_shallow,
            unstable=unstable if any(unstable) else (),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PairPoint:
        """A point from a journal; fields added since (with defaults) may be absent."""
        raw = dict(raw)
        raw["decision"] = Decision(**raw["decision"])
        raw["seeds"] = tuple(raw["seeds"])
        raw["deltas"] = tuple(float(d) for d in raw["deltas"])
        rows = raw.get("losses", ())
        raw["losses"] = tuple((int(seed), float(d), float(s)) for seed, d, s in rows)
        for side in ("unstable_deep", "unstable_shallow"):
            raw[side] = tuple(int(seed) for seed in raw.get(side, ()))
        return cls(**raw)


def size_of(record: TrialRecord, convention: str) -> int:
    """A record's size on the axis of ``model.size_convention``."""
    return (
        record.params_total if convention == SizeConvention.TOTAL else record.params_non_embedding
    )


class SizeTrend:
    """d loss / d ln N of the shallower depth, from its mean grid losses (nats per e-fold),
    and how far that slope may be off between grid budgets.

    The slope's uncertainty at a grid size is half the difference of the one-sided slopes
    there (the next size's on one side, the previous one's on the other): the loss curve's
    own bend between budgets, which a slope interpolated between them cannot follow. Why: a
    depth's loss curve bends where the depth passes its own transition, within a grid step;
    on the simulated study its slope was 8% off and the correction's error reached 0.0005
    nats (a quarter of a seed's noise, the same at every seed of a point). Carried so, the
    study's 68% intervals held the truth in 65.0% of 600 pairs instead of 63.7%
    (``benchmarks/study_coverage.py``, 100 realisations).
    """

    def __init__(self, log_n: Sequence[float], losses: Sequence[float]):
        order = np.argsort(log_n)
        self.x = np.asarray(log_n, dtype=float)[order]
        self.losses = y = np.asarray(losses, dtype=float)[order]
        self.slopes = np.gradient(y, self.x) if self.x.size >= 2 else np.zeros_like(self.x)
        self.slope_sds = _bend(self.x, y)

    def slope_at(self, log_n: float) -> float:
        return float(np.interp(log_n, self.x, self.slopes)) if self.x.size else 0.0

    def slope_sd_at(self, log_n: float) -> float:
        return float(np.interp(log_n, self.x, self.slope_sds)) if self.x.size else 0.0


def _bend(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Half the difference of the one-sided slopes at each size (SizeTrend); an end size
    takes its neighbour's; fewer than three sizes show no bend (0)."""
    if x.size < 3:
        return np.zeros_like(x)
    secants = np.diff(y) / np.diff(x)
    inner = 0.5 * np.abs(np.diff(secants))
    return np.concatenate([inner[:1], inner, inner[-1:]])


def _usable(record: TrialRecord) -> bool:
    return record.completed and math.isfinite(record.best_val_loss)


def _loss(record: TrialRecord) -> float:
    """The record's loss; NaN for a training that failed or diverged."""
    return record.best_val_loss if _usable(record) else math.nan


@dataclass(frozen=True)
class PairedDeltas:
    seeds: tuple[int, ...]
    deltas: tuple[float, ...]
    failures_deep: int
    failures_shallow: int
    extra_sd: float  # nats: the evaluation's paired error and the size trend's, in quadrature
    losses: tuple[tuple[int, float, float], ...] = ()  # (seed, deep, shallow), NaN: failed
    size_correction: float = 0.0  # nats: the equal-N move subtracted from every Δ
    size_correction_sd: float = 0.0  # nats: that move's error, the trend's share of extra_sd
    unstable_deep: int = 0
    unstable_shallow: int = 0


def _quadrature_eval_error(records: Iterable[TrialRecord]) -> float:
    """Mean squared val/loss_se of the completed records (nats²; 0 where none was reported):
    the fallback for records without window losses (module doc)."""
    errors = [r.val_loss_se**2 for r in records if _usable(r) and math.isfinite(r.val_loss_se)]
    return float(np.mean(errors)) if errors else 0.0


def paired_eval_error(deep: Sequence[TrialRecord], shallow: Sequence[TrialRecord]) -> float:
    """Squared evaluation error of the point's mean Δ (nats²), from the per-window differences
    on the shared held-out windows (module doc); the quadrature of both nets' errors where a
    record has no window losses or the windows differ."""
    rows = [
        np.asarray(d.val_windows, dtype=float) - np.asarray(s.val_windows, dtype=float)
        for d, s in zip(deep, shallow, strict=True)
        if _usable(d) and _usable(s) and d.val_windows and len(d.val_windows) == len(s.val_windows)
    ]
    complete = sum(_usable(d) and _usable(s) for d, s in zip(deep, shallow, strict=True))
    if not rows or len(rows) < complete or rows[0].size < 2:
        return _quadrature_eval_error(deep) + _quadrature_eval_error(shallow)
    per_window: np.ndarray = np.mean(rows, axis=0)  # the mean Δ's share of each window
    return float(np.var(per_window, ddof=1)) / per_window.size


def deltas_from_losses(
    losses: Sequence[tuple[float, float]],
    correction: float,
    unstable: Sequence[tuple[bool, bool]] = (),
) -> tuple[list[int], list[float], int, int]:
    """(kept indices, Δ, failed deep, failed shallow) from each seed's (deep, shallow) loss.

    A failed (NaN) or unstable loss takes the worst stable loss of its depth at the point,
    ±inf where there is none; a seed where both failed is dropped (module doc)."""
    flags = list(unstable) or [(False, False)] * len(losses)
    ok = [
        (math.isfinite(d) and not fd, math.isfinite(s) and not fs)
        for (d, s), (fd, fs) in zip(losses, flags, strict=True)
    ]
    worst_deep = max((d for (d, _), (a, _b) in zip(losses, ok, strict=True) if a), default=None)
    worst_shallow = max((s for (_, s), (_a, b) in zip(losses, ok, strict=True) if b), default=None)
    kept, deltas = [], []
    for i, ((d, s), (ok_d, ok_s)) in enumerate(zip(losses, ok, strict=True)):
        if not (ok_d or ok_s):
            continue  # both failed: no sign
        loss_d = d if ok_d else worst_deep
        loss_s = s if ok_s else worst_shallow
        if loss_d is None or loss_s is None:
            deltas.append(math.inf if loss_d is None else -math.inf)
        else:
            deltas.append(loss_d - loss_s - correction)
        kept.append(i)
    failed_deep = sum(not a for a, _ in ok)
    failed_shallow = sum(not b for _, b in ok)
    return kept, deltas, failed_deep, failed_shallow


def paired_deltas(
    deep: dict[int, TrialRecord],
    shallow: dict[int, TrialRecord],
    trend: SizeTrend,
    convention: str = SizeConvention.NON_EMBEDDING.value,
) -> PairedDeltas:
    """Δ at the deeper net's size of every seed both depths ran; failures count (module doc)."""
    common = sorted(s for s in deep if s in shallow)
    losses = tuple((_loss(deep[s]), _loss(shallow[s])) for s in common)
    moved, moved_sd = 0.0, 0.0  # nats: the size trend's correction and its shared error
    if common:
        any_deep, any_shallow = deep[common[0]], shallow[common[0]]
        x_deep = math.log(size_of(any_deep, convention))
        x_shallow = math.log(size_of(any_shallow, convention))
        moved = trend.slope_at(x_shallow) * (x_deep - x_shallow)
        moved_sd = trend.slope_sd_at(x_shallow) * abs(x_deep - x_shallow)
    kept, deltas, failed_deep, failed_shallow = deltas_from_losses(losses, moved)
    evaluation = paired_eval_error([deep[s] for s in common], [shallow[s] for s in common])
    extra = math.sqrt(evaluation + moved_sd**2)
    seeds = tuple(common[i] for i in kept)
    rows = tuple((seed, d, s) for seed, (d, s) in zip(common, losses, strict=True))
    return PairedDeltas(
        seeds, tuple(deltas), failed_deep, failed_shallow, extra,
        losses=rows, size_correction=moved, size_correction_sd=moved_sd,
    )  # fmt: skip


def make_point(
    budget: float,
    sizes: tuple[float, int, int],
    deep: dict[int, TrialRecord],
    shallow: dict[int, TrialRecord],
    trend: SizeTrend,
    kind: str,
    requested: int,
    convention: str = SizeConvention.NON_EMBEDDING.value,
) -> PairPoint:
    """A point (undecided until :func:`decide_points`) from both depths' records at ``budget``.

    ``sizes`` is (ln N of the deeper net, deeper width, shallower width).
    """
    paired = paired_deltas(deep, shallow, trend, convention)
    log_n, width_deep, width_shallow = sizes
    return PairPoint(
        losses=paired.losses,
        size_correction=paired.size_correction,
        size_correction_sd=paired.size_correction_sd,
        budget=float(budget),
        log_n=float(log_n),
        width_deep=int(width_deep),
        width_shallow=int(width_shallow),
        seeds=paired.seeds,
        deltas=paired.deltas,
        decision=UNTESTED,
        kind=kind,
        requested=requested,
        extra_sd=paired.extra_sd,
        failures_deep=paired.failures_deep,
        failures_shallow=paired.failures_shallow,
    )


def by_budget(
    records: Iterable[TrialRecord], depth: int, budgets: Sequence[float], seeds: Sequence[int]
) -> dict[float, dict[int, TrialRecord]]:
    """Records (completed or failed) of ``depth`` at grid ``budgets`` and ``seeds``; a trial
    of another training length (a search or length-check trial) is never a grid point."""
    table: dict[float, dict[int, TrialRecord]] = {}
    for record in records:
        if record.depth != depth or record.seed not in seeds:
            continue
        if record.stage in OTHER_LENGTH_STAGES:
            continue
        budget = next((b for b in budgets if math.isclose(b, record.budget, rel_tol=1e-9)), None)
        if budget is not None:
            table.setdefault(budget, {})[record.seed] = record
    return table


def shallow_trend(table: dict[float, dict[int, TrialRecord]], convention: str) -> SizeTrend:
    """The size trend of one depth's completed grid means (one rounded width merged)."""
    by_size: dict[int, list[float]] = {}
    for row in table.values():
        for record in filter(_usable, row.values()):
            by_size.setdefault(size_of(record, convention), []).append(record.best_val_loss)
    sizes = sorted(by_size)
    return SizeTrend([math.log(s) for s in sizes], [float(np.mean(by_size[s])) for s in sizes])


@dataclass(frozen=True)
class PairGrid:
    """What the grid knows of one pair: its points and the shallower depth's size trend."""

    depth_shallow: int
    depth_deep: int
    points: tuple[PairPoint, ...]
    trend: SizeTrend = field(repr=False)
    convention: str = SizeConvention.NON_EMBEDDING.value

    @property
    def label(self) -> str:
        return f"{self.depth_shallow}-{self.depth_deep}"


def _sizes_of(
    deep: dict[int, TrialRecord], shallow: dict[int, TrialRecord], convention: str
) -> tuple[float, int, int]:
    any_deep, any_shallow = next(iter(deep.values())), next(iter(shallow.values()))
    return math.log(size_of(any_deep, convention)), any_deep.width, any_shallow.width


def grid_pair(
    records: Sequence[TrialRecord],
    pair: tuple[int, int],
    budgets: Sequence[float],
    seeds: Sequence[int],
    convention: str = SizeConvention.NON_EMBEDDING.value,
    trend_budgets: Sequence[float] = (),
) -> PairGrid:
    """The pair's grid points (every budget both depths ran, failures included; undecided
    until :func:`decide_points`); InputError if a depth has no finished grid trial. The
    shallower depth's size trend takes its grid means at ``budgets`` and ``trend_budgets``
    (ExperimentSpec.shallow_budgets)."""
    shallow_depth, deep_depth = pair
    tables = {d: by_budget(records, d, budgets, seeds) for d in pair}
    everywhere = sorted({*budgets, *trend_budgets})
    for depth in pair:
        if not any(_usable(r) for row in tables[depth].values() for r in row.values()):
            raise InputError(
                f"refine pair [{shallow_depth}, {deep_depth}]: depth {depth} has no finished grid "
                f"trials; add it to space.depths and rerun `dwtune run`"
            )
    trend = shallow_trend(by_budget(records, shallow_depth, everywhere, seeds), convention)
    common = [b for b in budgets if b in tables[deep_depth] and b in tables[shallow_depth]]
    points = []
    for b in common:
        deep, shallow = tables[deep_depth][b], tables[shallow_depth][b]
        sizes = _sizes_of(deep, shallow, convention)
        points.append(
            make_point(b, sizes, deep, shallow, trend, PointKind.GRID, len(seeds), convention)
        )
    return PairGrid(shallow_depth, deep_depth, tuple(points), trend, convention)


def _twin_groups(points: Sequence[PairPoint]) -> list[list[float]]:
    """Each point's deep losses and its shallow losses: groups of twins (same shape)."""
    groups = []
    for point in points:
        groups.append([d for _, d, _ in point.losses])
        groups.append([s for _, _, s in point.losses])
    return groups


def mark_unstable(points: Sequence[PairPoint]) -> list[PairPoint]:
    """The points with every unstable training (module doc) counted as a failure of its net.

    The scale is the robust sd of twin differences over all of the pair's points, so one wild
    training cannot hide itself by inflating it. Idempotent: Δ is rebuilt from the losses."""
    groups = _twin_groups(points)
    flags = unstable_trainings(groups, robust_twin_sd(groups))
    marked = []
    for i, point in enumerate(points):
        if not point.losses:  # a journal point from before losses were kept
            marked.append(point)
            continue
        pairs = list(zip(flags[2 * i], flags[2 * i + 1], strict=True))
        seeds = [seed for seed, _, _ in point.losses]
        kept, deltas, failed_deep, failed_shallow = deltas_from_losses(
            [(d, s) for _, d, s in point.losses], point.size_correction, pairs
        )
        marked.append(
            replace(
                point,
                seeds=tuple(seeds[k] for k in kept),
                deltas=tuple(deltas),
                failures_deep=failed_deep,
                failures_shallow=failed_shallow,
                unstable_deep=tuple(s for s, (d, _) in zip(seeds, pairs, strict=True) if d),
                unstable_shallow=tuple(s for s, (_, h) in zip(seeds, pairs, strict=True) if h),
            )
        )
    return marked


def with_early_ends(
    point: PairPoint, batch: Sequence[int], ends: Sequence[float], sign: int
) -> PairPoint:
    """``point`` with the Δ of its early-stopped batch (``batch``, the seeds the early rule
    settled) replaced by that rule's end estimates ``ends`` (their records hold partial losses).
    The early sign stays only where the batch is every seed the point has; seeds trained to the
    end beyond it (a verify point at the same size) keep their own Δ, and the point is then
    decided by the end-of-training rule over all of them. No losses: a partial loss is no
    one's twin in the instability check (:func:`mark_unstable` skips such a point)."""
    by_seed = dict(zip(point.seeds, point.deltas, strict=True))
    by_seed.update(zip(batch, (float(e) for e in ends), strict=True))
    seeds = tuple(sorted(by_seed))
    only_the_batch = set(seeds) <= set(batch)
    return replace(
        point,
        seeds=seeds,
        deltas=tuple(by_seed[s] for s in seeds),
        losses=(),
        early_sign=sign if only_the_batch else 0,
    )


# --------------------------------------------------------------------------- extended trend


def extension_budgets(told: Iterable[PairPoint]) -> frozenset[float]:
    """The budgets where the pair extended (law design), from every point it was told: a
    point verified later keeps its budget, not its kind."""
    return frozenset(p.budget for p in told if p.kind == PointKind.EXTEND)


def extended_trend(
    trend: SizeTrend,
    points: Sequence[PairPoint],
    shallow_log_n: Callable[[float], float],
    extensions: Collection[float] = (),
) -> SizeTrend:
    """``trend`` with the shallower net's mean loss at each law-design extension point added
    (a point of kind extend, or at one of ``extensions``: :func:`extension_budgets`;
    ``shallow_log_n(budget)``: ln of the shallower net's size there), or ``trend`` itself
    where the pair has none.

    Why: the law design's grid trains the shallower depth at two sizes or so around the
    reference law's N*; where that law is off, the pair extends beyond them and every point
    near its N* would take an extrapolated slope (the end secant, with no bend error). On
    ``search_spaces/paper.yaml``'s simulated twin at a slope b 30% below the reference, that
    slope was 5-25% off and the 95% intervals held N* in 81% of 600 pairs
    (``benchmarks/study_coverage.py``). The extensions lie e-folds apart, so their means give
    the slope and its bend between them without the noise of the dense points near N*."""
    extra: dict[float, list[float]] = {}
    for point in points:
        # Why the budgets: a re-verified extension point becomes a verify point, and its
        # shallower net then left the trend (paper.yaml's twin with looser stops, pair 24-30)
        if point.kind != PointKind.EXTEND and point.budget not in extensions:
            continue
        shallow = [s for seed, _, s in point.losses if math.isfinite(s)
                   and seed not in point.unstable_shallow]  # fmt: skip
        if shallow:
            extra.setdefault(shallow_log_n(point.budget), []).extend(shallow)
    if not extra:
        return trend
    by_x = {float(x): float(y) for x, y in zip(trend.x, trend.losses, strict=True)}
    for x, losses in extra.items():
        if not any(math.isclose(k, x, abs_tol=1e-9) for k in by_x):  # a grid size: kept
            by_x[x] = float(np.mean(losses))
    xs = sorted(by_x)
    return SizeTrend(xs, [by_x[x] for x in xs])


def retrended(point: PairPoint, trend: SizeTrend, log_n_shallow: float) -> PairPoint:
    """``point`` corrected along ``trend`` instead of the trend it was made with: the equal-N
    move, every finite Δ and the trend's share of ``extra_sd`` recomputed (the same point
    again where it already is)."""
    gap = point.log_n - log_n_shallow
    moved = trend.slope_at(log_n_shallow) * gap
    moved_sd = trend.slope_sd_at(log_n_shallow) * abs(gap)
    shift = point.size_correction - moved
    deltas = tuple(d + shift if math.isfinite(d) else d for d in point.deltas)
    rest = max(point.extra_sd**2 - point.size_correction_sd**2, 0.0)
    return replace(
        point,
        deltas=deltas,
        size_correction=moved,
        size_correction_sd=moved_sd,
        extra_sd=math.sqrt(rest + moved_sd**2),
    )


def on_extended_trend(
    points: Sequence[PairPoint],
    trend: SizeTrend,
    shallow_log_n: Callable[[float], float],
    extensions: Collection[float] = (),
) -> tuple[list[PairPoint], SizeTrend]:
    """Every point corrected along :func:`extended_trend` (``points`` as they are where the
    pair has no extension), and that trend: made from the records alone, so a resumed pair
    sees the same."""
    extended = extended_trend(trend, points, shallow_log_n, extensions)
    if extended is trend:
        return list(points), trend
    return [retrended(p, extended, shallow_log_n(p.budget)) for p in points], extended


def merge_points(grid: Sequence[PairPoint], later: Sequence[PairPoint]) -> list[PairPoint]:
    """All points sorted by size; a later point at the same budget replaces the earlier one."""
    merged = {p.budget: p for p in grid}
    for point in later:
        merged[point.budget] = point
    return sorted(merged.values(), key=lambda p: (p.log_n, p.budget))
