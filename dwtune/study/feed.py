"""Independent work streams (the refine stage's pairs) turned into one stream of trainings.

Each stream is a generator that yields a batch of requests, is sent their records (same order)
and yields its next batch, until it returns its result (a pair's
:meth:`~dwtune.study.refine.PairRefiner.rounds`). :class:`RequestFeed` advances every stream on
its own: the moment the last record of a stream's batch arrives, that stream is sent its
records and its next batch is queued, whatever the other streams are doing. A runner keeps its
slots busy by asking :meth:`RequestFeed.next_request` whenever a slot is free and telling
:meth:`RequestFeed.finished` each record as it is written.

What a stream decides depends only on the records of its own requests, which are the same
records whichever order the trainings end in: a stream never waits for another, and never sees
another's records. So the concurrent stage takes the decisions a sequential one takes (tested
against :meth:`~dwtune.study.refine.RefineStage.run`).

A request already recorded (``reuse``: the runner's reuse policy) is answered at once and never
queued; a training another stream has queued or is running is shared, not run twice, and a
record this feed received is reused by every stream that asks for its identity later (a failure
included: it is not retried within one driver, like the runners' ``failed_here``).

Pure Python, no Ray: the Ray runner feeds it from a Tune searcher, the local runner in a loop,
tests from a shuffled queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dwtune.core.records import TrialRecord, TrialRequest
from dwtune.core.refine.early import PointNoise

Stream = Generator[list[TrialRequest], list[TrialRecord], Any]
Reuse = Callable[[TrialRequest], TrialRecord | None]


def _reuse_nothing(_request: TrialRequest) -> TrialRecord | None:
    return None


@dataclass
class _Waiting:
    """A stream's batch in flight: its requests and the records that have come in."""

    stream: Stream
    batch: list[TrialRequest]
    got: dict[str, TrialRecord] = field(default_factory=dict)

    def complete(self) -> bool:
        return all(r.trial_id in self.got for r in self.batch)

    def records(self) -> list[TrialRecord]:
        return [self.got[r.trial_id] for r in self.batch]


class RequestFeed:
    """The trainings of several streams, queued as each stream's batches come.

    ``on_queue(requests)`` is told every request queued for training (a display's planned
    count); ``on_reuse(records)`` every record answered from the store.
    """

    def __init__(
        self,
        streams: Sequence[Stream],
        on_queue: Callable[[list[TrialRequest]], None] | None = None,
        on_reuse: Callable[[list[TrialRecord]], None] | None = None,
    ):
        self.streams = list(streams)
        self.reuse: Reuse = _reuse_nothing
        self.on_queue, self.on_reuse = on_queue, on_reuse
        self.results: dict[int, Any] = {}  # stream index -> what the stream returned
        self.received: dict[str, TrialRecord] = {}  # records told to this feed, by trial id
        self.queued: deque[TrialRequest] = deque()  # to train, in the order they came
        self.in_flight: dict[str, TrialRequest] = {}  # handed out, no record yet
        self._waiting: dict[int, _Waiting] = {}
        self._started = False
        # refine.early_stop: request -> (noise sd, dof, equal-N correction) of its pair point
        self.early_context: Callable[[TrialRequest], PointNoise] | None = None

    # ------------------------------------------------------------------ the runner's side

    def start(self, reuse: Reuse | None = None) -> None:
        """Set the reuse policy; the first call also asks every stream for its first batch."""
        if reuse is not None:
            self.reuse = reuse
        if self._started:
            return
        self._started = True
        for index, stream in enumerate(self.streams):
            self._advance(index, stream, None)

    @property
    def done(self) -> bool:
        """Every stream has returned."""
        return self._started and len(self.results) == len(self.streams)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight: done, or a stream is stuck (a bug)."""
        return not self.queued and not self.in_flight

    def next_request(self) -> TrialRequest | None:
        """The next training to start (now in flight), or None while there is none."""
        if not self.queued:
            return None
        request = self.queued.popleft()
        self.in_flight[request.trial_id] = request
        return request

    def next_seeds(
        self, request: TrialRequest, same: Callable[[TrialRequest], bool], most: int
    ) -> list[TrialRequest]:
        """``request`` (just handed out) and up to ``most`` - 1 queued requests for which
        ``same`` holds (other seeds of its training), now in flight with it: one fused trial."""
        group = [request]
        for queued in list(self.queued):
            if len(group) >= most:
                break
            if same(queued):
                self.queued.remove(queued)
                self.in_flight[queued.trial_id] = queued
                group.append(queued)
        return group

    def finished(self, trial_id: str, record: TrialRecord) -> None:
        """A training's record: every stream waiting on it that now has its whole batch is
        sent its records and queues its next batch."""
        self.in_flight.pop(trial_id, None)
        self.received[trial_id] = record
        for index in sorted(self._waiting):
            waiting = self._waiting.get(index)
            if waiting is None or trial_id not in {r.trial_id for r in waiting.batch}:
                continue
            waiting.got[trial_id] = record
            if waiting.complete():
                del self._waiting[index]
                self._advance(index, waiting.stream, waiting.records())

    def batch_of(self, trial_id: str) -> list[tuple[TrialRequest, TrialRecord | None]] | None:
        """The waiting batch that holds ``trial_id``: each request with its record so far
        (None while it trains); None when no stream waits on it."""
        for waiting in self._waiting.values():
            if any(r.trial_id == trial_id for r in waiting.batch):
                return [(r, waiting.got.get(r.trial_id)) for r in waiting.batch]
        return None

    def results_in_order(self) -> list[Any]:
        return [self.results[i] for i in range(len(self.streams))]

    # ------------------------------------------------------------------ the streams' side

    def _known(self, request: TrialRequest) -> TrialRecord | None:
        if request.trial_id in self.received:
            return self.received[request.trial_id]
        return self.reuse(request)

    def _advance(self, index: int, stream: Stream, records: list[TrialRecord] | None) -> None:
        """Send ``records``; answer each batch from what is known until one needs training."""
        while True:
            try:
                batch = stream.send(records)  # type: ignore[arg-type]
            except StopIteration as finished:
                self.results[index] = finished.value
                return
            waiting = _Waiting(stream, list(batch))
            reused = []
            for request in waiting.batch:
                known = self._known(request)
                if known is not None:
                    waiting.got[request.trial_id] = known
                    if request.trial_id not in self.received:
                        reused.append(known)
            if reused and self.on_reuse:
                self.on_reuse(reused)
            if waiting.complete():
                records = waiting.records()
                continue
            self._waiting[index] = waiting
            self._queue([r for r in waiting.batch if r.trial_id not in waiting.got])
            return

    def _queue(self, requests: list[TrialRequest]) -> None:
        taken = {r.trial_id for r in self.queued} | set(self.in_flight)
        new = []
        for request in requests:
            if request.trial_id not in taken:
                taken.add(request.trial_id)
                new.append(request)
        self.queued.extend(new)
        if new and self.on_queue:
            self.on_queue(new)


def drain(feed: RequestFeed, train: Callable[[TrialRequest], TrialRecord]) -> None:
    """Train the feed's requests one after another until every stream is done (one slot)."""
    while not feed.done:
        request = feed.next_request()
        if request is None:
            raise RuntimeError("a stream waits for records no training will give (a bug)")
        feed.finished(request.trial_id, train(request))
