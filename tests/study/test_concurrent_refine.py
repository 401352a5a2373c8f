"""The refine stage with pairs advancing independently takes the decisions of the stage run in
rounds: same trial identities, same transitions, same fit, whatever order trainings end in."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest

from dwtune.core.records import grid_requests
from dwtune.core.spec import load_spec
from dwtune.storage.store import ExperimentStore
from dwtune.study.feed import RequestFeed
from dwtune.study.fit_stage import write_fit
from dwtune.study.refine import RefineStage
from dwtune.study.runners.base import reusable_record
from dwtune.study.runners.local import LocalRunner

SPEC = Path(__file__).resolve().parents[2] / "search_spaces" / "simulated.yaml"
# Three depths, two pairs sharing depth 12 (one training may serve both pairs), fewer rounds.
OVERRIDES = [
    "space.depths=[6, 12, 18]",
    "space.budgets={min: 1e6, max: 1e10, num: 5}",
    "refine.pairs=[[6, 12], [12, 18]]",
    "refine.max_rounds=4",
    "refine.max_seeds=3",
]


class ShuffledSlots:
    """A runner with ``slots`` trainings in flight that finish in a random order: what a
    cluster does to the order records come back in."""

    def __init__(self, runner: LocalRunner, slots: int, seed: int):
        self.runner, self.slots, self.rng = runner, slots, random.Random(seed)
        self.peak = 0

    def run_feed(self, feed: RequestFeed) -> None:
        feed.start(lambda r: reusable_record(self.runner.store, r, set()))
        running = []
        while not feed.done:
            while len(running) < self.slots and (request := feed.next_request()) is not None:
                running.append(request)
            assert running, "the feed is stuck with pairs still refining"
            self.peak = max(self.peak, len(running))
            request = running.pop(self.rng.randrange(len(running)))
            feed.finished(request.trial_id, self.runner._one(request))


def _grid(root: Path):
    spec = load_spec(SPEC, OVERRIDES)
    store = ExperimentStore.for_spec(root, spec)
    store.initialise(spec)
    runner = LocalRunner(spec, store)
    runner.run(grid_requests(spec))
    return spec, store, runner


def _outcome(store: ExperimentStore, stage: RefineStage, transitions) -> dict:
    write_fit(store.root)
    fit = json.loads((store.root / "fit.json").read_text())
    records = store.records()
    return {
        "trials": sorted((r.trial_id, r.stage) for r in records),
        "losses": {r.trial_id: r.final_val_loss for r in records},
        "transitions": [_comparable(dataclasses.asdict(t)) for t in transitions],
        "fit": {k: fit.get(k) for k in ("status", "reason", "a", "b", "se_a", "se_b", "n_points")},
        # what each pair published last (written off the event loop): its final transition
        "journals": [_comparable(r.study.user_attrs) for r in stage.refiners],
        "boards": sorted(str(p.relative_to(store.root)) for p in store.root.glob("tb/refine/*/*")),
    }


def _comparable(row: dict) -> dict:
    return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    spec, store, runner = _grid(tmp_path_factory.mktemp("sequential"))
    stage = RefineStage(spec, store)
    return _outcome(store, stage, stage.run(runner.run))


def test_pairs_advancing_independently_decide_as_rounds_do(sequential, tmp_path):
    spec, store, runner = _grid(tmp_path)
    slots = ShuffledSlots(runner, slots=4, seed=1)
    stage = RefineStage(spec, store)
    transitions = stage.run_on(slots)
    assert slots.peak > 1  # trainings of several pairs were in flight together
    concurrent = _outcome(store, stage, transitions)
    assert concurrent["trials"] == sequential["trials"]
    assert concurrent["losses"] == sequential["losses"]
    assert concurrent["transitions"] == sequential["transitions"]
    assert concurrent["fit"] == sequential["fit"]
    assert concurrent["journals"] == sequential["journals"]
    assert all(attrs["final"] for attrs in concurrent["journals"])
    assert concurrent["boards"] == sequential["boards"] and concurrent["boards"]
    assert all(t["status"] == "bracketed" for t in concurrent["transitions"])
    # and it resumes: a second run of the finished stage trains nothing, decides the same
    again = LocalRunner(spec, store)
    assert RefineStage(spec, store).run_on(again) == transitions
    assert again.trained == 0
