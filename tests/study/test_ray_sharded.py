"""A Tune trial sharded over 2 CPU workers (a Ray Train V2 job over gloo inside the trial) is
recorded like any other trial, with the curve the plain one-process trial reaches."""

from __future__ import annotations

import dataclasses
import io
import math

import pytest

from dwtune.backends.trial import run_trial_inprocess
from dwtune.core import vocabulary
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.progress import StudyProgress
from dwtune.study.runners.ray_tune import TuneRunner
from tests.helpers.specs import small_simulated

pytestmark = [pytest.mark.ray, pytest.mark.slow]

RTOL = 1e-4  # float summation order (see tests/backends/test_sharded.py)


def test_a_trial_sharded_over_two_workers_is_recorded_with_the_plain_curve(tmp_path):
    raw = small_simulated(
        name="sharded",
        trainer="torch",
        data={"seq_len": 16, "vocab_size": 96, "cache_dir": str(tmp_path / "cache")},
        model={"width_multiple": 2},
        space={"depths": [2], "budgets": [2e4], "seeds": 1},
        train={"steps": 8, "batch_size": 4, "eval_every": 4, "eval_batches": 1, "lr": 3e-3},
        resources={"cpu": 0.5, "retries": 0, "workers_per_trial": 2},
    )
    del raw["data"]["tokenizer"]
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    (request,) = grid_requests(spec)
    with TuneRunner(spec, store, progress=StudyProgress(io.StringIO())) as runner:
        (record,) = runner.run([request])

    assert record.status == vocabulary.STATUS_FINISHED, record.error
    assert [p[vocabulary.STEP] for p in record.curve] == [4, 8]
    assert store.read_record(request.trial_id).status == vocabulary.STATUS_FINISHED
    # it ran as a Ray Train job: the job's folder sits in the trial's folder, emptied of its
    # checkpoints and restore state once the trial is recorded, as Tune's own are
    trial_dir = store.root / vocabulary.RAY_DIR / "grid-001" / request.name
    assert (trial_dir / "train").is_dir()
    assert [p for p in trial_dir.rglob("*") if p.is_file() and p.stat().st_size] == []

    plain_spec = dataclasses.replace(
        spec, resources=dataclasses.replace(spec.resources, workers_per_trial=1)
    )
    plain = run_trial_inprocess(plain_spec, request)
    for got, want in zip(record.curve, plain.curve, strict=True):
        for key in (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS):
            assert math.isclose(got[key], want[key], rel_tol=RTOL), (key, got, want)
