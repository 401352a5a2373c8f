"""A depth pair's points: paired Δ per seed at one budget, from trial records (pure: numpy).

A point is a budget at which both depths trained with paired seeds (same data order and
initialisation seed), each at its own rounded width. ``N`` of a point is the deeper net's size
on ``model.size_convention``'s axis. Rules (docs/statistics.md, "Paired Δ"):

- Equal N: the shallower net's loss is moved along its size trend
  (:class:`~dwtune.core.refine.trend.SizeTrend`) to the deeper net's size; the move's error
  joins the point's ``extra_sd``, an error shared by every seed.
- Paired evaluation: both nets are scored on the same held-out windows, so the evaluation's
  error of Δ is the se of the per-window difference (it also joins ``extra_sd``); records
  without window losses fall back to the two nets' errors in quadrature.
- Unstable trainings (a loss far above its twins', :func:`mark_unstable`) count as failures.
- Failures are outcomes: a failed training takes the worst loss its depth completed at the
  point, ±inf where it completed none; a seed where both failed is dropped; every failure is
  counted on its point and on the pair's transition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from dwtune.core.records import TrialRecord
from dwtune.core.refine.noise import robust_twin_sd, unstable_trainings
from dwtune.core.refine.signs import DeltaPoint
from dwtune.core.refine.trend import SizeTrend
from dwtune.core.vocabulary import PointKind, SizeConvention


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
    # stopped, its deltas the rule's end estimates, dwtune.core.refine.early); 0: none
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


def record_size(record: TrialRecord, convention: str) -> int:
    """A record's size on the axis of ``model.size_convention``."""
    return (
        record.params_total if convention == SizeConvention.TOTAL else record.params_non_embedding
    )


def usable(record: TrialRecord) -> bool:
    return record.completed and math.isfinite(record.best_val_loss)


def _loss(record: TrialRecord) -> float:
    """The record's loss; NaN for a training that failed or diverged."""
    return record.best_val_loss if usable(record) else math.nan


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
    errors = [r.val_loss_se**2 for r in records if usable(r) and math.isfinite(r.val_loss_se)]
    return float(np.mean(errors)) if errors else 0.0


def paired_eval_error(deep: Sequence[TrialRecord], shallow: Sequence[TrialRecord]) -> float:
    """Squared evaluation error of the point's mean Δ (nats²), from the per-window differences
    on the shared held-out windows (module doc); the quadrature of both nets' errors where a
    record has no window losses or the windows differ."""
    rows = [
        np.asarray(d.val_windows, dtype=float) - np.asarray(s.val_windows, dtype=float)
        for d, s in zip(deep, shallow, strict=True)
        if usable(d) and usable(s) and d.val_windows and len(d.val_windows) == len(s.val_windows)
    ]
    complete = sum(usable(d) and usable(s) for d, s in zip(deep, shallow, strict=True))
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
        x_deep = math.log(record_size(any_deep, convention))
        x_shallow = math.log(record_size(any_shallow, convention))
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


def merge_points(grid: Sequence[PairPoint], later: Sequence[PairPoint]) -> list[PairPoint]:
    """All points sorted by size; a later point at the same budget replaces the earlier one."""
    merged = {p.budget: p for p in grid}
    for point in later:
        merged[point.budget] = point
    return sorted(merged.values(), key=lambda p: (p.log_n, p.budget))
