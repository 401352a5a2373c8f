"""Per-trial memory estimates (pure) and how many trials share one GPU.

Training memory of one trial, for the model of :mod:`dwtune.backends.pytorch.model`:

- weights, gradients and AdamW's two moments: 4 fp32 copies of the P parameters (16·P bytes),
  plus under bf16 autocast the bf16 copies of the weights autocast caches for the step (2·P);
- activations saved for backward: ``ACTIVATION_WIDTHS`` d-wide tensors per token per layer
  (LayerNorm inputs/outputs, q/k/v, attention output and its reshaped copy, the MLP's 4d
  hidden before and after GELU: 18 d-wide tensors; the fused attention saves no T x T matrix),
  at 4 bytes on CPU (fp32) and 2 under bf16 (autocast, or bf16 parameters), plus the
  embeddings' output;
- logits: ``LOGIT_COPIES`` fp32 (B·T, V) arrays (logits, log-softmax, two gradients) at full
  size, or for one chunk of ``logit_chunk_tokens`` rows when the cross-entropy is chunked;
- with activation checkpointing per block, only each block's input (the residual stream, one
  d-wide tensor per token and layer, counted at fp32) is saved, and one block's activations
  are recomputed at a time in the backward pass.

Micro-batching (:func:`micro_batches`): a trial whose batch does not fit its memory runs as
gradient accumulation over micro-batches of the batch (same optimiser step, same tokens, same
loss up to float rounding). Activations and logits scale with the micro-batch; weights and
optimiser state do not, so a shape whose weights alone exceed the memory fits at no
micro-batch: it needs a trial that spans GPUs.

A worker of a trial sharded over W workers (FSDP2, :func:`worker_memory`) holds:

- its shard of the fp32 master state: weights, gradients and both AdamW moments of P/W
  parameters (16·P/W bytes); nothing else of the whole model. On GPUs FSDP2 runs with a
  mixed-precision policy (bf16 parameters, fp32 reduction) instead of autocast, so no bf16
  copy of the whole model exists; on CPU it runs in fp32;
- FSDP2's unsharded buffers (``gathered``): the parameters of the block that runs and of the
  next one, prefetched (2 blocks at the compute dtype: bf16 on GPUs, fp32 on CPU), plus the
  root's parameters (embeddings, final norm, head), which stay gathered through the step; in
  backward the block's unsharded gradient (compute dtype) and the fp32 reduce-scatter inputs
  of two blocks (one in flight while the next is issued);
- the activations and logits of its micro-batch of its rows, by the rules above.

Checkpoints add nothing on a device (``dwtune.backends.pytorch.sharded`` and ``train``):

- a sharded trial saves with ``torch.distributed.checkpoint``: every rank writes its own
  shards, each tensor shard copied straight from the device to host memory (staged in host
  memory, never on the device; no rank gathers the full state), and loads by reading into
  host memory and copying into the shards it already holds. Host memory staged per worker:
  :func:`checkpoint_host_bytes` (two copies of its largest tensor shard plus the writer's
  copy-ahead window);
- a one-process trial saves with ``torch.save`` (each tensor copied to host memory as it is
  written) and loads with ``map_location="cpu"``: the whole state (weights and both moments,
  12·P bytes) is held in host memory, then copied into the tensors on the device.

Device memory: a GPU's usable memory is what the device reports
(``torch.cuda.get_device_properties().total_memory``), capped by the spec's
``resources.gpu_memory_gb`` (:func:`usable_gpu_bytes`, the one rule of the trainer and the
plan); ``GPU_RESERVE_FRACTION`` of it is left for the CUDA context, the allocator's
fragmentation and compile workspaces.

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
# torch.distributed.checkpoint's FileSystemWriter copies tensors to host memory this many bytes
# ahead of writing them (its per_thread_copy_ahead default)
DCP_COPY_AHEAD_BYTES = 10_000_000
FSDP_REDUCE_BYTES = 4  # FSDP2's reduce-scatter runs in fp32 (MixedPrecisionPolicy reduce_dtype)


def logit_chunk_tokens(vocab_size: int, tokens: int) -> int | None:
    """Rows of logits per cross-entropy chunk, or None when the full logits are small enough."""
    if tokens * vocab_size * 4 <= LOGITS_CHUNK_BYTES:
        return None
    return max(1, LOGITS_CHUNK_BYTES // (4 * vocab_size))


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak device bytes of one process, by term (module doc)."""

    weights_and_optimizer: int  # weights, gradients, AdamW moments (a worker: its shard)
    activations: int
    logits: int
    gathered: int = 0  # FSDP2's unsharded parameters and gradient buffers (a sharded worker)

    @property
    def total(self) -> int:
        return self.weights_and_optimizer + self.activations + self.logits + self.gathered

    def times(self, seeds: int) -> MemoryEstimate:
        """The estimate of ``seeds`` such models fused into one (every term scales: each
        parameter, activation and logit gains a seed axis of that length)."""
        if seeds == 1:
            return self
        return MemoryEstimate(*(seeds * getattr(self, f.name) for f in dataclasses.fields(self)))


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
    seeds: int = 1,
) -> MicroBatches:
    """The split of a ``batch_size`` batch that fits ``memory_bytes`` (None: no limit).

    ``batch_size`` is what one process trains per step: the whole batch, or one worker's rows
    of a trial sharded over ``workers`` (whose memory is :func:`worker_memory`).
    ``micro_batch`` / ``checkpointing`` given: used as they are (the micro-batch at most the
    batch). Else the fewest micro-batches that fit, each as large as the others allow (512
    sequences that fit 200 at a time run as 171 + 171 + 170); checkpointing only when no
    micro-batch fits without it: recomputing the forward costs about a third more FLOPs,
    while smaller micro-batches cost none. When nothing fits, micro-batches of one sequence
    are returned with ``fits`` False. ``seeds`` > 1: the memory of that many fused seeds
    (:meth:`MemoryEstimate.times`; a fused trial is one process).
    """
    options = [checkpointing] if checkpointing is not None else [False, True]
    given = min(micro_batch, batch_size) if micro_batch else None
    for ckpt in options:
        size = given or _largest_fitting(
            shape, batch_size, activation_bytes, memory_bytes, ckpt, workers, seeds
        )
        if not size:
            continue
        size = size if given else _even(batch_size, size)
        estimate = worker_memory(shape, size, workers, activation_bytes, ckpt).times(seeds)
        split = MicroBatches(batch_size, size, ckpt, estimate, memory_bytes)
        if split.fits or ckpt == options[-1]:
            return split
    ckpt = options[-1]
    estimate = worker_memory(shape, 1, workers, activation_bytes, ckpt).times(seeds)
    return MicroBatches(batch_size, 1, ckpt, estimate, memory_bytes)


