"""How one trial runs (pure): over how many workers, and in how many micro-batches each; the
planner's choice per grid cell, which the runner and the trainer repeat.

With ``resources.workers_per_trial`` = 1 every trial runs in one process, as micro-batches
where its batch does not fit its share of a GPU (:func:`~dwtune.core.memory.micro_batches`).
Above 1:

- on CPU (``resources.gpu`` 0), or on GPUs whose memory the spec does not give
  (``resources.gpu_memory_gb``, or ``dwtune plan --device``), every trial is sharded over all
  of them: the spec asked for it and nothing says a smaller number would do;
- on GPUs of known memory, a trial that fits one GPU (its whole batch, else as micro-batches)
  runs on one; a larger one is sharded over the fewest workers (a divisor of
  workers_per_trial, so the batch still splits evenly) at which one worker's rows fit, in the
  fewest micro-batches (:func:`~dwtune.core.memory.worker_memory`); when even all of them do
  not hold it, all of them (and the plan says it does not fit).

Fewer workers first: a sharded step gathers and reduce-scatters every block's weights, while
micro-batches of one process cost nothing but smaller matmuls, and a study has more trials
than GPUs to keep busy.
"""

from __future__ import annotations

from dataclasses import dataclass

from dwtune.core import memory
from dwtune.core.budget import ModelShape
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import Trainer


def activation_bytes(spec: ExperimentSpec) -> int:
    """2 on a GPU (bf16: autocast in one process, FSDP2's bf16 parameters in a sharded
    worker), 4 in fp32 on CPU."""
    return 2 if spec.resources.gpu > 0 else 4


@dataclass(frozen=True)
class TrialLayout:
    """A trial's ``workers`` (1: one process) and how each splits its rows of the batch."""

    workers: int
    split: memory.MicroBatches

    @property
    def fits(self) -> bool:
        return self.split.fits

    @property
    def worker_bytes(self) -> int:
        """One process's peak (bytes)."""
        return self.split.estimate.total


def share_bytes(spec: ExperimentSpec, gpu_bytes: int | None) -> float | None:
    """What one process of a trial may use of its GPU (bytes); None without GPUs or a known
    GPU memory (no limit)."""
    if spec.resources.gpu <= 0 or gpu_bytes is None:
        return None
    return memory.gpu_share_bytes(gpu_bytes, spec.resources.gpu)


def worker_split(
    spec: ExperimentSpec, shape: ModelShape, workers: int, memory_bytes: float | None
) -> memory.MicroBatches:
    """The micro-batches one of ``workers`` processes runs its batch_size/workers rows in."""
    train = spec.train
    return memory.micro_batches(
        shape,
        train.batch_size // workers,
        activation_bytes(spec),
        memory_bytes,
        train.micro_batch_size,
        train.checkpointing,
        workers,
    )


def trial_layout(spec: ExperimentSpec, shape: ModelShape, gpu_bytes: int | None) -> TrialLayout:
    """Workers and micro-batches of a trial of ``shape`` on GPUs of ``gpu_bytes`` (module doc)."""
    most = spec.resources.workers_per_trial
    limit = share_bytes(spec, gpu_bytes)
    if most == 1 or limit is None:
        return TrialLayout(most, worker_split(spec, shape, most, limit))
    for workers in (n for n in range(1, most + 1) if most % n == 0):
        split = worker_split(spec, shape, workers, limit)
        if split.fits:
            return TrialLayout(workers, split)
    return TrialLayout(most, worker_split(spec, shape, most, limit))


def trial_workers(spec: ExperimentSpec, shape: ModelShape, gpu_bytes: int | None) -> int:
    """Workers a trial of ``shape`` spans (1: a plain one-process trial)."""
    return trial_layout(spec, shape, gpu_bytes).workers


def worker_memory(spec: ExperimentSpec, shape: ModelShape, workers: int) -> int:
    """Peak bytes of one of ``workers`` processes training its rows of the batch in one pass."""
    batch = spec.train.batch_size
    return memory.sharded_memory(shape, batch, workers, activation_bytes(spec)).total


def sharded_concurrency(cluster: dict[str, float], cpu: float, gpu: float, workers: int) -> int:
    """Jobs of ``workers`` workers (``cpu`` CPUs, ``gpu`` GPUs each) the cluster holds at once
    (at least 1: a larger job waits for the autoscaler as a trial does)."""
    fits = cluster.get("CPU", 0) // (workers * cpu)
    if gpu > 0:
        fits = min(fits, cluster.get("GPU", 0) // (workers * gpu))
    return max(1, int(fits))


def fused_seeds(spec: ExperimentSpec, shape: ModelShape, gpu_bytes: int | None, seeds: int) -> int:
    """How many of ``seeds`` seeds of ``shape`` one trial trains as one fused model.

    Rule: a fused trial of k seeds holds k seeds' resources (k·cpu CPUs; k·gpu GPUs, at most
    one: a fused model lives on one device) and trains on them in the passes one seed's trial
    needs. So k is the most seeds (at most ``seeds``) whose fused memory
    (:meth:`~dwtune.core.memory.MemoryEstimate.times`) fits that share of a GPU of
    ``gpu_bytes`` in the same micro-batches and checkpointing as one seed; every seed with the
    GPU memory unknown, or on CPU where ``resources.fuse_seeds`` is "always" (by default a CPU
    trial trains one seed); 1 where a trial is sharded (each worker holds
    a shard of one model) and on the simulated trainer (nothing to share: its trials stay
    one per seed, with their checkpoints). Guarantee: fusing never adds a pass or a
    recomputation.
    """
    one = trial_layout(spec, shape, gpu_bytes)
    if one.workers > 1 or seeds <= 1 or spec.trainer == Trainer.SIMULATED:
        return 1
    gpu = spec.resources.gpu
    if not _fusing(spec.resources.fuse_seeds, gpu):
        return 1
    for k in range(seeds, 1, -1):
        if gpu > 0 and gpu_bytes is not None and not _fused_fits(spec, shape, gpu_bytes, k, one):
            continue
        return k
    return 1


def _fusing(policy: str, gpu: float) -> bool:
    """``resources.fuse_seeds``: "auto" fuses where a trial holds a GPU (on CPU fusing measured
    no faster, benchmarks/README.md "Fused seeds"), "always" everywhere, "never" nowhere."""
    return policy == "always" or (policy == "auto" and gpu > 0)


def _fused_fits(
    spec: ExperimentSpec, shape: ModelShape, gpu_bytes: int, k: int, one: TrialLayout
) -> bool:
    """Whether k fused seeds run in one seed's passes on their share of one GPU."""
    share = memory.gpu_share_bytes(gpu_bytes, min(k * spec.resources.gpu, 1.0))
    train = spec.train
    fused = memory.micro_batches(
        shape,
        train.batch_size,
        activation_bytes(spec),
        share,
        one.split.micro_batch,
        one.split.checkpointing,
        1,
        k,
    )
    return fused.fits
