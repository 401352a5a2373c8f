"""Fused trials in a study: which seeds train together, and one record per seed as alone."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest

from dwtune.backends.trial import run_fused_inprocess, run_trial_inprocess
from dwtune.core import sharding, vocabulary
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.fusion import fused_groups, training_key
from dwtune.study.runners.local import LocalRunner
from tests.helpers.specs import small_simulated

GIB = 2**30


def simulated(**sections):
    return spec_from_dict(small_simulated(**sections))


ALWAYS = {"fuse_seeds": "always"}  # these tests fuse on CPU, which "auto" leaves unfused


def torch_twin(**sections):
    """The small simulated study's shapes on the torch trainer (planning only: never trained)."""
    raw = small_simulated(**{"resources": ALWAYS, **sections})
    raw["resources"] = {**ALWAYS, **raw["resources"]}
    return spec_from_dict({**raw, "trainer": "torch"})


def test_a_cells_seeds_form_one_group_and_cells_stay_apart():
    spec = torch_twin(space={"seeds": 3})
    requests = grid_requests(spec)
    groups = fused_groups(spec, requests, None)
    assert len(groups) == len(spec.first_cells())
    for group in groups:
        assert sorted(r.seed for r in group) == list(spec.space.seeds)
        assert len({(r.cell.depth, r.cell.budget) for r in group}) == 1
    assert sorted(r.trial_id for g in groups for r in g) == sorted(r.trial_id for r in requests)


def test_a_node_too_small_for_every_seed_splits_a_cells_seeds():
    spec = torch_twin(space={"seeds": 3})
    groups = fused_groups(spec, grid_requests(spec), None, placeable=lambda k: k <= 2)
    assert sorted(len(g) for g in groups) == sorted([1, 2] * len(spec.first_cells()))


def test_simulated_trials_stay_one_per_seed():
    spec = simulated(space={"seeds": 3})
    assert {len(g) for g in fused_groups(spec, grid_requests(spec), None)} == {1}


def test_who_asked_does_not_split_a_group():
    spec = torch_twin()
    first, second = grid_requests(spec)[:2]  # one cell, seeds 0 and 1
    second = dataclasses.replace(second, pair="6-12", round=3, point_kind="bisect")
    assert [len(g) for g in fused_groups(spec, [first, second], None)] == [2]


def test_gpu_memory_bounds_the_seeds_a_trial_fuses():
    # k fused seeds hold k halves of a GPU, at most the whole one: 2 halves, or 3-4 seeds on
    # the whole GPU when it holds them
    spec = torch_twin(space={"seeds": 4}, resources={"cpu": 1, "gpu": 0.5})
    shape = spec.first_cells()[-1].shape
    assert sharding.fused_seeds(spec, shape, None, 4) == 4  # memory unknown: no limit
    one = sharding.trial_layout(spec, shape, 80 * GIB).worker_bytes
    usable = 1 - 0.10  # memory.GPU_RESERVE_FRACTION
    assert sharding.fused_seeds(spec, shape, int(2.5 * one / usable), 4) == 2
    assert sharding.fused_seeds(spec, shape, int(3.5 * one / usable), 4) == 3
    assert sharding.fused_seeds(spec, shape, 80 * GIB, 4) == 4


def test_fuse_seeds_chooses_where_seeds_fuse():
    """ "auto" fuses a GPU trial's seeds and leaves a CPU trial's apart; "never" never fuses."""
    auto = {"fuse_seeds": "auto"}
    cpu = torch_twin(space={"seeds": 3}, resources={**auto, "gpu": 0})
    gpu = torch_twin(space={"seeds": 3}, resources={**auto, "gpu": 0.25})
    never = torch_twin(space={"seeds": 3}, resources={"fuse_seeds": "never", "gpu": 0.25})
    shape = cpu.first_cells()[0].shape
    assert sharding.fused_seeds(cpu, shape, None, 3) == 1
    assert sharding.fused_seeds(gpu, shape, 80 * GIB, 3) == 3
    assert sharding.fused_seeds(never, shape, 80 * GIB, 3) == 1
    assert sharding.fused_seeds(torch_twin(space={"seeds": 3}), shape, None, 3) == 3  # always


def test_a_sharded_trial_stays_unfused():
    raw = small_simulated(resources={"cpu": 1, "gpu": 1, "workers_per_trial": 2})
    spec = spec_from_dict({**raw, "trainer": "torch"})
    shape = spec.first_cells()[-1].shape
    assert sharding.fused_seeds(spec, shape, None, 2) == 1  # GPU memory unknown: sharded


