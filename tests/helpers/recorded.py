"""An experiment folder with every trial of the small simulated study recorded, one failed."""

from __future__ import annotations

from dwtune.core import vocabulary
from dwtune.core.records import grid_requests, record_from_result
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore


def _curve(depth: int, seed: int, steps: int = 3) -> list[dict]:
    """Reports as a trainer sends them: train loss every time, validation at some steps."""
    points = []
    for i in range(1, steps + 1):
        point = {
            vocabulary.STEP: 100 * i,
            vocabulary.TOKENS: 12_800 * i,
            vocabulary.TRAIN_LOSS: 3.0 / i + 0.01 * depth + 0.001 * seed,
            vocabulary.LR: 1e-3 / i,
            vocabulary.ELAPSED_S: 0.5 * i,
            vocabulary.TOKENS_PER_S: 25_600.0 + i,
            vocabulary.MFU: 0.01 * i,
        }
        if i % 2 == 1 or i == steps:
            point[vocabulary.VAL_LOSS] = 3.1 / i + 0.01 * depth
        points.append(point)
    return points


def recorded_store(tmp_path, raw: dict) -> ExperimentStore:
    """The folder of ``raw``'s spec with every grid trial recorded; the fourth one failed."""
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    for i, request in enumerate(grid_requests(spec)):
        if i == 3:
            record = record_from_result(
                request,
                spec,
                _curve(request.shape.depth, request.seed)[:1],
                vocabulary.STATUS_FAILED,
                0.7,
                node="n1",
                error="RuntimeError: out of memory",
            )
        else:
            record = record_from_result(
                request,
                spec,
                _curve(request.shape.depth, request.seed),
                vocabulary.STATUS_FINISHED,
                1.5 + i,
                node=f"n{i % 2}",
            )
        store.write_record(record)
    return store