def _largest_fitting(
    shape: ModelShape,
    batch_size: int,
    activation_bytes: int,
    memory_bytes: float | None,
    checkpointing: bool,
    workers: int,
    seeds: int = 1,
) -> int:
    """The largest micro-batch (<= batch_size) that fits, by bisection; 0 if none."""

    def fits(size: int) -> bool:
        one = worker_memory(shape, size, workers, activation_bytes, checkpointing)
        need = one.times(seeds).total
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
        f"GiB but its share of a {gpu_memory_bytes / 2**30:.1f} GiB GPU is "
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

    A worker keeps 16·P/W bytes of fp32 master state, FSDP2's unsharded buffers
    (:func:`fsdp_buffers`) and the activations and logits of its micro-batch; on GPUs
    (``activation_bytes`` 2) its parameters are gathered in bf16 by FSDP2's mixed-precision
    policy, so it holds no autocast copy of the whole model (module doc).
    """
    own = trial_memory(shape, micro_batch, activation_bytes, checkpointing)
    if workers == 1:
        return own
    sharded_state = math.ceil(16 * count_params(shape).total / workers)
    return dataclasses.replace(
        own,
        weights_and_optimizer=sharded_state,
        gathered=fsdp_buffers(shape, activation_bytes),
    )


def fsdp_buffers(shape: ModelShape, compute_bytes: int) -> int:
    """FSDP2's unsharded buffers at their peak (bytes): the running block's and the prefetched
    next block's parameters and the root's (embeddings, final norm, head) at ``compute_bytes``
    (2: bf16 parameters on GPUs; 4: fp32 on CPU), and in backward one block's unsharded
    gradient (``compute_bytes``) with the fp32 reduce-scatter inputs of two blocks."""
    params = count_params(shape)
    block = params.blocks // max(1, shape.depth)
    root = params.total - params.blocks
    parameters = compute_bytes * (2 * block + root)
    gradients = compute_bytes * block + 2 * FSDP_REDUCE_BYTES * block
    return parameters + gradients


def largest_tensor(shape: ModelShape) -> int:
    """Elements of the model's largest parameter: an MLP matrix, the fused q/k/v matrix or
    the (V, d) embedding / head."""
    d = shape.width
    return max(shape.mlp_hidden * d, 3 * d * d, shape.vocab_size * d, shape.seq_len * d)


def checkpoint_host_bytes(shape: ModelShape, workers: int) -> int:
    """Host memory one process stages for a checkpoint at most (bytes; device memory: none).

    One process (``workers`` 1): its load holds the whole saved state in host memory (fp32
    weights and both AdamW moments, 12·P bytes) before copying it into the device's tensors.
    A sharded worker: torch.distributed.checkpoint copies its shards to host memory a window
    (``DCP_COPY_AHEAD_BYTES``, at least one tensor shard) ahead of writing, and a load reads
    one stored shard and its tensor at a time: two copies of its largest fp32 shard plus the
    window.
    """
    if workers == 1:
        return 12 * count_params(shape).total
    shard = 4 * math.ceil(largest_tensor(shape) / workers)
    return 2 * shard + DCP_COPY_AHEAD_BYTES


def usable_gpu_bytes(reported: float | None, cap_gb: float | None) -> int | None:
    """One GPU's memory (bytes) for the memory model: what the device reports
    (``torch.cuda.get_device_properties().total_memory``, or the plan's table of reported
    figures for ``--device``), capped by the spec's ``resources.gpu_memory_gb``; None when
    neither is known. The trainer and the plan both use this rule."""
    known = [float(reported)] if reported else []
    if cap_gb:
        known.append(cap_gb * 2**30)
    return int(min(known)) if known else None


def sharded_memory(
    shape: ModelShape, batch_size: int, workers: int, activation_bytes: int = 4
) -> MemoryEstimate:
    """Peak memory of one worker of a trial sharded over ``workers`` that trains its
    batch_size/workers rows in one pass (bytes): :func:`worker_memory`."""
    return worker_memory(shape, max(1, batch_size // workers), workers, activation_bytes)
