"""Inside a trial: the function Ray Tune runs in a worker process for each trial.

Kept apart from the driver's modules (:mod:`.recorder`, :mod:`.runner`) and light on imports:
every trial actor's worker process imports this module (Tune pickles :func:`trial_main` by
reference), and in a refine stage of many small batches that import is paid per batch.
"""

from __future__ import annotations

import json
import socket
import time

import ray
from ray import tune

from dwtune.backends.trial import fused_backend_for, run_training
from dwtune.core import vocabulary
from dwtune.core.records import TrialRequest, request_spec
from dwtune.core.spec import ExperimentSpec
from dwtune.study.runners.ray_tune import checkpoints

REQUEST_KEY = "request"  # a trial's TrialRequest in its Tune config, when a feed hands it out
WORKERS_KEY = "workers"  # and the workers that trial spans (sharded_trial), when more than one
FUSED_KEY = "fused"  # and the seeds it trains as one model (a list of requests), when several
# Keys a trial adds to its reports for the driver (not metrics; never in a curve).
NODE_KEY = "dwtune/node"
ATTEMPT_S_KEY = "dwtune/attempt_s"  # seconds since this attempt of the trial started
FINAL_KEY = "dwtune/final"  # set on the trial's last report, which carries the final status
STARTED_KEY = "dwtune/started"  # set on a report sent as an attempt starts (says where it runs)
# A fused trial's report: JSON of {trial_id: the report that seed's trial alone would send}
# (JSON, so Tune passes it on as it is, never flattened)
MEMBERS_KEY = "dwtune/members"
SEED_TRIAL_KEY = "dwtune/trial_id"  # a fused checkpoint's curve point: whose it is
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
    fused: dict[str, list[TrialRequest]] | None = None,
) -> None:
    """The Tune function trainable: train one request, reporting through ``tune.report``.
    The request is the config's ``request`` (a feed's trial), else ``requests``' entry.
    ``workers[trial_id]`` > 1 (or the config's ``workers``, for a feed's trial): the request is
    a Ray Train job of that many workers (:mod:`.sharded_trial`), placed by what ``offers``
    (the nodes and node types) hold. ``fused[trial_id]``: the seeds this trial trains as one
    model (:func:`_fused_main`). Checkpoints live under ``experiment_root`` (absolute, on
    the experiment's storage), where every attempt finds them (:mod:`.checkpoints`)."""
    members = config.get(FUSED_KEY) or (fused or {}).get(config.get("trial_id", ""))
    if members:
        _fused_main(spec, members, experiment_root)
        return
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


def _fused_main(spec: ExperimentSpec, members: list[TrialRequest], experiment_root: str) -> None:
    """Seeds of one training as one fused trial: every report carries, under
    :data:`MEMBERS_KEY`, what each seed's own trial would report (the recorder writes one
    record per seed). Checkpoints live in the first seed's folder; the curve saved with each
    is every seed's, each point tagged with its seed's trial id."""
    lead = members[0]
    spec = request_spec(spec, lead)
    start, node = time.perf_counter(), _node_label()
    ids = {r.seed: r.trial_id for r in members}

    def extra() -> dict:
        return {NODE_KEY: node, ATTEMPT_S_KEY: time.perf_counter() - start}

    def send(reports: dict[str, dict], **flags) -> None:
        tune.report({**extra(), **flags, MEMBERS_KEY: json.dumps(reports, default=float)})

    trial_dir = checkpoints.train_dir(experiment_root, lead.trial_id)
    trial_dir.mkdir(parents=True, exist_ok=True)
    checkpoints.clear_staging(trial_dir)
    resume = checkpoints.latest_state(trial_dir)
    progress = checkpoints.read_progress(resume)
    curves = {
        i: checkpoints.CurveSoFar(_own(progress, i), CURVE_KEYS | RECORD_KEYS) for i in ids.values()
    }
    send(
        {
            i: {**extra(), STARTED_KEY: True, **resumed_report(_own(progress, i))}
            for i in ids.values()
        }
    )

    def report(batch: dict[int, dict], checkpoint_dir: str | None) -> None:
        step = max(curves[ids[seed]].add(values) for seed, values in batch.items())
        if checkpoint_dir:
            tagged = [{**p, SEED_TRIAL_KEY: i} for i, c in curves.items() for p in c.curve()]
            checkpoints.keep_state(checkpoint_dir, trial_dir, step, tagged)
        send({ids[seed]: {**values, **extra()} for seed, values in batch.items()})

    with checkpoints.scratch(spec.resources.scratch_dir, lead.trial_id) as scratch:
        finals = fused_backend_for(spec)(
            spec,
            lead.shape,
            list(ids),
            report,
            checkpoint_dir=scratch,
            resume_from=str(resume) if resume is not None else None,
        )
    send(
        {ids[seed]: {**final, **extra(), FINAL_KEY: True} for seed, final in finals.items()},
        **{FINAL_KEY: True},
    )


def _own(progress: dict | None, trial_id: str) -> dict | None:
    """One seed's part of a fused checkpoint's progress (its step, its tagged points)."""
    if progress is None:
        return None
    points = [
        {k: v for k, v in p.items() if k != SEED_TRIAL_KEY}
        for p in progress["curve"]
        if p.get(SEED_TRIAL_KEY) == trial_id
    ]
    return {"step": progress["step"], "curve": points}


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
