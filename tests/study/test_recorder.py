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
