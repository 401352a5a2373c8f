"""The in-process runner: trains requests one after another in this process (no Ray).

Used by benchmarks and tests; same contract (:class:`~dwtune.study.runners.base.TrialRunner`) and
reuse policy as the Ray runner. A batch's seeds of one training (a grid cell's) train as one
fused trial (:mod:`dwtune.study.fusion`); a feed's requests come one at a time and train alone.
"""

from __future__ import annotations

from dwtune.backends.trial import run_fused_inprocess, run_trial_inprocess
from dwtune.core.memory import usable_gpu_bytes
from dwtune.core.records import TrialRecord, TrialRequest
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import TrialStatus
from dwtune.storage.store import ExperimentStore
from dwtune.study.feed import RequestFeed, drain
from dwtune.study.fusion import fused_groups
from dwtune.study.runners.base import reusable_record, reusable_records


class LocalRunner:
    """Records aligned with the requests; a recorded trial is reused, a new one is recorded."""

    def __init__(self, spec: ExperimentSpec, store: ExperimentStore):
        self.spec, self.store = spec, store
        self.trained = 0  # trainings this runner ran
        self._failed_here: set[str] = set()

    def run(self, requests: list[TrialRequest]) -> list[TrialRecord]:
        records = reusable_records(self.store, requests, self._failed_here)
        fresh = {r.trial_id: r for r in requests if r.trial_id not in records}
        gpu_bytes = usable_gpu_bytes(None, self.spec.resources.gpu_memory_gb)
        for group in fused_groups(self.spec, list(fresh.values()), gpu_bytes):
            trained = [self._one(group[0])] if len(group) == 1 else self._fused(group)
            records.update((record.trial_id, record) for record in trained)
        return [records[r.trial_id] for r in requests]

    def _fused(self, group: list[TrialRequest]) -> list[TrialRecord]:
        """Seeds of one training as one fused trial; each seed's record written."""
        records = run_fused_inprocess(self.spec, group)
        for record in records:
            self._keep(record)
        return records

    def run_feed(self, feed: RequestFeed) -> None:
        """Train the feed's requests one after another until every stream is done."""
        feed.start(lambda r: reusable_record(self.store, r, self._failed_here))
        drain(feed, self._one)

    def _one(self, request: TrialRequest) -> TrialRecord:
        record = reusable_record(self.store, request, self._failed_here)
        if record is not None:
            return record
        record = run_trial_inprocess(self.spec, request)
        self._keep(record)
        return record

    def _keep(self, record: TrialRecord) -> None:
        """Write a new record (a failed one is not retried by this runner)."""
        self.store.write_record(record)
        self.trained += 1
        if record.status == TrialStatus.FAILED:
            self._failed_here.add(record.trial_id)
