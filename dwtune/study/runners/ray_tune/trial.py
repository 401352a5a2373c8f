"""Inside a trial: the function Ray Tune runs in a worker process for each trial.

Kept apart from the driver's modules (:mod:`.recorder`, :mod:`.runner`) and light on imports:
every trial actor's worker process imports this module (Tune pickles :func:`trial_main` by
reference), and in a refine stage of many small batches that import is paid per batch.
"""

from __future__ import annotations

import socket
import time

import ray
from ray import tune

from dwtune.backends.trial import run_training
from dwtune.core import vocabulary
from dwtune.core.records import TrialRequest, request_spec
from dwtune.core.spec import ExperimentSpec
from dwtune.study.runners.ray_tune import checkpoints

REQUEST_KEY = "request"  # a trial's TrialRequest in its Tune config, when a feed hands it out
WORKERS_KEY = "workers"  # and the workers that trial spans (sharded_trial), when more than one
# Keys a trial adds to its reports for the driver (not metrics; never in a curve).
NODE_KEY = "dwtune/node"
ATTEMPT_S_KEY = "dwtune/attempt_s"  # seconds since this attempt of the trial started
FINAL_KEY = "dwtune/final"  # set on the trial's last report, which carries the final status
STARTED_KEY = "dwtune/started"  # set on a report sent as an attempt starts (says where it runs)
# On an attempt's started report: the step of the checkpoint it resumes from (0: none) and the
# curve reported up to that checkpoint (an earlier driver's points, which this one never saw).
RESUMED_KEY = "dwtune/resumed_from_step"
RESUMED_CURVE_KEY = "dwtune/resumed_curve"
# Keys of a report that belong in a trial's curve.
CURVE_KEYS = frozenset(
    {vocabulary.STEP, vocabulary.TOKENS, vocabulary.ELAPSED_S, *vocabulary.CURVE_SCALARS}
)
# Keys of the final report the record keeps besides the curve (record_from_result takes them).
# WORKERS and GPUS: how many processes and GPUs the training spanned (a sharded trial's W).
RECORD_KEYS = frozenset(
    {vocabulary.STATUS, vocabulary.VAL_WINDOWS, vocabulary.WORKERS, vocabulary.GPUS}
)


def _node_label() -> str:
    """Hostname and Ray node id: several Ray nodes may share one host."""
    node_id = ray.get_runtime_context().get_node_id()
    return f"{socket.gethostname()}/{node_id[:12]}"


def resumed_report(progress: dict | None) -> dict:
    """What a starting attempt tells the driver about the checkpoint it resumes from."""
    if progress is None:
        return {RESUMED_KEY: 0}
    return {RESUMED_KEY: progress["step"], RESUMED_CURVE_KEY: progress["curve"]}


def trial_main(
    config: dict,
    *,
    spec: ExperimentSpec,
    experiment_root: str,
    requests: dict[str, TrialRequest] | None = None,
    workers: dict[str, int] | None = None,
    offers: list[dict] | None = None,
) -> None:
    """The Tune function trainable: train one request, reporting through ``tune.report``.
    The request is the config's ``request`` (a feed's trial), else ``requests``' entry.
    ``workers[trial_id]`` > 1 (or the config's ``workers``, for a feed's trial): the request is
    a Ray Train job of that many workers (:mod:`.sharded_trial`), placed by what ``offers``
    (the nodes and node types) hold. Checkpoints live under ``experiment_root`` (absolute, on
    the experiment's storage), where every attempt finds them (:mod:`.checkpoints`)."""
    request = config.get(REQUEST_KEY) or (requests or {})[config["trial_id"]]
    spec = request_spec(spec, request)  # the trial's own rate and steps
    start = time.perf_counter()
    node = _node_label()

    def extra() -> dict:
        return {NODE_KEY: node, ATTEMPT_S_KEY: time.perf_counter() - start}

    count = config.get(WORKERS_KEY) or (workers or {}).get(request.trial_id, 1)
    if count > 1:
        _sharded_main(spec, request, count, extra, experiment_root, offers or [])
        return

    trial_dir = checkpoints.train_dir(experiment_root, request.trial_id)
    trial_dir.mkdir(parents=True, exist_ok=True)
    checkpoints.clear_staging(trial_dir)
    resume = checkpoints.latest_state(trial_dir)
    progress = checkpoints.read_progress(resume)
    tune.report({**extra(), STARTED_KEY: True, **resumed_report(progress)})
    curve = checkpoints.CurveSoFar(progress, CURVE_KEYS | RECORD_KEYS)

    def report(values: dict, checkpoint_dir: str | None) -> None:
        step = curve.add(values)
        if checkpoint_dir:  # on the experiment's storage before the driver hears of it
            checkpoints.keep_state(checkpoint_dir, trial_dir, step, curve.curve())
        tune.report({**values, **extra()})

    with checkpoints.scratch(spec.resources.scratch_dir, request.trial_id) as scratch:
        final = run_training(
            spec,
            request.shape,
            request.seed,
            report,
            checkpoint_dir=scratch,
            resume_from=str(resume) if resume is not None else None,
        )
    tune.report({**final, **extra(), FINAL_KEY: True})


def _sharded_main(
    spec: ExperimentSpec,
    request: TrialRequest,
    workers: int,
    extra,
    experiment_root: str,
    offers: list[dict],
) -> None:
    """A trial over ``workers`` workers: its reports come from the job's rank 0, through Ray
    Train's TuneReportCallback (the first says where it resumed from); the final one is
    reported here, as a one-process trial's is."""
    from dwtune.study.runners.ray_tune.resources import placement_strategy
    from dwtune.study.runners.ray_tune.sharded_trial import run_sharded_job

    tune.report({**extra(), STARTED_KEY: True})
    resources = spec.resources
    final = run_sharded_job(
        spec,
        request,
        workers,
        experiment_root,
        {NODE_KEY: extra()[NODE_KEY]},
        ATTEMPT_S_KEY,
        placement_strategy(workers, resources.cpu, resources.gpu, offers),
    )
    tune.report({**final, **extra(), FINAL_KEY: True})
