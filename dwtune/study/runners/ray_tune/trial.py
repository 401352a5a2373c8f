"""Inside a trial: the function Ray Tune runs in a worker process for each trial.

Kept apart from the driver's modules (:mod:`.recorder`, :mod:`.runner`) and light on imports:
every trial actor's worker process imports this module (Tune pickles :func:`trial_main` by
reference), and in a refine stage of many small batches that import is paid per batch.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import time
from collections.abc import Iterator

import ray
from ray import tune

from dwtune.backends.trial import run_training
from dwtune.core import vocabulary
from dwtune.core.records import TrialRequest, request_spec
from dwtune.core.spec import ExperimentSpec

REQUEST_KEY = "request"  # a trial's TrialRequest in its Tune config, when a feed hands it out
WORKERS_KEY = "workers"  # and the workers that trial spans (sharded_trial), when more than one
# Keys a trial adds to its reports for the driver (not metrics; never in a curve).
NODE_KEY = "dwtune/node"
ATTEMPT_S_KEY = "dwtune/attempt_s"  # seconds since this attempt of the trial started
FINAL_KEY = "dwtune/final"  # set on the trial's last report, which carries the final status
STARTED_KEY = "dwtune/started"  # set on a report sent as an attempt starts (says where it runs)
# Keys of a report that belong in a trial's curve.
CURVE_KEYS = frozenset(
    {vocabulary.STEP, vocabulary.TOKENS, vocabulary.ELAPSED_S, *vocabulary.CURVE_SCALARS}
)
# Keys of the final report the record keeps besides the curve (record_from_result takes them).
RECORD_KEYS = frozenset({vocabulary.STATUS, vocabulary.VAL_WINDOWS})


def _node_label() -> str:
    """Hostname and Ray node id: several Ray nodes may share one host."""
    node_id = ray.get_runtime_context().get_node_id()
    return f"{socket.gethostname()}/{node_id[:12]}"


@contextlib.contextmanager
def _resume_dir() -> Iterator[str | None]:
    """Directory of the checkpoint this attempt resumes from, if Tune restored one."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as path:
        yield path


def trial_main(
    config: dict,
    *,
    spec: ExperimentSpec,
    requests: dict[str, TrialRequest] | None = None,
    workers: dict[str, int] | None = None,
) -> None:
    """The Tune function trainable: train one request, reporting through ``tune.report``.
    The request is the config's ``request`` (a feed's trial), else ``requests``' entry.
    ``workers[trial_id]`` > 1 (or the config's ``workers``, for a feed's trial): the request is
    a Ray Train job of that many workers (:mod:`.sharded_trial`)."""
    request = config.get(REQUEST_KEY) or (requests or {})[config["trial_id"]]
    spec = request_spec(spec, request)  # the trial's own rate and steps
    start = time.perf_counter()
    node = _node_label()

    def extra() -> dict:
        return {NODE_KEY: node, ATTEMPT_S_KEY: time.perf_counter() - start}

    count = config.get(WORKERS_KEY) or (workers or {}).get(request.trial_id, 1)
    if count > 1:
        _sharded_main(spec, request, count, extra)
        return

    def report(values: dict, checkpoint_dir: str | None) -> None:
        # Tune copies the checkpoint to storage before report returns, so the trainer may
        # overwrite checkpoint_dir afterwards.
        checkpoint = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune.report({**values, **extra()}, checkpoint=checkpoint)

    tune.report({**extra(), STARTED_KEY: True})
    with tempfile.TemporaryDirectory(prefix="dwtune-ckpt-") as scratch, _resume_dir() as resume:
        final = run_training(
            spec, request.shape, request.seed, report, checkpoint_dir=scratch, resume_from=resume
        )
    tune.report({**final, **extra(), FINAL_KEY: True})


def _sharded_main(spec: ExperimentSpec, request: TrialRequest, workers: int, extra) -> None:
    """A trial over ``workers`` workers: its reports come from the job's rank 0, through Ray
    Train's TuneReportCallback; the final one is reported here, as a one-process trial's is."""
    from dwtune.study.runners.ray_tune.sharded_trial import run_sharded_job

    tune.report({**extra(), STARTED_KEY: True})
    trial_dir = tune.get_context().get_trial_dir()
    final = run_sharded_job(
        spec, request, workers, trial_dir, {NODE_KEY: extra()[NODE_KEY]}, ATTEMPT_S_KEY
    )
    tune.report({**final, **extra(), FINAL_KEY: True})
