"""refine.early_stop: a Tune scheduler that stops a pair point's trainings once their sign is
settled (:mod:`dwtune.core.refine.early`).

One refine run trains the points of every pair at once; a point's first trainings (both depths
× its first seeds, one batch of its pair's stream) are watched together. Each time one of them
reports an eval step that is one of the rule's looks, and every training of the batch has an
eval at that step (a training that already ended counts with its recorded curve), the rule is
called on the seeds' paired Δ up to that step, with the pair's noise and the equal-N correction
the refine stage gives (``RequestFeed.early_context``). Once it settles a sign, that training
and every other of the batch still running is stopped at its next report: status
early_stopped, its ``stopped_step`` recorded. The refine stage then recomputes the same call
from the records (:meth:`dwtune.study.refine.PairRefiner._early_call`), so the point's sign never
depends on this scheduler's memory, and a resumed stage decides the same: both make it with
:func:`dwtune.core.refine.early.point_call`.

Only a new size's first batch is watched (bisect and scan points): a point given more seeds
afterwards, and a verify point, has seeds trained to the end, and its decision stays with the
end-of-training rule. A stopped training is a finished one: its identity is recorded and a
rerun reuses it, so a verify point at a size the rule settled (a decisive point re-tested with
more seeds) holds the stopped batch's records beside its new ones: the batch's Δ are the end
estimates of the call the scheduler made (as the settled point was told), the new seeds' their
own end-of-training Δ, and the end-of-training rule decides over all of them.
"""

from __future__ import annotations

import json
import math

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from dwtune.core import vocabulary
from dwtune.core.records import TrialRecord, TrialRequest
from dwtune.core.refine import early
from dwtune.core.refine.early import EarlyRule, may_stop, run_evals
from dwtune.core.spec import ExperimentSpec
from dwtune.study.feed import RequestFeed
from dwtune.study.runners.ray_tune.trial import (
    FINAL_KEY,
    FUSED_KEY,
    MEMBERS_KEY,
    REQUEST_KEY,
    STARTED_KEY,
)

Curve = list[dict]
Batch = list[tuple[TrialRequest, TrialRecord | None]]


