"""Performance bookkeeping: device peak FLOP/s for MFU, timing and memory helpers.

MFU = FLOPs per token (:func:`dwtune.core.budget.flops_per_token`) × tokens/s ÷ peak
FLOP/s. The peak
comes, in this order, from an explicit value (``--peak-flops`` or ``DWTUNE_PEAK_FLOPS``), a table
of datasheet dense bf16 tensor-core rates for known GPUs, or a short matmul calibration (the
best rate this device reaches on a large matmul: fp32 on CPU, bf16 on an unknown GPU). Every
result carries a ``source`` that says which was used.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError

PEAK_ENV = "DWTUNE_PEAK_FLOPS"
# Dense (no sparsity) bf16 tensor-core FLOP/s from vendor datasheets; first match on the
# device name wins, so more specific names come first.
GPU_PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM (HBM3)
    ("GH200", 989e12),
    ("H200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
    ("MI300X", 1307e12),
)
MALLOC_ENV = "DWTUNE_MALLOC_TUNING"  # "0" leaves the C allocator as it is
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameter numbers
HEAP_KEEP_BYTES = 1 << 30
CALIBRATION_SIZE = 1024  # square matmul side: large enough to reach the device's best rate
CALIBRATION_REPEATS = 16  # best of: robust to other processes on a shared CPU


@dataclass(frozen=True)
class Peak:
    flops: float  # per second
    source: str  # how it was obtained, for reports


def peak_from_table(device_name: str) -> float | None:
    for name, flops in GPU_PEAK_BF16:
        if name in device_name:
            return flops
    return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({torch.get_num_threads()} threads)"


@functools.lru_cache(maxsize=8)
def calibrate_matmul(device_type: str, threads: int) -> float:
    """Best FLOP/s of a square matmul on this device (fp32 on CPU, bf16 on GPU)."""
    del threads  # part of the cache key: the rate scales with the thread count
    device = torch.device(device_type)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    n = CALIBRATION_SIZE
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(CALIBRATION_REPEATS + 1):  # the first repeat warms up the library
        synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def _explicit_peak(peak_flops: float | None) -> Peak | None:
    if peak_flops is not None:
        return Peak(float(peak_flops), "given (--peak-flops)")
    raw = os.environ.get(PEAK_ENV)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{PEAK_ENV}: got {raw!r}; expected FLOP/s such as 989e12") from None
    return Peak(value, f"given (${PEAK_ENV})")


def peak_flops(device: torch.device, peak_flops: float | None = None) -> Peak:
    """The FLOP/s that MFU divides by, and where it came from."""
    if peak_flops is not None and not peak_flops > 0:
        raise InputError(f"--peak-flops: got {peak_flops}; expected a positive FLOP/s value")
    explicit = _explicit_peak(peak_flops)
    if explicit:
        return explicit
    name = device_name(device)
    if device.type == "cuda" and (flops := peak_from_table(name)):
        return Peak(flops, f"table: {name} dense bf16")
    flops = calibrate_matmul(device.type, torch.get_num_threads())
    precision = "bf16" if device.type == "cuda" else "fp32"
    n = CALIBRATION_SIZE
    return Peak(flops, f"calibrated: best {precision} {n}x{n}x{n} matmul on {name}")


def tune_cpu_allocator() -> bool:
    """Let glibc keep freed memory for reuse instead of returning it to the OS.

    PyTorch has no caching allocator on CPU: each step's activations (MiBs each) are fresh
    mmaps whose pages fault in on first touch. Measured on a 2-core VM at depth 4 x width 128:
    about 2,700-3,900 page faults per training step by default, about 10 with this setting.
    The price is a resident set that stays at its peak, which a training process reaches anyway.
    """
    if os.environ.get(MALLOC_ENV, "1") == "0":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt  # glibc only
    except (OSError, AttributeError):
        return False
    return bool(
        mallopt(M_MMAP_THRESHOLD, HEAP_KEEP_BYTES) and mallopt(M_TRIM_THRESHOLD, HEAP_KEEP_BYTES)
    )


def mfu(flops_per_token: float, tokens_per_s: float, peak: Peak) -> float:
    return flops_per_token * tokens_per_s / peak.flops


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that wall-clock timings measure it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> tuple[int, str]:
    """Peak memory and what it measures: allocated tensors on GPU, process RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "max CUDA memory allocated"
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return rss_kib * 1024, "peak process RSS"


# --------------------------------------------------------------------------- step timing


@dataclass(frozen=True)
class StepTimes:
    first_s: float  # the first step: includes compilation when compiling
    times_s: tuple[float, ...]  # each timed step after warm-up

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def compile_s(self) -> float:
        """First step minus a steady step: the one-time cost (compilation, allocations)."""
        return max(0.0, self.first_s - self.median_s)


def time_steps(
    step: Callable[[], object], steps: int, warmup: int, device: torch.device
) -> StepTimes:
    """Run ``warmup`` untimed steps (the first one timed alone), then time ``steps`` steps."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    first = time.perf_counter() - start
    for _ in range(max(0, warmup - 1)):
        step()
    times = []
    for _ in range(steps):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return StepTimes(first, tuple(times))


# --------------------------------------------------------------------------- attention


# torch's dispatch order for fused attention on CUDA (math is the always-available fallback)
CUDA_ATTENTION_ORDER = (
    ("flash", "can_use_flash_attention"),
    ("efficient", "can_use_efficient_attention"),
)
FLASH_MAX_HEAD_DIM = 256


def attention_backend(
    shape: ModelShape, device: torch.device, dtype: torch.dtype
) -> tuple[str, str]:
    """The SDPA kernel used for ``shape`` and why (the reasons the faster ones were skipped)."""
    if device.type != "cuda":
        return "flash_cpu", "torch's fused CPU flash-attention kernel (any head_dim)"
    q = torch.empty(1, shape.heads, shape.seq_len, shape.head_dim, device=device, dtype=dtype)
    params = torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, True, False)
    skipped = []
    for name, check in CUDA_ATTENTION_ORDER:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            usable = getattr(torch.backends.cuda, check)(params, True)
        if usable:
            return name, "; ".join(skipped) or f"head_dim {shape.head_dim} is supported"
        why = str(caught[0].message).splitlines()[0] if caught else "not supported"
        skipped.append(f"{name} skipped: {why}")
    if shape.head_dim > FLASH_MAX_HEAD_DIM:
        skipped.append(f"head_dim {shape.head_dim} > {FLASH_MAX_HEAD_DIM}")
    return "math", "; ".join(skipped)
