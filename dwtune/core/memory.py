"""Per-trial memory estimates (pure) and how many trials share one GPU.

Training memory of one trial, for the model of :mod:`dwtune.backends.pytorch.model`:

- weights, gradients and AdamW's two moments: 4 fp32 copies of the P parameters (16·P bytes);
- activations saved for backward: ``ACTIVATION_WIDTHS`` d-wide tensors per token per layer
  (LayerNorm inputs/outputs, q/k/v, attention output and its reshaped copy, the MLP's 4d
  hidden before and after GELU: 18 d-wide tensors; the fused attention saves no T x T matrix),
  at 4 bytes on CPU (fp32) and 2 under bf16 autocast, plus the embeddings' output;
- logits: ``LOGIT_COPIES`` fp32 (B·T, V) arrays (logits, log-softmax, two gradients) at full
  size, or for one chunk of ``logit_chunk_tokens`` rows when the cross-entropy is chunked.

Calibration: tests/backends/test_memory.py checks the estimate against the peak resident memory
the CPU trainer reaches (rise of the resident-set high-water mark, reset just before the model
is built) for three shapes, within 20%.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dwtune.core.budget import ModelShape, count_params

ACTIVATION_WIDTHS = 18  # d-wide tensors saved per token and layer (see module doc)
LOGIT_COPIES = 4
# The cross-entropy is chunked when the full fp32 logits would exceed this (bytes): the
# chunk then holds this many bytes of logits at most.
LOGITS_CHUNK_BYTES = 256 * 2**20
GPU_RESERVE_FRACTION = 0.10  # CUDA context, allocator fragmentation, compile workspaces


def logit_chunk_tokens(vocab_size: int, tokens: int) -> int | None:
    """Rows of logits per cross-entropy chunk, or None when the full logits are small enough."""
    if tokens * vocab_size * 4 <= LOGITS_CHUNK_BYTES:
        return None
    return max(1, LOGITS_CHUNK_BYTES // (4 * vocab_size))


@dataclass(frozen=True)
class MemoryEstimate:
    weights_and_optimizer: int  # weights, gradients, AdamW moments (bytes)
    activations: int
    logits: int

    @property
    def total(self) -> int:
        return self.weights_and_optimizer + self.activations + self.logits


def trial_memory(shape: ModelShape, batch_size: int, activation_bytes: int = 4) -> MemoryEstimate:
    """Peak training memory of one trial (bytes); ``activation_bytes`` 4 (fp32) or 2 (bf16)."""
    params = count_params(shape).total
    tokens = batch_size * shape.seq_len
    per_layer = ACTIVATION_WIDTHS * shape.width * activation_bytes
    embedding = 2 * shape.width * activation_bytes  # token + position sum, final norm output
    rows = logit_chunk_tokens(shape.vocab_size, tokens) or tokens
    return MemoryEstimate(
        weights_and_optimizer=16 * params,
        activations=tokens * (shape.depth * per_layer + embedding),
        logits=LOGIT_COPIES * 4 * rows * shape.vocab_size,
    )


def trials_per_gpu(estimate_bytes: int, gpu_memory_bytes: int) -> int:
    """How many such trials fit on one GPU next to the reserve (0: not even one)."""
    usable = gpu_memory_bytes * (1 - GPU_RESERVE_FRACTION)
    return math.floor(usable / max(estimate_bytes, 1))


def packing_problem(
    estimate_bytes: int, gpu_fraction: float, gpu_memory_bytes: int, what: str
) -> str | None:
    """The refusal when a trial needs more than its share of a GPU, else None."""
    if gpu_fraction <= 0:
        return None
    share = gpu_memory_bytes * (1 - GPU_RESERVE_FRACTION) * min(gpu_fraction, 1.0)
    if estimate_bytes <= share:
        return None
    fits = trials_per_gpu(estimate_bytes, gpu_memory_bytes)
    fix = f"resources.gpu >= {1 / fits:g}" if fits else "a smaller train.batch_size"
    return (
        f"resources.gpu: got {gpu_fraction:g}; {what} needs about {estimate_bytes / 2**30:.1f} "
        f"GiB but its share of a {gpu_memory_bytes / 2**30:.0f} GiB GPU is "
        f"{share / 2**30:.1f} GiB; use {fix}"
    )


def sharded_memory(
    shape: ModelShape, batch_size: int, workers: int, activation_bytes: int = 4
) -> MemoryEstimate:
    """Peak memory of one worker of a trial sharded over ``workers`` (FSDP2, bytes).

    Each worker keeps 1/workers of the weights, gradients and AdamW moments, plus one block's
    weights and gradients unsharded while that block runs (two with the next one's prefetch:
    4 full fp32 copies of a block), and the activations and logits of its batch/workers rows.
    """
    if workers == 1:
        return trial_memory(shape, batch_size, activation_bytes)
    own = trial_memory(shape, max(1, batch_size // workers), activation_bytes)
    params = count_params(shape)
    gathered = 4 * 4 * params.blocks // max(1, shape.depth)
    return dataclasses.replace(
        own, weights_and_optimizer=math.ceil(16 * params.total / workers) + gathered
    )
