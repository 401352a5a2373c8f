"""A Tune trial sharded over 2 CPU workers (a Ray Train V2 job over gloo inside the trial) is
recorded like any other trial, with the curve the plain one-process trial reaches."""

from __future__ import annotations

import dataclasses
import io
import math
import os
import signal
import threading
import time

import pytest

from dwtune.backends.trial import run_trial_inprocess
from dwtune.core import vocabulary
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.progress import StudyProgress
from dwtune.study.runners.ray_tune import TuneRunner
from tests.helpers.processes import Processes
from tests.helpers.specs import small_simulated

pytestmark = [pytest.mark.ray, pytest.mark.slow]

RTOL = 1e-4  # float summation order (see tests/backends/test_sharded.py)
TRAIN_WORKER = "ray::RayTrainWorker"  # Ray's process title of a Ray Train worker


@pytest.fixture(scope="module")
def ray_up(tmp_path_factory):
    """Ray, started once by an outer runner (the tests' runners find it up)."""
    spec, store = _study(tmp_path_factory.mktemp("outer"), steps=8, eval_every=4)
    with TuneRunner(spec, store) as runner:
        yield runner


def _study(tmp_path, retries: int = 0, **train):
    raw = small_simulated(
        name="sharded",
        trainer="torch",
        data={"seq_len": 16, "vocab_size": 96, "cache_dir": str(tmp_path / "cache")},
        model={"width_multiple": 2},
        space={"depths": [2], "budgets": [2e4], "seeds": 1},
        train={"batch_size": 4, "eval_batches": 1, "lr": 3e-3, **train},
        resources={"cpu": 0.5, "retries": retries, "workers_per_trial": 2},
    )
    del raw["data"]["tokenizer"]
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    return spec, store


def _run(spec, store, stream=None):
    (request,) = grid_requests(spec)
    with TuneRunner(spec, store, progress=StudyProgress(stream or io.StringIO())) as runner:
        (record,) = runner.run([request])
    return request, record


def test_a_trial_sharded_over_two_workers_is_recorded_with_the_plain_curve(ray_up, tmp_path):
    spec, store = _study(tmp_path, steps=8, eval_every=4)
    request, record = _run(spec, store)

    assert record.status == vocabulary.STATUS_FINISHED, record.error
    assert [p[vocabulary.STEP] for p in record.curve] == [4, 8]
    assert store.read_record(request.trial_id).status == vocabulary.STATUS_FINISHED
    # Tune's run folder and the Ray Train run's (under the experiment's train/, where the job
    # resumes from: tests/study/test_train_storage.py) are removed once the trial is recorded
    assert not (store.root / vocabulary.RAY_DIR).exists()
    assert not (store.root / vocabulary.TRAIN_DIR).exists()
    assert record.resumed_from_step == 0
    assert record.workers == 2  # the record says the trial spanned its two workers

    plain_spec = dataclasses.replace(
        spec, resources=dataclasses.replace(spec.resources, workers_per_trial=1)
    )
    plain = run_trial_inprocess(plain_spec, request)
    for got, want in zip(record.curve, plain.curve, strict=True):
        for key in (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS):
            assert math.isclose(got[key], want[key], rel_tol=RTOL), (key, got, want)


# Ray Train's controller writes this file next to the job's checkpoints once it has
# registered one; the retried job restores the checkpoint it names.
TRAIN_SNAPSHOT = "checkpoint_manager_snapshot.json"


def _kill_a_worker_when_checkpointed(store, killed: list) -> None:
    """SIGKILL one Ray Train worker (as an OOM kill) once the job has registered a
    checkpoint. A checkpoint folder alone is not enough: it appears while the checkpoint is
    uploaded, and a worker killed then left nothing to restore (the retry reported from step
    100 again, once in CI)."""
    deadline = time.monotonic() + 300  # Ray's start-up and the first 100 steps, under load
    while time.monotonic() < deadline and not killed:
        if list((store.root / "train").glob(f"*/{TRAIN_SNAPSHOT}")):
            for pid in Processes.children_named(TRAIN_WORKER)[:1]:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)


@pytest.mark.hostile  # a kill test
def test_a_sharded_trial_whose_worker_dies_is_retried_from_its_checkpoint(ray_up, tmp_path):
    spec, store = _study(tmp_path, retries=1, steps=300, eval_every=100)
    killed: list[int] = []
    killer = threading.Thread(target=_kill_a_worker_when_checkpointed, args=(store, killed))
    killer.start()
    out = io.StringIO()
    _, record = _run(spec, store, stream=out)
    killer.join()
    assert killed, "no Ray Train worker was seen"
    assert record.status == vocabulary.STATUS_FINISHED, record.error
    assert [p[vocabulary.STEP] for p in record.curve] == [100, 200, 300]
    log = out.getvalue()
    assert "attempt 1 failed" in log, log
    resumed_at = int(log.split("attempt 2 reports from step ")[1].split()[0])
    assert resumed_at > 100  # it continued from the job's checkpoint, not from the start
    assert record.resumed_from_step >= 100