class PairPointStopper(FIFOScheduler):
    """Stops the trainings of a pair point's first batch once the early rule settles it."""

    def __init__(self, spec: ExperimentSpec, feed: RequestFeed):
        super().__init__()
        self.spec, self.feed = spec, feed
        self.rule = EarlyRule(spec.refine.alpha, spec.refine.early_min_fraction)
        self._curves: dict[str, Curve] = {}  # trial id -> its reports so far (step, val/loss)
        self._settled: dict[tuple[str, int], int] = {}  # (pair, round) -> the settling step
        self.stopped: dict[str, TrialRequest] = {}  # the trainings stopped here

    def __getstate__(self) -> dict:
        # Tune pickles its scheduler for Tuner.restore, which dwtune never calls; the feed
        # holds the pairs' generators, which do not pickle.
        return self.__dict__ | {"feed": None}

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True  # the metric is fixed: val/loss at eval steps

    def debug_string(self) -> str:
        return f"early sign decisions ({len(self._settled)} point(s) settled)"

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        group = trial.config.get(FUSED_KEY)
        if group and MEMBERS_KEY in result:
            return self._on_fused(group, json.loads(result[MEMBERS_KEY]))
        return self._on_report(trial.config.get(REQUEST_KEY), result)

    def _on_fused(self, group: list[TrialRequest], reports: dict[str, dict]) -> str:
        """A fused trial (one depth's seeds of a point) stops as a whole: when the rule
        settles the point on any seed's report, unless a seed ends in this very report."""
        if any(self._ends(own) for own in reports.values()):
            return TrialScheduler.CONTINUE
        by_id = {r.trial_id: r for r in group}
        calls = [self._on_report(by_id[i], own) for i, own in reports.items() if i in by_id]
        if TrialScheduler.STOP not in calls:
            return TrialScheduler.CONTINUE
        for request in group:
            self._stop(request)
        return TrialScheduler.STOP

    @staticmethod
    def _ends(result: dict) -> bool:
        return bool(result.get(FINAL_KEY) or result.get(STARTED_KEY) or vocabulary.STATUS in result)

    def _on_report(self, request: TrialRequest | None, result: dict) -> str:
        if request is None or not may_stop(request):
            return TrialScheduler.CONTINUE
        if self._ends(result):
            # a report that carries the training's end status: it has trained to its end (or
            # diverged), and stopping it here would lose its final report, so it would be
            # recorded early_stopped at its last step (seen once under a load of 9-10)
            return TrialScheduler.CONTINUE
        key = (request.pair, request.round)
        if key in self._settled:
            return self._stop(request)
        step, loss = result.get(vocabulary.STEP), result.get(vocabulary.VAL_LOSS)
        if step is None or loss is None or not math.isfinite(float(loss)):
            return TrialScheduler.CONTINUE
        self._curves.setdefault(request.trial_id, []).append(
            {vocabulary.STEP: int(step), vocabulary.VAL_LOSS: float(loss)}
        )
        if self._settles(request, int(step)):
            self._settled[key] = int(step)
            return self._stop(request)
        return TrialScheduler.CONTINUE

    def _stop(self, request: TrialRequest) -> str:
        self.stopped[request.trial_id] = request
        return TrialScheduler.STOP

    def _settles(self, request: TrialRequest, step: int) -> bool:
        """Whether the rule settles the request's point at ``step`` (module doc)."""
        context = self.feed.early_context if self.feed is not None else None
        batch = self.feed.batch_of(request.trial_id) if self.feed is not None else None
        if context is None or batch is None or self._not_first(request, batch):
            return False
        evals = run_evals(self.spec, request)
        if step not in self.rule.look_steps(evals, evals[-1]):
            return False
        curves = self._batch_curves(batch)
        if curves is None:
            return False
        deep, shallow = curves
        look = early.point_call(self.rule, deep, shallow, step, evals, context(request))
        return look is not None and look.call.settled

    def _not_first(self, request: TrialRequest, batch: Batch) -> bool:
        """Whether the point has trainings outside this batch (a later batch of seeds)."""
        mine = {r.trial_id for r, _ in batch}
        return any(
            record.pair == request.pair and record.round == request.round
            for trial_id, record in self.feed.received.items()
            if trial_id not in mine
        )

    def _batch_curves(self, batch: Batch) -> tuple[list[Curve], list[Curve]] | None:
        """(deep curves, shallow curves) by seed of the batch; None while a training of it has
        reported nothing, or one failed."""
        depths = sorted({r.shape.depth for r, _ in batch})
        if len(depths) != 2:
            return None
        by_seed: dict[int, dict[int, Curve]] = {}
        for request, record in batch:
            if record is not None and not record.completed:
                return None
            curve = record.curve if record is not None else self._curves.get(request.trial_id)
            if not curve:
                return None
            by_seed.setdefault(request.seed, {})[request.shape.depth] = curve
        if any(len(both) != 2 for both in by_seed.values()):
            return None
        seeds = sorted(by_seed)
        shallow, deep = depths
        return [by_seed[s][deep] for s in seeds], [by_seed[s][shallow] for s in seeds]


def early_stop_summary(spec: ExperimentSpec, store, stopped: dict[str, TrialRequest]) -> str:
    """One line: the trainings stopped early and the share of their planned steps saved (the
    share of their training FLOPs: a training's FLOPs per step are constant)."""
    planned = saved = 0
    count = 0
    for trial_id, request in stopped.items():
        record = store.read_record(trial_id)
        if record is None or not record.stopped_step:
            continue
        total = run_evals(spec, request)[-1]
        count, planned, saved = count + 1, planned + total, saved + total - record.stopped_step
    if not count:
        return "early decisions: no training stopped early"
    return (
        f"early decisions: {count} training(s) stopped early, {saved / planned:.0%} of "
        f"their planned steps saved"
    )
