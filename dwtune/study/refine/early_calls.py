"""A pair's early sign decisions (``refine.early_stop``): the noise the stopping scheduler
needs, and the scheduler's call made again when the point is decided."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dwtune.core.records import (
    TrialRequest,
)
from dwtune.core.refine import early, signs
from dwtune.core.refine.early import (
    EarlyCall,
    EarlyRule,
    PointNoise,
    run_evals,
    seed_end_estimates,
)
from dwtune.core.refine.noise import Noise
from dwtune.core.refine.points import (
    PairPoint,
    mark_unstable,
)
from dwtune.core.refine.signs import noise_prior
from dwtune.core.refine.trend import SizeTrend
from dwtune.study.journal import (
    trial_points,
)

# An early-stopped batch: (the sign the early rule settled, its seeds, each one's end estimate)
EarlyEnds = tuple[int, tuple[int, ...], tuple[float, ...]]


class EarlyCalls:
    """The early-decision half of :class:`~dwtune.study.refine.pair.PairRefiner`."""

    # ------------------------------------------------------------------ early decisions

    def early_context(self, request: TrialRequest) -> PointNoise:
        """The pair's paired-Δ noise (sd, dof) nearest the request's size, and the equal-N
        correction (nats) of its point: what the early rule needs (refine.early_stop). The
        pair's points do not change while one of its points trains, so the scheduler that
        stops the trainings and :meth:`_early_call` that decides the point agree."""
        budget = request.cell.budget
        x_deep, x_shallow = self._log_size(self.pair[1], budget), self._shallow_log_n(budget)
        measured, trend = self._measured_noise()
        correction = trend.slope_at(x_shallow) * (x_deep - x_shallow)
        if measured is None:
            return PointNoise(math.nan, 0.0, correction)
        log_ns, noise = measured
        nearest = min(range(len(log_ns)), key=lambda i: abs(log_ns[i] - x_deep))
        return PointNoise(float(noise.sd[nearest]), float(noise.dof[nearest]), correction)

    def _measured_noise(self) -> tuple[tuple[list[float], Noise] | None, SizeTrend]:
        """(each point's ln N, the pair's noise at them) over the pair's points as they stand
        (None without points), and the equal-N trend they are corrected along. Computed once
        per state of the pair's points: the scheduler asks at every eval report of every
        training, and the points change only when a round is told (which empties the cache),
        so no ask reads the journal."""
        if self._noise_cache is not None:
            return self._noise_cache
        merged, trend = self._equal_n(trial_points(self.study))
        points = mark_unstable(merged)
        measured = None
        if points:
            noise = signs.pair_noise([p.delta_point() for p in points], noise_prior(self.refine))
            measured = ([p.log_n for p in points], noise)
        self._noise_cache = (measured, trend)
        return self._noise_cache

    def _early_call(
        self, budget: float, records: dict, told: Sequence[PairPoint]
    ) -> EarlyEnds | None:
        """(the sign the early rule settled, the seeds it settled it on, each one's end
        estimate) where the scheduler stopped a first batch of trainings at ``budget`` (their
        records hold partial losses), else None. Always the scheduler's own call: for a later
        point at the same size (a verify point reuses the batch's records, one identity one
        record, beside seeds it trains to the end) the told point the rule settled there says
        it; for a point being first trained, the call is recomputed from its records. The
        first told point with an early sign at that size is the one: a journal written while
        a verify point still took the early sign holds, after it, such a verify point over
        every seed, its added seeds' Δ extrapolated from a call the scheduler never made.
        ``told``: the pair's told points (the journal, read once by the caller)."""
        settled = [
            point
            for point in told
            if point.early_sign and math.isclose(point.budget, budget, rel_tol=1e-9)
        ]
        if settled:
            origin = settled[0]
            ends = dict(zip(origin.seeds, origin.deltas, strict=True))
            batch = tuple(seed for seed in origin.seeds if seed in records)
            return origin.early_sign, batch, tuple(ends[seed] for seed in batch)
        first = self._first_batch_call(budget, records)
        if first is None or not first[0].settled:
            return None
        call, batch, ends = first
        return call.sign, batch, ends

    def _first_batch_call(
        self, budget: float, records: dict
    ) -> tuple[EarlyCall, tuple[int, ...], tuple[float, ...]] | None:
        """(the early rule's call, the seeds, each one's end estimate) on a point's first
        batch at the step the first of its trainings stopped, as the scheduler made it
        (core/point_call); None where no training stopped or no call can be
        made there."""
        batch = tuple(sorted(records))
        pairs = [records[seed] for seed in batch]
        stopped = [r.stopped_step for pair in pairs for r in pair if r.stopped_step]
        if not stopped or not all(r.completed for pair in pairs for r in pair):
            return None
        request = self._request(self.spec.cell(self.pair[1], budget), pairs[0][0].seed)
        evals = run_evals(self.spec, request)
        rule = EarlyRule(self.refine.alpha, self.refine.early_min_fraction)
        look = early.point_call(
            rule,
            [deep.curve for deep, _ in pairs],
            [shallow.curve for _, shallow in pairs],
            min(stopped),
            evals,
            self.early_context(request),
        )
        if look is None:
            return None
        ends = seed_end_estimates(look.steps, look.deltas, evals[-1])
        return look.call, batch, tuple(float(d) for d in ends)
