"""A Tune searcher that takes its trials from a :class:`~dwtune.study.feed.RequestFeed`.

One Tune run serves a whole stage whose work is not known up front (the refine stage's pairs
propose their next points as their own points finish): Tune asks :meth:`FeedSearcher.suggest`
whenever it can queue a trial; the searcher hands out the feed's next request, ``None`` while
every pair is waiting for trainings still running, and ``FINISHED`` once every pair is done.
Records reach the feed through the recording callback (after each record is written), never
through ``on_trial_complete``, which Tune calls before its callbacks.
"""

from __future__ import annotations

from ray.tune.search import Searcher

from dwtune.study.feed import RequestFeed
from dwtune.study.runners.ray_tune.trial import REQUEST_KEY, WORKERS_KEY


class FeedSearcher(Searcher):
    def __init__(self, feed: RequestFeed, on_hand_out=None, workers_of=None):
        super().__init__(metric=None, mode=None)
        self.feed, self.on_hand_out = feed, on_hand_out
        self.workers_of = workers_of  # request -> the workers its trial spans (sharding)

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        if self.feed.done:
            return Searcher.FINISHED
        request = self.feed.next_request()
        if request is None:
            return None
        if self.on_hand_out is not None:
            self.on_hand_out(request)
        workers = self.workers_of(request) if self.workers_of is not None else 1
        return {"trial_id": request.trial_id, REQUEST_KEY: request, WORKERS_KEY: workers}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        """Nothing: the recording callback tells the feed, once the record is written."""

    def save(self, checkpoint_path: str) -> None:
        """Nothing: dwtune never restores a Tune run (its records are the state)."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing (see :meth:`save`)."""

    def __getstate__(self) -> dict:
        # Tune pickles its config (tuner.pkl) for Tuner.restore, which dwtune never calls; the
        # feed holds the pairs' generators, which do not pickle.
        return self.__dict__ | {"feed": None, "on_hand_out": None}
