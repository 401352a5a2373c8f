"""How many workers one trial spans (pure): the planner's choice per grid cell.

With ``resources.workers_per_trial`` = 1 every trial runs in one process. Above 1:

- on CPU (``resources.gpu`` 0), or on GPUs whose memory the spec does not give
  (``resources.gpu_memory_gb``, or ``dwtune plan --device``), every trial is sharded over all
  of them: the spec asked for it and nothing says a smaller number would do;
- on GPUs of known memory, a trial that fits one GPU runs on one; a larger one is sharded over
  the fewest workers (a divisor of workers_per_trial, so the batch still splits evenly) whose
  per-worker memory (:func:`~dwtune.core.memory.sharded_memory`) fits a GPU; when even all of
  them do not hold it, all of them (and the plan says it does not fit).
"""

from __future__ import annotations

from dwtune.core import memory
from dwtune.core.budget import ModelShape
from dwtune.core.spec import ExperimentSpec


def activation_bytes(spec: ExperimentSpec) -> int:
    """2 under bf16 autocast on a GPU, 4 in fp32 on CPU."""
    return 2 if spec.resources.gpu > 0 else 4


def worker_memory(spec: ExperimentSpec, shape: ModelShape, workers: int) -> int:
    """Peak bytes of one worker of a trial of ``shape`` spread over ``workers``."""
    batch = spec.train.batch_size
    return memory.sharded_memory(shape, batch, workers, activation_bytes(spec)).total


def trial_workers(spec: ExperimentSpec, shape: ModelShape, gpu_bytes: int | None) -> int:
    """Workers a trial of ``shape`` spans (1: a plain one-process trial)."""
    most = spec.resources.workers_per_trial
    if most == 1:
        return 1
    if spec.resources.gpu <= 0 or gpu_bytes is None:
        return most
    usable = gpu_bytes * (1 - memory.GPU_RESERVE_FRACTION)
    for workers in (n for n in range(1, most + 1) if most % n == 0):
        if worker_memory(spec, shape, workers) <= usable:
            return workers
    return most


def sharded_concurrency(cluster: dict[str, float], cpu: float, gpu: float, workers: int) -> int:
    """Jobs of ``workers`` workers (``cpu`` CPUs, ``gpu`` GPUs each) the cluster holds at once
    (at least 1: a larger job waits for the autoscaler as a trial does)."""
    fits = cluster.get("CPU", 0) // (workers * cpu)
    if gpu > 0:
        fits = min(fits, cluster.get("GPU", 0) // (workers * gpu))
    return max(1, int(fits))