def records_alone(spec, requests):
    return {r.trial_id: run_trial_inprocess(spec, r) for r in requests}


TIMINGS = {vocabulary.ELAPSED_S, vocabulary.TOKENS_PER_S, vocabulary.STEP_TIME_S, vocabulary.MFU}


def comparable(record) -> str:
    """The record as JSON (NaN equal to NaN) without what measures time."""
    row = record.to_json()
    for key in ("wall_time_s", "node", "gpu_seconds", "tokens_per_s", "mfu"):
        row.pop(key)
    row["curve"] = [{k: v for k, v in p.items() if k not in TIMINGS} for p in row["curve"]]
    return json.dumps(row, sort_keys=True)


def test_the_simulated_backend_fuses_trivially_with_the_records_alone():
    spec = simulated()
    requests = grid_requests(spec)[:2]  # one cell's two seeds
    fused = run_fused_inprocess(spec, requests)
    alone = records_alone(spec, requests)
    assert [r.trial_id for r in fused] == [r.trial_id for r in requests]
    for record in fused:
        assert comparable(record) == comparable(alone[record.trial_id])


@pytest.fixture(scope="module")
def torch_spec(tmp_path_factory):
    return spec_from_dict(
        {
            "name": "fused_grid",
            "space": {"depths": [1], "budgets": [1e4], "seeds": 2},
            "data": {
                "cache_dir": str(tmp_path_factory.mktemp("cache")),
                "seq_len": 16,
                "vocab_size": 96,
            },
            "model": {"width_multiple": 2},
            "train": {"steps": 30, "batch_size": 4, "eval_every": 10, "eval_batches": 2},
            "resources": ALWAYS,
        }
    )


def test_a_torch_grid_cell_trains_its_seeds_fused_and_records_each(tmp_path, torch_spec):
    store = ExperimentStore.for_spec(tmp_path, torch_spec)
    store.initialise(torch_spec)
    requests = grid_requests(torch_spec)
    assert [len(g) for g in fused_groups(torch_spec, requests, None)] == [2]
    fused = LocalRunner(torch_spec, store).run(requests)
    alone = records_alone(torch_spec, requests)
    for record in fused:
        own = alone[record.trial_id]
        assert (record.seed, record.steps, record.status) == (own.seed, own.steps, own.status)
        assert record.final_val_loss == pytest.approx(own.final_val_loss, rel=1e-4)
        assert [p["step"] for p in record.curve] == [p["step"] for p in own.curve]
        assert store.read_record(record.trial_id) is not None
    assert fused[0].final_val_loss != fused[1].final_val_loss  # two seeds, two trainings
    again = LocalRunner(torch_spec, store)
    again.run(requests)
    assert again.trained == 0  # every seed's identity is recorded: nothing trains twice


# --------------------------------------------------------------------------- through Ray Tune


def ray_spec(root, steps: int = 30, retries: int = 0):
    return spec_from_dict(
        {
            "name": "fused_ray",
            "space": {"depths": [1], "budgets": [1e4], "seeds": 2},
            "data": {"cache_dir": str(root / "cache"), "seq_len": 16, "vocab_size": 96},
            "model": {"width_multiple": 2},
            "train": {"steps": steps, "batch_size": 4, "eval_every": 10, "eval_batches": 2},
            "resources": {"cpu": 1, "retries": retries, **ALWAYS},
        }
    )


def tune_run(spec, store, requests):
    from dwtune.study.runners.ray_tune import TuneRunner

    with TuneRunner(spec, store) as runner:
        fused = runner._fused(requests)
        return fused, runner.run(requests)


@pytest.mark.ray
def test_one_tune_trial_trains_a_cells_seeds_and_records_each(tmp_path):
    spec = ray_spec(tmp_path)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    requests = grid_requests(spec)
    fused, records = tune_run(spec, store, requests)
    assert [[r.trial_id for r in g] for g in fused.values()] == [[r.trial_id for r in requests]]
    alone = records_alone(spec, requests)
    for record in records:
        own = alone[record.trial_id]
        assert (record.seed, record.status, record.steps) == (own.seed, own.status, own.steps)
        assert record.final_val_loss == pytest.approx(own.final_val_loss, rel=1e-4)
        assert [p["step"] for p in record.curve] == [10, 20, 30]
        assert store.read_record(record.trial_id) == record
    assert not (store.root / "train").exists()  # every seed recorded: checkpoints gone


