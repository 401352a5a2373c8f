"""Chunked cross-entropy: the language-model loss without the full (B·T, V) logits.

Rows of hidden states are projected to logits one chunk at a time; each chunk's logits are
recomputed in the backward pass (activation checkpointing), so at most one chunk of logits
(and its gradient) is alive at once. Costs one extra head matmul per step; used only when the
full logits would exceed :data:`dwtune.core.memory.LOGITS_CHUNK_BYTES`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _chunk_loss_sum(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
    logits = F.linear(hidden, weight)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # as the unchunked loss: softmax in fp32 under autocast
    return F.cross_entropy(logits, targets, reduction="sum")


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_rows: int
) -> torch.Tensor:
    """Mean cross-entropy (nats) of ``hidden @ weight.T`` (``hidden`` (..., D), ``weight``
    (V, D)) against ``targets`` (...), ``chunk_rows`` rows of logits at a time."""
    rows = hidden.reshape(-1, hidden.shape[-1])
    flat = targets.reshape(-1)
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    total = torch.zeros((), device=hidden.device, dtype=dtype)
    for start in range(0, flat.numel(), chunk_rows):
        end = start + chunk_rows
        total = total + checkpoint(
            _chunk_loss_sum, rows[start:end], weight, flat[start:end], use_reentrant=False
        )
    return total / flat.numel()
