"""Cost of a study (pure): training FLOPs, GPU-hours and wall time.

FLOPs per trial = FLOPs/token x training tokens + a third of that per evaluation token (forward
only). GPU-hours = FLOPs / (peak FLOP/s x MFU) / 3600, MFU being per GPU: a trial sharded
over W GPUs holds all W for its duration, GPU-hours / W. Wall time on ``gpus`` GPUs packing
``per_gpu`` trials each: trials of one batch (the grid, or one refine round) are scheduled
longest first on ``gpus x per_gpu`` slots, where a packed trial runs ``per_gpu`` times slower
(the GPU is shared) and a sharded one starts once W GPUs are free; rounds run one after another.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from dwtune.core.budget import ModelShape, flops_per_token
from dwtune.core.errors import InputError
from dwtune.core.vocabulary import Trainer

# Dense bf16 peak FLOP/s (no sparsity), from the vendors' data sheets, and the memory of one
# GPU as the device reports it (torch.cuda.get_device_properties().total_memory, the figure
# the trainer reads on that GPU), not the marketing size: the plan and the trainer then split
# the same bytes (dwtune.core.memory.usable_gpu_bytes).
MIB = 2**20
DEVICES = {
    # H100 SXM 80GB HBM3: total_memory 81,559 MiB = 85,520,809,984 bytes (79.65 GiB), as
    # nvidia-smi's "81559MiB" and torch's `_CudaDeviceProperties(..., total_memory=81559MB)`
    "h100": (989e12, 81_559 * MIB),
    # H200 SXM: the H100 SXM's tensor cores (989 TFLOP/s dense bf16) with "141 GB" of HBM3e
    # (NVIDIA H200 data sheet, 2024); torch reports `_CudaDeviceProperties(name='NVIDIA H200',
    # ..., total_memory=143156MB)` (139.8 GiB; nvidia-smi shows 143,771 MiB)
    "h200": (989e12, 143_156 * MIB),
    # data-sheet sizes, not yet checked against a device's report
    "a100": (312e12, 80 * 2**30),  # A100 SXM 80 GB
    "l4": (121e12, 24 * 2**30),
}
# Used when no `dwtune bench` result exists for the device: a typical MFU of mid-size
# Transformer training with fused kernels; the paper's narrow shapes may reach less.
ASSUMED_MFU = 0.30
# Training FLOPs with activation checkpointing against without: a step is one forward and a
# backward of twice its cost (3 forward-equivalents); recomputing the forward adds one.
RECOMPUTE_FACTOR = 4 / 3


def device_peak(name: str) -> float:
    key = name.lower()
    if key not in DEVICES:
        raise InputError(f"--device: got {name!r}; expected one of {', '.join(DEVICES)}")
    return DEVICES[key][0]


def device_memory(name: str) -> int:
    """One GPU's memory (bytes) as that device reports it (see ``DEVICES``)."""
    return DEVICES[name.lower()][1]


def trial_flops(
    shape: ModelShape, train_tokens: float, eval_tokens: float, recompute: bool = False
) -> float:
    """FLOPs spent; ``recompute``: activation checkpointing repeats each training forward."""
    per_token = flops_per_token(shape)
    train = per_token * train_tokens * (RECOMPUTE_FACTOR if recompute else 1.0)
    return train + per_token / 3 * eval_tokens


def relative_trial_cost(trainer: str, shape: ModelShape) -> float:
    """A trial's expected training time up to a factor shared by every trial of a spec: its
    FLOPs per token (a spec's trials all train the same tokens); 1 on the simulated backend,
    which spends the same time on every shape."""
    return 1.0 if trainer == Trainer.SIMULATED else flops_per_token(shape)


def gpu_hours(flops: float, peak_flops: float, mfu: float) -> float:
    return flops / (peak_flops * mfu) / 3600


def makespan(
    hours: Sequence[float], gpus: int, per_gpu: int = 1, spans: Sequence[int] | None = None
) -> float:
    """Hours until the last of ``hours`` (GPU-hours each) finishes, longest first; trial i
    spans ``spans[i]`` GPUs (default 1; at most ``gpus``: more could never start)."""
    slots = [0.0] * (gpus * per_gpu)
    widths = spans or [1] * len(hours)
    jobs = sorted(zip(hours, widths, strict=True), reverse=True)
    for gpu_hours_of_trial, span in jobs:
        taken = min(span, len(slots))
        if taken == 1:
            heapq.heapreplace(slots, slots[0] + gpu_hours_of_trial * per_gpu)
            continue
        free = [heapq.heappop(slots) for _ in range(taken)]  # the earliest-free GPUs
        end = free[-1] + gpu_hours_of_trial / taken  # starts when the last of them is free
        for _ in range(taken):
            heapq.heappush(slots, end)
    return max(slots, default=0.0)


@dataclass(frozen=True)
class StageCost:
    stage: str
    trainings: int
    flops: float
    gpu_hours: float
    wall_hours: float
    estimated: bool  # refine: from a simulated run of the refine decision


def stage_cost(
    stage: str,
    rounds: Sequence[Sequence[float]],
    peak_flops: float,
    mfu: float,
    gpus: int,
    per_gpu: int,
    estimated: bool = False,
    spans: Sequence[Sequence[int]] | None = None,
) -> StageCost:
    """Cost of a stage whose trainings (FLOPs each) come in sequential ``rounds``; ``spans``:
    the GPUs each training spans, round by round (default: one each)."""
    flops = [f for batch in rounds for f in batch]
    hours = [[gpu_hours(f, peak_flops, mfu) for f in batch] for batch in rounds]
    widths = spans or [[1] * len(batch) for batch in rounds]
    return StageCost(
        stage=stage,
        trainings=len(flops),
        flops=sum(flops),
        gpu_hours=sum(map(sum, hours)),
        wall_hours=sum(
            makespan(batch, gpus, per_gpu, span) for batch, span in zip(hours, widths, strict=True)
        ),
        estimated=estimated,
    )
