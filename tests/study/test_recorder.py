"""The driver's recording callback, without Ray running: what a trial's failure leaves."""

from __future__ import annotations

import types

import pytest

from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.runners.ray_tune.recorder import RecordingCallback

pytestmark = pytest.mark.ray  # imports ray (starts nothing)


def _failed_trial(tmp_path, trial_id: str, last_line: str):
    error_file = tmp_path / f"{trial_id}-error.txt"
    error_file.write_text(f"Traceback (most recent call last):\n  ...\n{last_line}\n")
    return types.SimpleNamespace(
        config={"trial_id": trial_id},
        error_file=str(error_file),
        pickled_error_file=None,
        run_metadata=types.SimpleNamespace(pickled_error_filename=None),
    )


@pytest.fixture
def recording(tmp_path, simulated_raw):
    spec = spec_from_dict(simulated_raw())
    store = ExperimentStore.for_spec(tmp_path / "exp", spec)
    store.initialise(spec)
    requests = {r.trial_id: r for r in grid_requests(spec)}
    return RecordingCallback(spec, store, requests, None, tensorboard=False), store


def test_a_trial_failed_by_a_full_disk_is_not_recorded_and_stops_the_run(tmp_path, recording):
    callback, store = recording
    trial_id = next(iter(callback.requests))
    line = "OSError: [Errno 28] No space left on device: '/exp/ray/grid-001/x/checkpoint'"
    trial = _failed_trial(tmp_path, trial_id, line)
    with pytest.raises(InputError, match=r"No space left on device.*free disk space"):
        callback.on_trial_error(0, [], trial)
    assert store.read_record(trial_id) is None  # a rerun after freeing space trains it


def test_a_trial_failed_by_its_own_error_is_recorded_failed(tmp_path, recording):
    callback, store = recording
    trial_id = next(iter(callback.requests))
    callback.on_trial_error(0, [], _failed_trial(tmp_path, trial_id, "ValueError: [Errno 2]"))
    record = store.read_record(trial_id)
    assert record.status == vocabulary.STATUS_FAILED and record.error == "ValueError: [Errno 2]"


def test_only_a_trials_latest_checkpoint_is_kept(tmp_path, recording):
    callback, _ = recording
    trial = types.SimpleNamespace(config={"trial_id": next(iter(callback.requests))})
    paths = [tmp_path / f"checkpoint_{i:06d}" for i in range(3)]
    for path in paths:
        path.mkdir()
        (path / "state.pt").write_text("x")
        callback.on_checkpoint(0, [], trial, types.SimpleNamespace(path=str(path)))
    callback.finish_writes()  # the stale ones are removed off the event loop
    assert [p.exists() for p in paths] == [False, False, True]


def test_a_feeds_trial_is_recorded_at_its_final_report_and_told_once(tmp_path, simulated_raw):
    spec = spec_from_dict(simulated_raw())
    store = ExperimentStore.for_spec(tmp_path / "exp", spec)
    store.initialise(spec)
    requests = {r.trial_id: r for r in grid_requests(spec)}
    told = []
    callback = RecordingCallback(
        spec, store, requests, None, tensorboard=False, on_record=lambda q, r: told.append(r)
    )
    trial_id = next(iter(requests))
    trial = types.SimpleNamespace(config={"trial_id": trial_id})
    point = {vocabulary.STEP: 100, vocabulary.VAL_LOSS: 2.5}
    callback.on_trial_result(0, [], trial, point)
    final = {**point, vocabulary.STATUS: vocabulary.STATUS_FINISHED, "dwtune/final": True}
    callback.on_trial_result(0, [], trial, final)
    assert store.read_record(trial_id) is not None and len(told) == 1
    callback.on_trial_complete(0, [], trial)
    assert len(told) == 1 and told[0].status == vocabulary.STATUS_FINISHED


def test_a_resumed_attempt_is_recorded_with_its_step_and_the_curve_before_it(tmp_path, recording):
    """A new driver's attempt resumes from a checkpoint an earlier one wrote: the record keeps
    the largest step resumed from and the points reported up to it; once recorded finished,
    the trial's checkpoint folder goes. A failed trial keeps its folder for the next retry."""
    callback, store = recording
    resumed_id, failed_id = list(callback.requests)[:2]
    folders = [store.root / vocabulary.TRAIN_DIR / t for t in (resumed_id, failed_id)]
    for folder in folders:
        (folder / "state-000000200").mkdir(parents=True)
    trial = types.SimpleNamespace(config={"trial_id": resumed_id})
    earlier = [{vocabulary.STEP: s, vocabulary.VAL_LOSS: 3.0} for s in (100, 200)]
    started = {"dwtune/started": True, "dwtune/resumed_from_step": 200}
    callback.on_trial_result(0, [], trial, {**started, "dwtune/resumed_curve": earlier})
    for step in (300, 400):
        callback.on_trial_result(0, [], trial, {vocabulary.STEP: step, vocabulary.VAL_LOSS: 2.0})
    final = {vocabulary.STEP: 400, vocabulary.VAL_LOSS: 2.0, "dwtune/final": True}
    callback.on_trial_result(0, [], trial, {**final, vocabulary.STATUS: "finished"})
    callback.on_trial_complete(0, [], trial)
    callback.on_trial_error(0, [], _failed_trial(tmp_path, failed_id, "ValueError: lost"))
    callback.finish_writes()

    record = store.read_record(resumed_id)
    assert record.resumed_from_step == 200
    assert [p[vocabulary.STEP] for p in record.curve] == [100, 200, 300, 400]
    assert store.read_record(failed_id).resumed_from_step == 0
    assert [f.exists() for f in folders] == [False, True]