def _kill_when_checkpointed(root, at_step: int, killed: list) -> None:
    """SIGKILL the fused trial's process once its kept checkpoint is at ``at_step`` or later."""
    import os
    import signal
    import time

    from tests.helpers.processes import Processes

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not killed:
        for progress in root.glob("train/*/state-*/dwtune_progress.json"):
            with contextlib.suppress(OSError, ValueError):
                if json.loads(progress.read_text())["step"] >= at_step:
                    for pid in Processes.children_named("ray::ImplicitFunc"):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
        time.sleep(0.05)


@pytest.mark.ray
def test_a_killed_fused_trial_resumes_every_seed(tmp_path):
    import threading

    spec = ray_spec(tmp_path, steps=300, retries=1)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    requests = grid_requests(spec)
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_checkpointed, args=(store.root, 50, killed))
    killer.start()
    _, records = tune_run(spec, store, requests)
    killer.join()
    assert killed, "the trial process was never seen"
    for record in records:
        assert record.status == vocabulary.STATUS_FINISHED
        assert [p["step"] for p in record.curve] == list(range(10, 301, 10))
        assert record.resumed_from_step >= 50  # both seeds continued from the checkpoint


def test_a_feed_hands_one_depths_queued_seeds_out_as_one_fused_trial(tmp_path):
    from dwtune.study.feed import RequestFeed
    from dwtune.study.runners.ray_tune.feed_searcher import FeedSearcher
    from dwtune.study.runners.ray_tune.trial import FUSED_KEY

    spec = torch_twin(space={"seeds": 3})
    requests = grid_requests(spec)  # 4 cells x 3 seeds, a cell's seeds in a row

    def stream():
        yield requests  # one batch, as a refine point's seeds at both depths

    feed = RequestFeed([stream()])
    feed.start(lambda _r: None)
    handed: list[list] = []
    searcher = FeedSearcher(feed, handed.append, seeds_of=lambda _r, n: min(n, 2))
    configs = [searcher.suggest(f"t{i}") for i in range(8)]
    sizes = [len(c.get(FUSED_KEY, [c["request"]])) for c in configs if c]
    assert sizes == [2, 1] * 4  # at most 2 of a cell's 3 seeds per trial
    for config in configs:
        group = config.get(FUSED_KEY) or [config["request"]]
        assert (
            len({training_key(r) for r in group}) == 1 and group[0].trial_id == config["trial_id"]
        )
    assert sorted(r.trial_id for g in handed for r in g) == sorted(r.trial_id for r in requests)


@pytest.mark.ray
def test_a_feeds_seeds_of_one_depth_train_as_one_tune_trial(tmp_path, monkeypatch):
    from dwtune.study.feed import RequestFeed
    from dwtune.study.runners.ray_tune import TuneRunner
    from dwtune.study.runners.ray_tune.feed_searcher import FeedSearcher
    from dwtune.study.runners.ray_tune.trial import FUSED_KEY

    suggested: list[dict] = []
    suggest = FeedSearcher.suggest

    def noting(self, trial_id):
        config = suggest(self, trial_id)
        if isinstance(config, dict):
            suggested.append(config)
        return config

    monkeypatch.setattr(FeedSearcher, "suggest", noting)  # the searcher runs in the driver

    raw = {
        "name": "fused_feed",
        "space": {"depths": [1, 2], "budgets": [1e4], "seeds": 2},
        "data": {"cache_dir": str(tmp_path / "cache"), "seq_len": 16, "vocab_size": 96},
        "model": {"width_multiple": 2},
        "train": {"steps": 20, "batch_size": 4, "eval_every": 10, "eval_batches": 2},
        "resources": {"cpu": 1, "retries": 0, **ALWAYS},
    }
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    requests = grid_requests(spec)  # both depths' two seeds: one point's batch
    got: list = []

    def stream():
        got.extend((yield requests))

    feed = RequestFeed([stream()])
    with TuneRunner(spec, store) as runner:
        runner.run_feed(feed)
    # two Tune trials, one per depth, each carrying both seeds
    assert sorted(len(c[FUSED_KEY]) for c in suggested) == [2, 2]
    alone = records_alone(spec, requests)
    assert [r.trial_id for r in got] == [r.trial_id for r in requests]
    for record in got:
        own = alone[record.trial_id]
        assert (record.status, record.steps) == (own.status, own.steps)
        assert record.final_val_loss == pytest.approx(own.final_val_loss, rel=1e-4)
