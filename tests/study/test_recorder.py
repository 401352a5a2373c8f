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
