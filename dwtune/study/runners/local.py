"""The in-process runner: trains requests one after another in this process (no Ray).

Used by benchmarks and tests; same contract (:class:`~dwtune.study.runners.base.TrialRunner`) and
reuse policy as the Ray runner.
"""

from __future__ import annotations

from dwtune.backends.trial import run_trial_inprocess
from dwtune.core.records import TrialRecord, TrialRequest
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import TrialStatus
from dwtune.storage.store import ExperimentStore
from dwtune.study.feed import RequestFeed, drain
from dwtune.study.runners.base import reusable_record


class LocalRunner:
    """Records aligned with the requests; a recorded trial is reused, a new one is recorded."""

    def __init__(self, spec: ExperimentSpec, store: ExperimentStore):
        self.spec, self.store = spec, store
        self.trained = 0  # trainings this runner ran
        self._failed_here: set[str] = set()

    def run(self, requests: list[TrialRequest]) -> list[TrialRecord]:
        return [self._one(request) for request in requests]

    def run_feed(self, feed: RequestFeed) -> None:
        """Train the feed's requests one after another until every stream is done."""
        feed.start(lambda r: reusable_record(self.store, r, self._failed_here))
        drain(feed, self._one)

    def _one(self, request: TrialRequest) -> TrialRecord:
        record = reusable_record(self.store, request, self._failed_here)
        if record is not None:
            return record
        record = run_trial_inprocess(self.spec, request)
        self.store.write_record(record)
        self.trained += 1
        if record.status == TrialStatus.FAILED:
            self._failed_here.add(request.trial_id)
        return record
