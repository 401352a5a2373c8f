"""A Tune trial that spans several workers: a Ray Train (V2) data-parallel job inside it.

As Ray documents for Train inside Tune, the Tune trial function builds a ``TorchTrainer`` and
calls ``fit()``; the trial itself holds almost nothing (the runner's ``DRIVER_CPU``), the
job's workers hold ``resources.cpu`` and ``resources.gpu`` each, and Ray Train sets up their
process group (gloo on CPU, NCCL on GPUs). Every worker runs
:func:`~dwtune.backends.pytorch.sharded.train_sharded`; Ray Train's ``TuneReportCallback``
passes rank 0's reports to Tune, where the recorder reads them as it reads a one-process
trial's.

Checkpoints: rank 0 reports the full state (the one-process format) to Ray Train, which keeps
it under ``<trial folder>/train``. A retried trial runs a job of the same name and storage
path, so Ray Train restores its latest checkpoint and every worker resumes from
``ray.train.get_checkpoint()``, as a one-process trial resumes from ``tune.get_checkpoint()``.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import ray.train
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback

from dwtune.core.records import TrialRequest
from dwtune.core.spec import ExperimentSpec

TRAIN_DIR = "train"  # the job's folder inside the Tune trial's folder


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

    def report(values: dict, checkpoint_dir: str | None) -> None:
        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        attempt = {config["attempt_key"]: time.perf_counter() - start}
        ray.train.report({**values, **extra, **attempt}, checkpoint=checkpoint)

    request: TrialRequest = config["request"]
    with tempfile.TemporaryDirectory(prefix="dwtune-ckpt-") as scratch, _resume_dir() as resume:
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
    trial_dir: str,
    extra: dict,
    attempt_key: str,
) -> dict:
    """Train ``request`` as a job of ``workers`` workers; its last metrics (rank 0's)."""
    gpu = spec.resources.gpu > 0
    per_worker = {"CPU": spec.resources.cpu, **({"GPU": spec.resources.gpu} if gpu else {})}
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
            num_workers=workers, use_gpu=gpu, resources_per_worker=per_worker
        ),
        run_config=RunConfig(
            name=TRAIN_DIR,
            storage_path=str(Path(trial_dir)),
            failure_config=FailureConfig(max_failures=0),  # Tune retries the whole trial
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            callbacks=[TuneReportCallback()],
        ),
    )
    result = trainer.fit()
    return dict(result.metrics or {})
