"""Experiment store: spec compatibility, driver lock, atomic records, corrupt files."""

import errno
import json
import multiprocessing
import os
import signal

import pytest
import yaml

from dwtune.core.errors import InputError
from dwtune.core.records import TrialRecord, grid_requests, record_from_result, trial_identity
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore, atomic_write_text, user_write_error

RAW = {
    "name": "s",
    "trainer": "simulated",
    "space": {"depths": [1, 2], "budgets": [1e5, 1e6], "seeds": 2},
    "train": {"steps": 10},
}


def spec_with(**changes):
    raw = yaml.safe_load(yaml.safe_dump(RAW))
    for section, values in changes.items():
        raw[section].update(values)
    return spec_from_dict(raw)


def test_identity_ignores_stage_budget_and_resources_but_not_training():
    spec = spec_with()
    cell = spec.cell(2, 1e5)
    assert trial_identity(spec, cell.shape, 0) == trial_identity(
        spec_with(space={"budgets": [1e5, 3e6]}), cell.shape, 0
    )
    assert trial_identity(spec, cell.shape, 0) != trial_identity(spec, cell.shape, 1)
    assert trial_identity(spec, cell.shape, 0) != trial_identity(
        spec_with(train={"steps": 11}), cell.shape, 0
    )


def test_grid_requests_cover_every_cell_and_seed_once():
    requests = grid_requests(spec_with())
    assert len(requests) == 2 * 2 * 2
    assert len({r.trial_id for r in requests}) == len(requests)


def test_growing_the_space_is_allowed_but_changing_training_is_refused(tmp_path):
    store = ExperimentStore.for_spec(tmp_path, spec_with())
    store.initialise(spec_with())
    store.initialise(spec_with(space={"depths": [1, 2, 4]}))
    assert store.load_spec().space.depths == (1, 2, 4)
    with pytest.raises(InputError, match=r"different spec \(changed: train.lr\).*new name"):
        store.initialise(spec_with(train={"lr": 1e-4}))


def test_another_split_of_the_batch_reopens_the_experiment(tmp_path):
    """micro_batch_size and activation_checkpointing say how a step is computed, not what is
    trained: a spec stored before they existed (no such keys) or with another split reopens."""
    store = ExperimentStore(tmp_path / "s")
    store.initialise(spec_with())
    stored = yaml.safe_load(store.spec_path.read_text())
    for key in ("micro_batch_size", "activation_checkpointing"):
        del stored["train"][key]
    store.spec_path.write_text(yaml.safe_dump(stored))
    split = {"micro_batch_size": 4, "activation_checkpointing": "true"}
    store.initialise(spec_with(train=split))
    with pytest.raises(InputError, match=r"changed: train.batch_size"):
        store.initialise(spec_with(train={**split, "batch_size": 8}))


def test_unwritable_storage_is_an_input_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="pass a writable --storage"):
        ExperimentStore.for_spec(blocker, spec_with()).initialise(spec_with())


def _hold_lock(root, ready):
    with ExperimentStore(root).driver_lock():
        ready.set()
        signal.pause()


def test_second_driver_refuses_and_a_killed_driver_leaves_no_stale_lock(tmp_path):
    ready = multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold_lock, args=(tmp_path, ready))
    holder.start()
    assert ready.wait(10)
    pattern = f"in use by another dwtune driver \\(pid {holder.pid}"
    with pytest.raises(InputError, match=pattern), ExperimentStore(tmp_path).driver_lock():
        pass
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    with ExperimentStore(tmp_path).driver_lock():
        pass


def test_records_round_trip_and_corrupt_records_are_named(tmp_path):
    spec = spec_with()
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    request = grid_requests(spec)[0]
    curve = [{"val/loss": 3.0, "step": 5}, {"val/loss": 2.5, "step": 10, "status": "finished"}]
    record = record_from_result(request, spec, curve, "finished", 1.5)
    store.write_record(record)
    loaded = store.read_record(request.trial_id)
    assert json.dumps(loaded.to_json()) == json.dumps(record.to_json())  # NaN-aware equality
    assert loaded.best_val_loss == 2.5 and loaded.final_val_loss == 2.5 and loaded.simulated
    assert not list(store.trials_dir.glob("*.tmp"))
    atomic_write_text(store.record_path("deadbeef"), '{"trial_id": "dead')
    with pytest.raises(
        InputError,
        match=r"deadbeef\.json: corrupt trial record \(not valid JSON.*; remove that one file",
    ):
        store.records()
    assert json.loads(store.record_path(request.trial_id).read_text())["trial_id"] == (
        request.trial_id
    )


def test_record_json_round_trip_keeps_nan():
    record = TrialRecord("id", "grid", 1, 8, 2, 1e5, 768, 900, 0, "failed", error="boom")
    assert TrialRecord.from_json(json.loads(json.dumps(record.to_json()))).error == "boom"


def test_records_carry_a_schema_version_and_one_without_it_reads_as_version_1(tmp_path):
    from dwtune.core.records import RECORD_SCHEMA_VERSION

    spec = spec_with()
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    request = grid_requests(spec)[0]
    record = record_from_result(request, spec, [{"val/loss": 2.5, "step": 10}], "finished", 1.5)
    store.write_record(record)
    raw = json.loads(store.record_path(request.trial_id).read_text())
    assert raw["schema_version"] == RECORD_SCHEMA_VERSION == 1
    del raw["schema_version"], raw["dwtune_version"]  # as written before the field existed
    atomic_write_text(store.record_path(request.trial_id), json.dumps(raw))
    assert store.read_record(request.trial_id).best_val_loss == 2.5


def test_a_record_missing_a_field_is_named_without_advice_to_delete_it(tmp_path):
    spec = spec_with()
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    atomic_write_text(store.record_path("cafe"), json.dumps({"trial_id": "cafe", "depth": 1}))
    with pytest.raises(InputError, match=r"cafe\.json: trial record .* lacks budget") as info:
        store.records()
    assert "delete" not in str(info.value)


def test_a_write_failure_is_found_inside_the_exception_that_wrapped_it(tmp_path):
    """Ray Tune wraps a callback's exception in its own, with the original as context."""
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.json"))
    try:
        try:
            raise full
        except OSError:
            raise RuntimeError("Traceback (most recent call last): ...")  # noqa: B904 - as Tune
    except RuntimeError as wrapped:
        found = user_write_error(wrapped, tmp_path)
    assert found is not None
    assert str(found).startswith(f"{tmp_path / 'x.json'}: cannot write it (No space left")
    assert "free disk space" in str(found)
    assert (
        user_write_error(OSError(errno.ENOSPC, "full"), tmp_path)
        .args[0]
        .startswith(f"{tmp_path}: cannot write it")
    )  # no file named: the folder is
    assert user_write_error(RuntimeError("unrelated"), tmp_path) is None
    assert user_write_error(OSError(errno.EIO, "I/O error"), tmp_path) is None
