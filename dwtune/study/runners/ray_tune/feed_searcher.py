"""A Tune searcher that takes its trials from a :class:`~dwtune.study.feed.RequestFeed`.

One Tune run serves a whole stage whose work is not known up front (the refine stage's pairs
propose their next points as their own points finish): Tune asks :meth:`FeedSearcher.suggest`
whenever it can queue a trial; the searcher hands out the feed's next request, ``None`` while
every pair is waiting for trainings still running, and ``FINISHED`` once every pair is done.
Records reach the feed through the recording callback (after each record is written), never
through ``on_trial_complete``, which Tune calls before its callbacks.

Sharded trials (a request whose trial spans several workers) are capped here, not by Tune's
``max_concurrent_trials``, which would cap the one-process trials of the run too: at most
``sharded_limit`` of them run at once; a sharded request handed out past that is held (it
stays in flight for the feed) and suggested once one of them completes, while one-process
requests behind it go ahead.
"""

from __future__ import annotations

from collections import deque

from ray.tune.search import Searcher

from dwtune.core.records import TrialRequest
from dwtune.study.feed import RequestFeed
from dwtune.study.fusion import training_key
from dwtune.study.runners.ray_tune.trial import FUSED_KEY, REQUEST_KEY, WORKERS_KEY


class FeedSearcher(Searcher):
    def __init__(
        self,
        feed: RequestFeed,
        on_hand_out=None,
        workers_of=None,
        sharded_limit: int | None = None,
        seeds_of=None,
    ):
        super().__init__(metric=None, mode=None)
        self.feed, self.on_hand_out = feed, on_hand_out
        self.workers_of = workers_of  # request -> the workers its trial spans (sharding)
        self.sharded_limit = sharded_limit  # sharded trials at once (None: no limit)
        self.sharded_running: set[str] = set()  # Tune trial ids of sharded trials running
        self.held: deque[TrialRequest] = deque()  # sharded requests waiting for a slot
        # (request, queued seeds of its training) -> how many one trial fuses (None: one)
        self.seeds_of = seeds_of

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        if self.feed.done:
            return Searcher.FINISHED
        request = self._next()
        if request is None:
            return None
        workers = self._workers(request)
        group = self._seeds(request) if workers == 1 else [request]
        if self.on_hand_out is not None:
            self.on_hand_out(group)
        if workers > 1:
            self.sharded_running.add(trial_id)
        config = {"trial_id": request.trial_id, REQUEST_KEY: request, WORKERS_KEY: workers}
        return {**config, FUSED_KEY: group} if len(group) > 1 else config

    def _seeds(self, request: TrialRequest) -> list[TrialRequest]:
        """The request and the queued seeds of its training one trial fuses with it (a
        refine point's seeds at one depth)."""
        if self.seeds_of is None:
            return [request]
        key = training_key(request)
        same = [r for r in self.feed.queued if training_key(r) == key]
        most = self.seeds_of(request, 1 + len(same))
        return self.feed.next_seeds(request, lambda r: training_key(r) == key, most)

    def _workers(self, request: TrialRequest) -> int:
        return self.workers_of(request) if self.workers_of is not None else 1

    def _full(self) -> bool:
        limit = self.sharded_limit
        return limit is not None and len(self.sharded_running) >= limit

    def _next(self) -> TrialRequest | None:
        """A held sharded request once a slot is free, else the feed's next that may start."""
        if self.held and not self._full():
            return self.held.popleft()
        while (request := self.feed.next_request()) is not None:
            if self._workers(request) > 1 and self._full():
                self.held.append(request)
                continue
            return request
        return None

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        """A sharded trial's slot is free. The feed hears of records from the recording
        callback, once each is written."""
        self.sharded_running.discard(trial_id)

    def save(self, checkpoint_path: str) -> None:
        """Nothing: dwtune never restores a Tune run (its records are the state)."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing (see :meth:`save`)."""

    def __getstate__(self) -> dict:
        # Tune pickles its config (tuner.pkl) for Tuner.restore, which dwtune never calls; the
        # feed holds the pairs' generators, which do not pickle.
        return self.__dict__ | {"feed": None, "on_hand_out": None}
