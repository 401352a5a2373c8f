"""A Tune trial that spans several workers: a Ray Train (V2) data-parallel job inside it.

As Ray documents for Train inside Tune, the Tune trial function builds a ``TorchTrainer`` and
calls ``fit()``; the trial itself holds almost nothing (the runner's ``DRIVER_CPU``), the
job's workers hold ``resources.cpu`` and ``resources.gpu`` each, and Ray Train sets up their
process group (gloo on CPU, NCCL on GPUs). Every worker runs
:func:`~dwtune.backends.pytorch.sharded.train_sharded`; Ray Train's ``TuneReportCallback``
passes rank 0's reports to Tune, where the recorder reads them as it reads a one-process
trial's.

Checkpoints: the job is a Ray Train run on the experiment's storage, ``storage_path=
<experiment>/train`` and ``name=<trial_id>`` (:mod:`.checkpoints`), as Ray documents for a
multi-node run: workers on any node persist their checkpoint files there (every rank that
reports a checkpoint; Ray Train merges them into one checkpoint folder), and any later job of
the same name (the trial retried by Tune, on another node, or started again by a new driver
after the old one was killed) finds Ray Train's snapshot there, restores its latest checkpoint,
and every worker resumes from ``ray.train.get_checkpoint()``. Each worker stages its files in
node-local scratch (``resources.scratch_dir``). Rank 0 adds :data:`~.checkpoints.PROGRESS_FILE`
(the step and the curve so far), and every worker's first report says the step it resumed
from, which rank 0's passes on to the driver.

Placement: ``STRICT_PACK`` where some node (alive, or an autoscaler node type) holds the
whole job, so NCCL stays inside one node; else ``PACK``, spanning nodes
(:func:`~.resources.placement_strategy`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import ray.train
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback

from dwtune.core.records import TrialRequest
from dwtune.core.spec import ExperimentSpec
from dwtune.study.runners.ray_tune import checkpoints
from dwtune.study.runners.ray_tune.trial import (
    CURVE_KEYS,
    RECORD_KEYS,
    STARTED_KEY,
    resumed_report,
)


@contextlib.contextmanager
def _resume_dir() -> Iterator[str | None]:
    """Directory of the checkpoint Ray Train restored for this job, if any."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as path:
        yield path


def _worker_main(config: dict) -> None:
    """One worker of the job: train the request's shard and report through Ray Train."""
    from dwtune.backends.pytorch.sharded import train_sharded

    start = time.perf_counter()
    extra = config["extra"]
    rank = ray.train.get_context().get_world_rank()

    def attempt() -> dict:
        return {config["attempt_key"]: time.perf_counter() - start}

    request: TrialRequest = config["request"]
    scratch_dir = config["spec"].resources.scratch_dir
    owner = f"{request.trial_id}-r{rank}"  # ranks on one node stage apart
    with checkpoints.scratch(scratch_dir, owner) as scratch, _resume_dir() as resume:
        progress = checkpoints.read_progress(resume)
        # every rank reports alike (Ray Train gathers a report from each); rank 0's reaches Tune
        ray.train.report({**extra, **attempt(), STARTED_KEY: True, **resumed_report(progress)})
        curve = checkpoints.CurveSoFar(progress, CURVE_KEYS | RECORD_KEYS)

        def report(values: dict, checkpoint_dir: str | None) -> None:
            step = curve.add(values)
            if checkpoint_dir and rank == 0:
                checkpoints.write_progress(checkpoint_dir, step, curve.curve())
            checkpoint = (
                ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
            )
            ray.train.report({**values, **extra, **attempt()}, checkpoint=checkpoint)

        train_sharded(
            config["spec"],
            request.shape,
            request.seed,
            report,
            checkpoint_dir=scratch,
            resume_from=resume,
        )


def run_sharded_job(
    spec: ExperimentSpec,
    request: TrialRequest,
    workers: int,
    experiment_root: str,
    extra: dict,
    attempt_key: str,
    placement: str = "PACK",
) -> dict:
    """Train ``request`` as a job of ``workers`` workers, its Ray Train run under
    ``experiment_root`` (absolute, shared by every node); its last metrics (rank 0's)."""
    gpu = spec.resources.gpu > 0
    per_worker = {"CPU": spec.resources.cpu, **({"GPU": spec.resources.gpu} if gpu else {})}
    storage = checkpoints.train_dir(experiment_root, request.trial_id)
    trainer = TorchTrainer(
        _worker_main,
        train_loop_config={
            "spec": spec,
            "request": request,
            "extra": extra,
            "attempt_key": attempt_key,
        },
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=workers,
            use_gpu=gpu,
            resources_per_worker=per_worker,
            placement_strategy=placement,
        ),
        run_config=RunConfig(
            name=storage.name,
            storage_path=str(storage.parent),
            failure_config=FailureConfig(max_failures=0),  # Tune retries the whole trial
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            callbacks=[TuneReportCallback()],
        ),
    )
    result = trainer.fit()
    return dict(result.metrics or {})
