"""Batches from memory-mapped token files.

Training windows start at offsets drawn from a generator keyed by (trial seed, step), so data
order depends on the seed only and a resumed run sees the same batches; evaluation windows are
evenly spaced over the held-out split and the same for every trial of a spec. Only the windows
drawn are read from disk.
"""

from __future__ import annotations

import numpy as np

DATA_STREAM = 0x5EED_DA7A  # separates the data generator from other uses of the trial seed


def _windows(tokens: np.ndarray, offsets: np.ndarray, seq_len: int) -> np.ndarray:
    """(N, seq_len + 1) int64 windows starting at ``offsets``."""
    return tokens[offsets[:, None] + np.arange(seq_len + 1)].astype(np.int64)


def train_batch(
    tokens: np.ndarray, seed: int, step: int, batch_size: int, seq_len: int
) -> np.ndarray:
    """The (B, T + 1) training windows of ``step``: a pure function of (seed, step)."""
    rng = np.random.Generator(np.random.PCG64([DATA_STREAM, seed, step]))
    offsets = rng.integers(0, len(tokens) - seq_len, size=batch_size)
    return _windows(tokens, offsets, seq_len)


def eval_batches(
    tokens: np.ndarray, batches: int, batch_size: int, seq_len: int
) -> list[np.ndarray]:
    """Fixed held-out windows, evenly spaced over the split (independent of the trial seed)."""
    count = batches * batch_size
    offsets = np.linspace(0, len(tokens) - seq_len - 1, count).round().astype(np.int64)
    windows = _windows(tokens, offsets, seq_len)
    return [windows[i : i + batch_size] for i in range(0, count, batch_size)]
