"""One runner contract and one reuse policy; one backend signature."""

from __future__ import annotations

import inspect

import pytest

from dwtune.backends import trial
from dwtune.backends.simulated import simulate_training
from dwtune.core.records import grid_requests, record_from_result
from dwtune.core.spec import spec_from_dict
from dwtune.core.vocabulary import TrialStatus
from dwtune.storage.store import ExperimentStore
from dwtune.study.runners.base import TrialRunner, reusable_record
from dwtune.study.runners.local import LocalRunner
from tests.helpers.specs import small_simulated


def _store(tmp_path):
    spec = spec_from_dict(small_simulated())
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    return spec, store


def test_a_failure_from_an_earlier_driver_is_retried_one_from_this_runner_is_not(tmp_path):
    spec, store = _store(tmp_path)
    request = grid_requests(spec)[0]
    assert reusable_record(store, request, set()) is None  # never trained
    failed = record_from_result(request, spec, [], TrialStatus.FAILED, 0.0, error="lost node")
    store.write_record(failed)
    assert reusable_record(store, request, set()) is None  # an earlier driver's failure
    assert reusable_record(store, request, {request.trial_id}).error == "lost node"
    done = record_from_result(request, spec, [{"val/loss": 2.0}], TrialStatus.FINISHED, 1.0)
    store.write_record(done)
    assert reusable_record(store, request, set()).status == TrialStatus.FINISHED


def test_the_local_runner_keeps_the_contract_and_trains_a_recorded_trial_once(tmp_path):
    spec, store = _store(tmp_path)
    runner = LocalRunner(spec, store)
    assert isinstance(runner, TrialRunner)
    requests = grid_requests(spec)
    first = runner.run(requests)
    assert [r.trial_id for r in first] == [r.trial_id for r in requests]
    assert runner.trained == len(requests)
    again = LocalRunner(spec, store).run(list(reversed(requests)))
    assert [r.trial_id for r in again] == [r.trial_id for r in reversed(requests)]
    assert runner.trained == len(requests) and all(r.completed for r in again)


def test_every_backend_has_the_one_backend_signature():
    protocol = inspect.signature(trial.Backend.__call__)
    expected = list(protocol.parameters)[1:]  # without self
    assert list(inspect.signature(simulate_training).parameters) == expected
    assert list(inspect.signature(trial.run_training).parameters) == expected
    train = pytest.importorskip("dwtune.backends.pytorch.train")
    torch_params = list(inspect.signature(train.train_model).parameters)
    assert torch_params[: len(expected)] == expected  # plus optional keyword-only extras


def test_the_ray_runner_implements_the_runner_contract():
    ray_tune = pytest.importorskip("dwtune.study.runners.ray_tune")
    assert issubclass(ray_tune.TuneRunner, TrialRunner) and issubclass(LocalRunner, TrialRunner)
