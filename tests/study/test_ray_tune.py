"""TuneRunner on a real local Ray instance (one for the whole module).

The module fixture starts Ray through a TuneRunner; every test's own runner finds Ray up and
uses it (and leaves it up), so Ray starts once here.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import threading
import time

import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.records import grid_requests
from dwtune.core.sharding import trial_workers
from dwtune.core.spec import spec_from_dict
from dwtune.outputs import tensorboard
from dwtune.storage.experiment import export_experiment
from dwtune.storage.store import ExperimentStore
from dwtune.study.progress import StudyProgress
from dwtune.study.runners.ray_tune import TuneRunner, actor_reuse
from tests.helpers.processes import Processes

pytestmark = pytest.mark.ray

TRIAL_PROCESS = "ray::ImplicitFunc"  # Ray's process title of a Tune function trial


@pytest.fixture(scope="module")
def ray_up(tmp_path_factory, simulated_raw):
    """Ray, started once by an outer runner and stopped when the module is done."""
    spec = spec_from_dict(simulated_raw(name="outer"))
    store = ExperimentStore.for_spec(tmp_path_factory.mktemp("outer"), spec)
    with TuneRunner(spec, store) as runner:
        yield runner


@pytest.fixture(scope="module")
def trained(ray_up, tmp_path_factory, simulated_raw):
    """The small study trained once through Tune: ``(spec, store, records)``. Tests work on a
    copy of its directory (``_copy``), so none sees another's changes."""
    spec, store = _study(tmp_path_factory.mktemp("trained"), simulated_raw())
    return spec, store, _run(spec, store)


def _copy(store, tmp_path) -> ExperimentStore:
    shutil.copytree(store.root, tmp_path / store.root.name, symlinks=True)
    return ExperimentStore(tmp_path / store.root.name)


def _study(tmp_path, raw: dict):
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    return spec, store


def _run(spec, store, requests=None, stream=None):
    progress = StudyProgress(stream or io.StringIO())
    with TuneRunner(spec, store, progress=progress) as runner:
        return runner.run(grid_requests(spec) if requests is None else requests)


def _snapshot(store) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in store.trials_dir.iterdir()}


def _tune_runs(store) -> list[str]:
    """Tune run folders left in the experiment (a recorded batch leaves none)."""
    ray_dir = store.root / "ray"
    return sorted(p.name for p in ray_dir.iterdir()) if ray_dir.exists() else []


def test_a_small_study_records_every_trial_with_its_curve_events_and_parquet(trained, tmp_path):
    spec, trained_store, records = trained
    store = _copy(trained_store, tmp_path)
    requests = grid_requests(spec)
    assert [r.trial_id for r in records] == [q.trial_id for q in requests]
    assert all(r.status == vocabulary.STATUS_FINISHED and r.simulated for r in records)
    assert all([p[vocabulary.STEP] for p in r.curve] == [100, 200, 300, 400] for r in records)
    assert {r.trial_id for r in store.records()} == {q.trial_id for q in requests}
    # Tune's run folder (checkpoints, restore state Ray's tools cannot use) is removed once
    # the batch is recorded
    assert _tune_runs(store) == [] and not (store.root / "ray").exists()

    for request, record in zip(requests, records, strict=True):
        path = tensorboard.run_dir(store.root, request.name, True, request.stage, request.pair)
        assert path.parent == store.root / "tb" / "grid"  # runs grouped by stage
        events = EventAccumulator(str(path), size_guidance={"scalars": 0})
        events.Reload()
        logged = [(e.step, e.value) for e in events.Scalars(vocabulary.VAL_LOSS)]
        expected = [
            (p[vocabulary.STEP], pytest.approx(p[vocabulary.VAL_LOSS])) for p in record.curve
        ]
        assert logged == expected
        assert f"L{request.shape.depth}_w{request.shape.width}_s{request.seed}" in path.name

    trials_path, curves_path = export_experiment(store)
    trials = pd.read_parquet(trials_path)
    assert sorted(trials.trial_id) == sorted(q.trial_id for q in requests)
    assert len(pd.read_parquet(curves_path)) == 4 * len(requests)


def test_tunes_controller_still_has_what_the_actor_reuse_hook_reads(trained):
    """A Ray whose controller renamed what the hook reads runs as Tune alone would (the
    refine stage's churn of new actors comes back, benchmarks/README.md): caught here."""
    assert actor_reuse.COUNTS["fallback"] == 0
    assert actor_reuse.COUNTS["delegated"] + actor_reuse.COUNTS["kept"] > 0


def test_running_the_same_study_again_trains_nothing(trained, tmp_path):
    spec, trained_store, first = trained
    store = _copy(trained_store, tmp_path)
    before, runs = _snapshot(store), _tune_runs(store)
    out = io.StringIO()
    again = _run(spec, store, stream=out)
    assert [r.to_json() for r in again] == [r.to_json() for r in first]
    assert _snapshot(store) == before and _tune_runs(store) == runs
    assert "8 trial(s) already recorded" in out.getvalue()


def test_adding_a_budget_trains_only_the_new_cells(trained, tmp_path, simulated_raw):
    store = _copy(trained[1], tmp_path)
    before = _snapshot(store)
    grown, store = _study(tmp_path, simulated_raw(space={"budgets": [1e6, 1e7, 3e7]}))
    records = _run(grown, store)
    assert len(records) == 12 and all(r.completed for r in records)
    after = _snapshot(store)
    assert {k: v for k, v in after.items() if k in before} == before
    assert len(after) - len(before) == 4  # the new budget's 2 depths x 2 seeds, no more
    assert _tune_runs(store) == []


