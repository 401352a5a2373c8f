"""What ``dwtune bench`` measures on the torch side: the trainer's real step on random batches."""

from __future__ import annotations

import itertools

import torch

from dwtune.backends.pytorch.fused import build_fused_training
from dwtune.backends.pytorch.perf import (
    attention_backend,
    device_name,
    reset_peak_memory,
    time_steps,
)
from dwtune.backends.pytorch.train import build_training
from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.spec import TrainConfig

RANDOM_BATCHES = 4  # distinct random batches cycled through the timed steps


def time_random_batches(
    shape: ModelShape,
    runtime,
    *,
    seed: int,
    steps: int,
    warmup: int,
    batch_size: int,
    seeds: int = 1,
):
    """Time the trainer's step on random token batches; out of memory is a bad batch size.
    ``seeds`` > 1: the step of that many fused seeds (seed, seed + 1, ...), each its own
    batch_size rows."""

    generator = torch.Generator().manual_seed(seed)
    size = (batch_size, shape.seq_len + 1) if seeds == 1 else (seeds, batch_size, shape.seq_len + 1)
    batches = [
        torch.randint(0, shape.vocab_size, size, generator=generator).to(runtime.device)
        for _ in range(RANDOM_BATCHES)
    ]
    reset_peak_memory(runtime.device)
    cfg = TrainConfig(steps=steps + warmup, batch_size=batch_size)
    if seeds == 1:
        step = build_training(shape, cfg, runtime, seed)
    else:
        step = build_fused_training(shape, cfg, runtime, range(seed, seed + seeds))
    counter = itertools.count()

    def one_step() -> None:
        tokens = batches[next(counter) % RANDOM_BATCHES]
        step(tokens[..., :-1], tokens[..., 1:])

    try:
        return time_steps(one_step, steps, warmup, runtime.device)
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        raise InputError(
            f"out of memory at batch size {batch_size} for depth {shape.depth} x width "
            f"{shape.width} on {device_name(runtime.device)}; lower --batch-size"
        ) from None


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or the CPU allocator's RuntimeError."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def attention_backend_of(shape: ModelShape, runtime) -> tuple[str, str]:
    """The SDPA kernel the trainer's precision (bf16 on CUDA, fp32 elsewhere) selects, and why."""
    dtype = torch.bfloat16 if runtime.cuda else torch.float32
    return attention_backend(shape, runtime.device, dtype)
