"""Per-trial memory estimates (pure) and how many trials share one GPU.

Training memory of one trial, for the model of :mod:`dwtune.backends.pytorch.model`:

- weights, gradients and AdamW's two moments: 4 fp32 copies of the P parameters (16·P bytes),
  plus under bf16 autocast the bf16 copies of the weights autocast caches for the step (2·P);
- activations saved for backward: ``ACTIVATION_WIDTHS`` d-wide tensors per token per layer
  (LayerNorm inputs/outputs, q/k/v, attention output and its reshaped copy, the MLP's 4d
  hidden before and after GELU: 18 d-wide tensors; the fused attention saves no T x T matrix),
  at 4 bytes on CPU (fp32) and 2 under bf16 autocast, plus the embeddings' output;
- logits: ``LOGIT_COPIES`` fp32 (B·T, V) arrays (logits, log-softmax, two gradients) at full
  size, or for one chunk of ``logit_chunk_tokens`` rows when the cross-entropy is chunked;
- with activation checkpointing per block, only each block's input (the fp32 residual stream,
  one d-wide tensor per token and layer) is saved, and one block's activations are recomputed
  at a time in the backward pass.

Micro-batching (:func:`micro_batches`): a trial whose batch does not fit its memory runs as
gradient accumulation over micro-batches of the batch (same optimiser step, same tokens, same
loss up to float rounding). Activations and logits scale with the micro-batch; weights and
optimiser state do not, so a shape whose weights alone exceed the memory fits at no
micro-batch: it needs a trial that spans GPUs. A worker of such a trial (:func:`worker_memory`)
holds its share of the weights and optimiser state and splits its rows of the batch into
micro-batches by the same rule.

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
RESIDUAL_BYTES = 4  # the residual stream (a checkpointed block's input) stays fp32 under autocast


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


def trial_memory(
    shape: ModelShape, batch_size: int, activation_bytes: int = 4, checkpointing: bool = False
) -> MemoryEstimate:
    """Peak training memory of one trial (bytes) whose forward/backward sees ``batch_size``
    sequences at once; ``activation_bytes`` 4 (fp32) or 2 (bf16 autocast on a GPU)."""
    params = count_params(shape).total
    tokens = batch_size * shape.seq_len
    per_layer = ACTIVATION_WIDTHS * shape.width * activation_bytes
    embedding = 2 * shape.width * activation_bytes  # token + position sum, final norm output
    if checkpointing:  # saved block inputs, plus one block's activations during its recompute
        saved = shape.depth * shape.width * RESIDUAL_BYTES + per_layer
    else:
        saved = shape.depth * per_layer
    rows = logit_chunk_tokens(shape.vocab_size, tokens) or tokens
    bf16_weights = 2 * params if activation_bytes == 2 else 0
    return MemoryEstimate(
        weights_and_optimizer=16 * params + bf16_weights,
        activations=tokens * (saved + embedding),
        logits=LOGIT_COPIES * 4 * rows * shape.vocab_size,
    )


@dataclass(frozen=True)
class MicroBatches:
    """How one trial's batch is split: ``accumulation`` forward/backward passes of at most
    ``micro_batch`` sequences per optimiser step (the last may be smaller)."""

    batch_size: int
    micro_batch: int
    checkpointing: bool
    estimate: MemoryEstimate  # the peak at ``micro_batch`` sequences
    memory_bytes: float | None  # what the trial may use; None: unknown (no limit)

    @property
    def accumulation(self) -> int:
        return -(-self.batch_size // self.micro_batch)

    @property
    def fits(self) -> bool:
        return self.memory_bytes is None or self.estimate.total <= self.memory_bytes

    def sizes(self) -> list[int]:
        """Sequences in each micro-batch of one step, e.g. 10 in 3s: [3, 3, 3, 1]."""
        full, rest = divmod(self.batch_size, self.micro_batch)
        return [self.micro_batch] * full + ([rest] if rest else [])

    def label(self) -> str:
        """``512``, ``64x8`` (micro-batch x accumulation), ``+ckpt`` with checkpointing."""
        split = (
            f"{self.micro_batch}x{self.accumulation}"
            if self.accumulation > 1
            else str(self.micro_batch)
        )
        return split + ("+ckpt" if self.checkpointing else "")


def micro_batches(
    shape: ModelShape,
    batch_size: int,
    activation_bytes: int,
    memory_bytes: float | None,
    micro_batch: int | None = None,
    checkpointing: bool | None = None,
    workers: int = 1,
) -> MicroBatches:
    """The split of a ``batch_size`` batch that fits ``memory_bytes`` (None: no limit).

    ``batch_size`` is what one process trains per step: the whole batch, or one worker's rows
    of a trial sharded over ``workers`` (whose memory is :func:`worker_memory`).
    ``micro_batch`` / ``checkpointing`` given: used as they are (the micro-batch at most the
    batch). Else the fewest micro-batches that fit, each as large as the others allow (512
    sequences that fit 200 at a time run as 171 + 171 + 170); checkpointing only when no
    micro-batch fits without it: recomputing the forward costs about a third more FLOPs,
    while smaller micro-batches cost none. When nothing fits, micro-batches of one sequence
    are returned with ``fits`` False.
    """
    options = [checkpointing] if checkpointing is not None else [False, True]
    given = min(micro_batch, batch_size) if micro_batch else None
    for ckpt in options:
        size = given or _largest_fitting(
            shape, batch_size, activation_bytes, memory_bytes, ckpt, workers
        )
        if not size:
            continue
        size = size if given else _even(batch_size, size)
        estimate = worker_memory(shape, size, workers, activation_bytes, ckpt)
        split = MicroBatches(batch_size, size, ckpt, estimate, memory_bytes)
        if split.fits or ckpt == options[-1]:
            return split
    ckpt = options[-1]
    estimate = worker_memory(shape, 1, workers, activation_bytes, ckpt)
    return MicroBatches(batch_size, 1, ckpt, estimate, memory_bytes)


def _largest_fitting(
    shape: ModelShape,
    batch_size: int,
    activation_bytes: int,
    memory_bytes: float | None,
    checkpointing: bool,
    workers: int,
) -> int:
    """The largest micro-batch (<= batch_size) that fits, by bisection; 0 if none."""

    def fits(size: int) -> bool:
        need = worker_memory(shape, size, workers, activation_bytes, checkpointing).total
        return memory_bytes is None or need <= memory_bytes

    low, high = 0, batch_size  # fits(low) (or low == 0), and nothing above high is asked
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _even(batch_size: int, largest: int) -> int:
    """The smallest micro-batch that needs no more passes than ``largest`` does."""
    count = -(-batch_size // largest)
    return -(-batch_size // count)


def gpu_share_bytes(gpu_memory_bytes: float, gpu_fraction: float) -> float:
    """What one trial may use of a GPU it shares with ``1 / gpu_fraction`` trials (bytes)."""
    return gpu_memory_bytes * (1 - GPU_RESERVE_FRACTION) * min(max(gpu_fraction, 0.0), 1.0)


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
    # micro-batching has already shrunk the batch: only a bigger share, or more than one
    # GPU per trial, can help
    fix = (
        f"resources.gpu >= {1 / fits:g}"
        if fits
        else "smaller space.budgets, or a trial that spans several GPUs"
    )
    return (
        f"resources.gpu: got {gpu_fraction:g}; {what} needs about {estimate_bytes / 2**30:.1f} "
        f"GiB but its share of a {gpu_memory_bytes / 2**30:.0f} GiB GPU is "
        f"{share / 2**30:.1f} GiB; use {fix}"
    )


def worker_memory(
    shape: ModelShape,
    micro_batch: int,
    workers: int,
    activation_bytes: int = 4,
    checkpointing: bool = False,
) -> MemoryEstimate:
    """Peak memory of one process of a trial spread over ``workers`` (FSDP2; 1: a plain
    trial, :func:`trial_memory`) that runs ``micro_batch`` sequences per pass (bytes).

    Each worker keeps 1/workers of the weights, gradients and AdamW moments, plus one block's
    weights and gradients unsharded while that block runs (two with the next one's prefetch:
    4 full fp32 copies of a block), and the activations and logits of its micro-batch. Under
    bf16 autocast every gathered block's weights are cast to bf16 and the casts are kept for
    the backward pass (autocast caches them; the matmuls save them), so a worker holds the
    bf16 copy of the whole model (2·P) at the end of its forward, as a one-process trial does.
    """
    own = trial_memory(shape, micro_batch, activation_bytes, checkpointing)
    if workers == 1:
        return own
    params = count_params(shape)
    gathered = 4 * 4 * params.blocks // max(1, shape.depth)
    bf16_weights = 2 * params.total if activation_bytes == 2 else 0
    sharded_state = math.ceil(16 * params.total / workers)
    return dataclasses.replace(own, weights_and_optimizer=sharded_state + gathered + bf16_weights)


def sharded_memory(
    shape: ModelShape, batch_size: int, workers: int, activation_bytes: int = 4
) -> MemoryEstimate:
    """Peak memory of one worker of a trial sharded over ``workers`` that trains its
    batch_size/workers rows in one pass (bytes): :func:`worker_memory`."""
    return worker_memory(shape, max(1, batch_size // workers), workers, activation_bytes)
