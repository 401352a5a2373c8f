"""Where trials keep their checkpoints and how they run on a cluster (issue 45, Build item 2).

- A trial's checkpoints (a sharded trial's Ray Train run) live under the experiment's
  storage, ``<experiment>/train/<trial_id>``, never in the Tune trial's node-local folder: a
  trial failed or stopped after a checkpoint and started again by a new driver (a new Tune
  run, a new Ray Train job of the same name) resumes from it, and its record says from which
  step (``resumed_from_step``); the folder goes once the trial is recorded as finished.
- Sharded trials run in Tune runs of their own: one-process trials are never capped by them
  (nor in a feed's run), and their cap counts what the autoscaler could add.
- Ray Train's placement: STRICT_PACK where one node holds the whole job, else PACK.
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from collections import deque
from pathlib import Path

import pytest

from dwtune.core import vocabulary
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.progress import StudyProgress
from dwtune.study.runners.ray_tune import TuneRunner, checkpoints
from dwtune.study.runners.ray_tune import runner as runner_module
from dwtune.study.runners.ray_tune.feed_searcher import FeedSearcher
from dwtune.study.runners.ray_tune.resources import autoscaler_capacity, placement_strategy
from tests.helpers.processes import Processes
from tests.helpers.specs import small_simulated

TRIAL_PROCESS = "ray::ImplicitFunc"  # Ray's process title of a Tune function trial
TRAIN_WORKER = "ray::RayTrainWorker"  # and of a Ray Train worker
TRAIN_SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's, once it registered one


# --------------------------------------------------------------------------- pure rules


def _study(tmp_path, raw: dict):
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    return spec, store


def test_a_job_one_node_holds_is_strictly_packed_else_it_spans_nodes():
    one_cpu_nodes = [{"CPU": 1.0}, {"CPU": 1.0}]
    assert placement_strategy(2, 0.5, 0, one_cpu_nodes) == "STRICT_PACK"
    assert placement_strategy(2, 1, 0, one_cpu_nodes) == "PACK"  # the rehearsal's case
    four_gpus = [{"CPU": 32, "GPU": 4}]
    assert placement_strategy(8, 4, 1, four_gpus) == "PACK"
    # a node type the autoscaler can start holds the job: wait for it rather than span nodes
    assert placement_strategy(8, 4, 1, [*four_gpus, {"CPU": 96, "GPU": 8}]) == "STRICT_PACK"
    assert placement_strategy(8, 4, 1, []) == "PACK"


def _torch_raw(tmp_path, **resources) -> dict:
    raw = small_simulated(
        name="sharded",
        trainer="torch",
        data={"seq_len": 16, "vocab_size": 96, "cache_dir": str(tmp_path / "cache")},
        model={"width_multiple": 2},
        space={"depths": [2, 3], "budgets": [2e4, 4e4], "seeds": 1},
        train={"batch_size": 4, "eval_batches": 1, "lr": 3e-3, "steps": 600, "eval_every": 100},
        resources={"cpu": 0.5, "retries": 0, "workers_per_trial": 2, **resources},
    )
    del raw["data"]["tokenizer"]
    return raw


def _runner(tmp_path, **resources) -> TuneRunner:
    spec, store = _study(tmp_path, _torch_raw(tmp_path, **resources))
    return TuneRunner(spec, store)  # Ray starts only on entering it


def test_sharded_trials_run_in_a_batch_of_their_own_and_never_cap_the_plain_ones(
    tmp_path, monkeypatch
):
    runner = _runner(tmp_path)
    requests = grid_requests(runner.spec)[:3]
    workers = {requests[0].trial_id: 2, requests[1].trial_id: 1, requests[2].trial_id: 1}
    monkeypatch.setattr(
        runner, "_workers", lambda todo: {r.trial_id: workers[r.trial_id] for r in todo}
    )
    monkeypatch.setattr(runner_module, "cluster_capacities", lambda: [{"CPU": 1.0}, {}])
    runs = []
    monkeypatch.setattr(
        runner,
        "_tune",
        lambda stage, callback, by_id, run_workers, **kw: runs.append(
            (set(by_id), dict(run_workers), runner._max_concurrent(run_workers))
        ),
    )
    monkeypatch.setattr(runner, "_prepare_corpus", lambda: None)
    runner._fit(vocabulary.Stage.GRID, requests)
    sharded, plain = runs
    assert sharded == ({requests[0].trial_id}, {requests[0].trial_id: 2}, 1)
    assert plain[0] == {requests[1].trial_id, requests[2].trial_id}
    assert plain[2] is None  # the spec sets no limit: Tune fits as many as the nodes hold


def test_the_sharded_cap_counts_the_nodes_the_autoscaler_may_add(tmp_path, monkeypatch):
    runner = _runner(tmp_path, cpu=4, gpu=1)
    gpu_type = {"resources": {"CPU": 96, "GPU": 8}, "max_workers": 4}
    head_type = {"resources": {"CPU": 8}, "max_workers": 0}
    capacity = autoscaler_capacity([gpu_type, head_type])
    assert capacity == {"CPU": 384.0, "GPU": 32.0}
    up_now = {"CPU": 104.0, "GPU": 8.0}  # the head and one GPU node
    monkeypatch.setattr(runner_module, "cluster_capacities", lambda: [up_now, capacity])
    assert runner._sharded_limit(8) == 4  # not 1: what one node offers now
    assert runner._sharded_limit(1) is None


class _Feed:
    """The part of a RequestFeed a searcher uses: a queue handed out in order."""

    def __init__(self, requests):
        self.queued, self.done = deque(requests), False

    def next_request(self):
        return self.queued.popleft() if self.queued else None


def test_a_feeds_plain_requests_go_ahead_of_sharded_ones_past_their_cap(tmp_path):
    runner = _runner(tmp_path)
    s1, s2, p1, p2 = grid_requests(runner.spec)[:4]
    sharded = {s1.trial_id, s2.trial_id}
    searcher = FeedSearcher(
        _Feed([s1, s2, p1, p2]),
        workers_of=lambda r: 2 if r.trial_id in sharded else 1,
        sharded_limit=1,
    )
    handed = [searcher.suggest(f"t{i}") for i in range(4)]
    assert [c and c["trial_id"] for c in handed] == [s1.trial_id, p1.trial_id, p2.trial_id, None]
    searcher.on_trial_complete("t1")  # a plain one: no sharded slot frees
    assert searcher.suggest("t4") is None
    searcher.on_trial_complete("t0")
    assert searcher.suggest("t5")["trial_id"] == s2.trial_id


def test_a_trials_checkpoints_keep_the_latest_whole_and_scratch_drops_a_killed_attempts(
    tmp_path,
):
    trial_dir = checkpoints.train_dir(tmp_path / "exp", "abc")
    trial_dir.mkdir(parents=True)
    (trial_dir / ".staging-000000300-999").mkdir()  # an attempt killed mid-copy
    node = tmp_path / "nvme"
    stale = node / "dwtune-ckpt-abc-r1-x1"
    stale.mkdir(parents=True)
    (node / "dwtune-ckpt-abc-r10-x2").mkdir()  # another rank's: kept
    with checkpoints.scratch(str(node), "abc-r1") as staging:
        assert not stale.exists() and (node / "dwtune-ckpt-abc-r10-x2").exists()
        for step in (100, 200):
            (Path(staging) / "state.json").write_text(str(step))
            curve = [{vocabulary.STEP: s} for s in range(100, step + 1, 100)]
            checkpoints.keep_state(staging, trial_dir, step, curve)
    checkpoints.clear_staging(trial_dir)
    latest = checkpoints.latest_state(trial_dir)
    assert sorted(p.name for p in trial_dir.iterdir()) == [latest.name] == ["state-000000200"]
    assert (latest / "state.json").read_text() == "200"
    assert checkpoints.read_progress(latest) == {"step": 200, "curve": curve}
    assert checkpoints.read_progress(None) is None
    checkpoints.remove_train_dir(tmp_path / "exp", "abc")
    assert not (tmp_path / "exp" / vocabulary.TRAIN_DIR).exists()


# --------------------------------------------------------------------------- on Ray


@pytest.fixture(scope="module")
def ray_up(tmp_path_factory):
    """Ray, started once by an outer runner (the tests' runners find it up)."""
    spec = spec_from_dict(small_simulated(name="outer"))
    store = ExperimentStore.for_spec(tmp_path_factory.mktemp("outer"), spec)
    with TuneRunner(spec, store) as runner:
        yield runner


def _run(spec, store, request):
    out = io.StringIO()
    with TuneRunner(spec, store, progress=StudyProgress(out)) as runner:
        (record,) = runner.run([request])
    return record, out.getvalue()


def _kill_when(ready, process: str, killed: list, done: threading.Event, seen=None) -> None:
    """SIGKILL one process titled ``process`` once ``ready()`` (until ``done``); ``seen`` gets
    what ``ready()`` found then."""
    while not done.is_set() and not killed:
        found = ready()
        if found:
            for pid in Processes.children_named(process)[:1]:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                if seen is not None:
                    seen.extend(found)
        time.sleep(0.05)


def _sharded_study(tmp_path):
    raw = _torch_raw(tmp_path)
    raw["space"] = {"depths": [2], "budgets": [2e4], "seeds": 1}
    raw["train"].update(steps=150, eval_every=50)  # killed at its first checkpoint
    return _study(tmp_path, raw)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.hostile  # a kill test
def test_a_sharded_trial_stopped_after_a_checkpoint_resumes_from_it_in_a_new_tune_run(
    ray_up, tmp_path
):
    spec, store = _sharded_study(tmp_path)
    (request,) = grid_requests(spec)
    train = store.root / vocabulary.TRAIN_DIR / request.trial_id
    killed: list[int] = []
    seen: list = []
    done = threading.Event()
    killer = threading.Thread(
        target=_kill_when,
        args=(lambda: list(train.glob(TRAIN_SNAPSHOT)), TRAIN_WORKER, killed, done, seen),
    )
    killer.start()
    first, _ = _run(spec, store, request)  # no retries: the killed job fails the trial
    done.set()
    killer.join()
    assert killed, "no Ray Train worker was seen"
    assert first.status == vocabulary.STATUS_FAILED
    # the job's run lived under the experiment's storage, not in Tune's trial folder (a
    # node's /tmp on a cluster), and a failed trial keeps it for its retry
    assert seen and (train / TRAIN_SNAPSHOT).is_file()
    assert not list(store.root.glob(f"{vocabulary.RAY_DIR}/*/*/train"))

    # a new runner (as a new driver: a new Tune run, a new Ray Train job of the same name)
    second, log = _run(spec, store, request)
    assert second.status == vocabulary.STATUS_FINISHED, second.error
    assert second.resumed_from_step >= 50, log
    assert store.read_record(request.trial_id).resumed_from_step == second.resumed_from_step
    assert f"resumes from step {second.resumed_from_step}" in log
    # the points the first attempt reported before its checkpoint are kept in the record
    assert [p[vocabulary.STEP] for p in second.curve] == [50, 100, 150]
    assert not (store.root / vocabulary.TRAIN_DIR).exists()  # recorded: its checkpoints go


@pytest.mark.ray
@pytest.mark.hostile  # a kill test
def test_a_trial_stopped_after_a_checkpoint_resumes_from_it_in_a_new_tune_run(ray_up, tmp_path):
    scratch = tmp_path / "node-local" / "scratch"  # made by the trial
    raw = small_simulated(
        space={"depths": [6], "budgets": [1e6], "seeds": 1},
        simulated={"seconds_per_step": 0.01},  # 1 s between reports: time to kill mid-run
        resources={"retries": 0, "scratch_dir": str(scratch)},
    )
    spec, store = _study(tmp_path, raw)
    (request,) = grid_requests(spec)
    train = store.root / vocabulary.TRAIN_DIR / request.trial_id
    killed: list[int] = []
    staged: list = []
    done = threading.Event()

    def ready() -> list:
        staged.extend(scratch.glob("dwtune-ckpt-*"))  # staged on the node, not on storage
        return list(train.glob("state-*/dwtune_progress.json"))

    killer = threading.Thread(target=_kill_when, args=(ready, TRIAL_PROCESS, killed, done))
    killer.start()
    first, _ = _run(spec, store, request)
    done.set()
    killer.join()
    assert killed, "the trial process was never seen"
    assert first.status == vocabulary.STATUS_FAILED
    assert staged and list(train.glob("state-*"))

    second, log = _run(spec, store, request)
    assert second.status == vocabulary.STATUS_FINISHED, second.error
    assert second.resumed_from_step >= 100, log
    assert [p[vocabulary.STEP] for p in second.curve] == [100, 200, 300, 400]
    assert store.read_record(request.trial_id).resumed_from_step == second.resumed_from_step
    assert not (store.root / vocabulary.TRAIN_DIR).exists()
    # the killed attempt's staging (it could not clean up) went as the trial started again
    assert staged and scratch.is_dir() and not list(scratch.iterdir())