def test_repeated_small_batches_each_get_a_fresh_tune_run(ray_up, tmp_path, simulated_raw):
    spec, store = _study(tmp_path, simulated_raw(space={"seeds": 1}))
    requests = grid_requests(spec)
    progress = StudyProgress(io.StringIO())
    with TuneRunner(spec, store, progress=progress) as runner:
        first = runner.run([requests[0]])
        second = runner.run([requests[1], requests[0], requests[1]])
    assert [r.trial_id for r in second] == [requests[i].trial_id for i in (1, 0, 1)]
    assert second[1].to_json() == first[0].to_json()
    assert len(list(store.trials_dir.iterdir())) == 2 and _tune_runs(store) == []


def test_a_batch_asks_each_requests_workers_once(ray_up, tmp_path, simulated_raw, monkeypatch):
    """The trainable, actor reuse and the concurrency limit share one answer per request."""
    from dwtune.study.runners.ray_tune import runner as runner_module

    spec, store = _study(tmp_path, simulated_raw(space={"seeds": 1}))
    requests = grid_requests(spec)[:2]
    asked = []

    def counted(spec, shape, gpu_bytes):
        asked.append(shape)
        return trial_workers(spec, shape, gpu_bytes)

    monkeypatch.setattr(runner_module, "trial_workers", counted)
    records = _run(spec, store, requests)
    assert [r.status for r in records] == [vocabulary.STATUS_FINISHED] * 2
    assert sorted(map(str, asked)) == sorted(str(r.shape) for r in requests)


def _driver_reports(store, name: str) -> int:
    """How many of the trial's reports the driver has taken (scalars in its event file)."""
    path = tensorboard.run_dir(store.root, name, True, vocabulary.Stage.GRID)
    if not path.is_dir():
        return 0
    events = EventAccumulator(str(path), size_guidance={"scalars": 0})
    events.Reload()
    if vocabulary.VAL_LOSS not in events.Tags().get("scalars", []):
        return 0
    return len(events.Scalars(vocabulary.VAL_LOSS))


def _kill_trial_when_checkpointed(store, name: str, killed: list) -> None:
    """SIGKILL the running trial's process (as an OOM kill) once the driver has taken two of
    its reports, each carrying a checkpoint. A checkpoint folder alone is not enough, nor is
    the driver's first report: under load (the CI machine, tests in parallel) Tune had not yet
    registered that checkpoint, and the retry started from step 0. The second report follows
    the first checkpoint's registration."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        checkpointed = list((store.root / "train").glob("*/state-*"))
        if checkpointed and _driver_reports(store, name) >= 2:
            for pid in Processes.children_named(TRIAL_PROCESS):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            if killed:
                return
        time.sleep(0.05)


def test_a_trial_whose_process_dies_is_retried_from_its_checkpoint(ray_up, tmp_path, simulated_raw):
    raw = simulated_raw(
        space={"depths": [6], "budgets": [1e6], "seeds": 1},
        simulated={"seconds_per_step": 0.01},  # 1 s between reports: time to kill mid-run
        resources={"retries": 1},
    )
    spec, store = _study(tmp_path, raw)
    killed: list[int] = []
    (request,) = grid_requests(spec)
    killer = threading.Thread(
        target=_kill_trial_when_checkpointed, args=(store, request.name, killed)
    )
    killer.start()
    out = io.StringIO()
    (record,) = _run(spec, store, stream=out)
    killer.join()
    assert killed, "the trial process was never seen"
    assert record.status == vocabulary.STATUS_FINISHED
    assert [p[vocabulary.STEP] for p in record.curve] == [100, 200, 300, 400]
    log = out.getvalue()
    assert "attempt 1 failed" in log
    resumed_at = int(log.split("attempt 2 reports from step ")[1].split()[0])
    assert resumed_at > 100  # it continued from a checkpoint, not from the start
    assert record.resumed_from_step == store.read_record(record.trial_id).resumed_from_step > 0
    assert not (store.root / "train").exists()  # recorded: its checkpoints are gone


def test_a_failing_trial_is_recorded_with_its_error_and_the_study_completes(ray_up, tmp_path):
    # A real failure: a depth-1 model of 2e14 parameters needs a 200 TB weight matrix, more
    # than a 64-bit process can even address, so torch fails to allocate it on any machine.
    raw = {
        "name": "toolarge",
        "trainer": "torch",
        "data": {"seq_len": 16, "vocab_size": 96, "cache_dir": str(tmp_path / "cache")},
        "model": {"width_multiple": 2},
        "space": {"depths": [1], "budgets": [2e4, 2e14], "seeds": 1},
        "train": {"steps": 4, "batch_size": 2, "eval_every": 2, "eval_batches": 1},
        "resources": {"cpu": 1, "retries": 0},
    }
    spec, store = _study(tmp_path, raw)
    small, huge = _run(spec, store)
    assert small.status == vocabulary.STATUS_FINISHED and small.steps == 4
    assert huge.status == vocabulary.STATUS_FAILED
    assert "can't allocate memory" in huge.error and huge.wall_time_s > 0
    assert store.read_record(huge.trial_id).error == huge.error


def test_a_trial_size_no_node_offers_is_refused_before_anything_runs(
    ray_up, tmp_path, simulated_raw
):
    spec, store = _study(tmp_path, simulated_raw(resources={"gpu": 1}))
    with pytest.raises(InputError, match=r"gpu=1 but no node .* offers that"):
        _run(spec, store)
    assert not (store.root / "ray").exists()
    assert not list(store.trials_dir.iterdir())
