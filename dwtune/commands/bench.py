"""dwtune bench: time the trainer's fwd+bwd+optimizer step for one shape on random tokens.

Prints tokens/s, step time (median of the timed steps), MFU and where its peak came from,
compile time (first step minus a steady step), peak memory and the attention kernel.
"""

from __future__ import annotations

import argparse
import json

from dwtune.commands import argtypes
from dwtune.core.errors import InputError
from dwtune.core.units import format_size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    shape = parser.add_argument_group("the shape timed (as a spec's model and data sections)")
    shape.add_argument("--depth", type=argtypes.DEPTH, default=4, help="layers L (default 4)")
    shape.add_argument(
        "--width", type=argtypes.WIDTH, default=128, help="model width dx (default 128)"
    )
    shape.add_argument(
        "--heads", type=argtypes.HEADS, default=2, help="attention heads per layer (default 2)"
    )
    shape.add_argument(
        "--seq-len", type=argtypes.SEQ_LEN, default=128, help="tokens per sequence (default 128)"
    )
    shape.add_argument(
        "--batch-size", type=argtypes.BATCH, default=16, help="sequences per step (default 16)"
    )
    shape.add_argument(
        "--vocab-size", type=argtypes.VOCAB, default=2000, help="vocabulary size (default 2000)"
    )
    shape.add_argument(
        "--mlp-ratio",
        type=argtypes.MLP_RATIO,
        default=4.0,
        help="MLP hidden width over dx (default 4)",
    )
    parser.add_argument("--steps", type=argtypes.STEPS, default=20, help="timed steps (default 20)")
    parser.add_argument(
        "--warmup", type=argtypes.WARMUP, default=3, help="untimed steps first (default 3)"
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where to time it (default auto: cuda when available)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compile the repeated block (default: on for CUDA, off for CPU)",
    )
    parser.add_argument(
        "--peak-flops",
        type=argtypes.PEAK_FLOPS,
        default=None,
        help="device peak FLOP/s for MFU (default: GPU table or calibration)",
    )
    parser.add_argument(
        "--seed", type=argtypes.SEED, default=0, help="initialisation and data seed (default 0)"
    )
    parser.add_argument(
        "--seeds",
        type=argtypes.SEED_COUNT,
        default=1,
        help="time that many seeds fused into one model (seed, seed + 1, ...); tokens/s "
        "then counts every seed's tokens (default 1; benchmarks/fused_seeds.py compares)",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument(
        "--results",
        default=None,
        help="append the result to this JSON Lines file, which `dwtune plan --cost` reads for "
        "its MFU (default ~/.cache/dwtune/bench/results.jsonl; 'none' to skip)",
    )


def _shape(args: argparse.Namespace):
    from dwtune.backends.pytorch.model import check_shape
    from dwtune.core.budget import ModelShape

    shape = ModelShape(
        depth=args.depth,
        width=args.width,
        heads=args.heads,
        vocab_size=args.vocab_size,
        seq_len=args.seq_len,
        mlp_ratio=args.mlp_ratio,
    )
    check_shape(shape)
    return shape


def _check_counts(args: argparse.Namespace) -> None:
    for flag, value, minimum in (
        ("--steps", args.steps, 1),
        ("--warmup", args.warmup, 1),
        ("--batch-size", args.batch_size, 1),
    ):
        if value < minimum:
            raise InputError(f"{flag}: got {value}; expected an integer >= {minimum}")


def _time_training(args: argparse.Namespace, shape, runtime):
    """Time the trainer's step on random batches (see :func:`time_random_batches`)."""
    from dwtune.backends.pytorch.bench import time_random_batches

    return time_random_batches(
        shape,
        runtime,
        seed=args.seed,
        steps=args.steps,
        warmup=args.warmup,
        batch_size=args.batch_size,
        seeds=args.seeds,
    )


def _describe(args: argparse.Namespace, shape, runtime) -> dict:
    """What was measured: shape, device, precision, attention kernel."""
    from dwtune.backends.pytorch.bench import attention_backend_of
    from dwtune.backends.pytorch.perf import device_name
    from dwtune.core.budget import count_params, flops_per_token

    backend, why = attention_backend_of(shape, runtime)
    return {
        "device": runtime.device.type,
        "device_name": device_name(runtime.device),
        "threads": runtime.threads,
        "depth": shape.depth,
        "width": shape.width,
        "heads": shape.heads,
        "head_dim": shape.head_dim,
        "seq_len": shape.seq_len,
        "batch_size": args.batch_size,
        "seeds": args.seeds,
        "vocab_size": shape.vocab_size,
        "params": count_params(shape).total,
        "flops_per_token": flops_per_token(shape),
        "precision": "bf16 autocast" if runtime.cuda else "fp32",
        "compile": runtime.compile,
        "attention_backend": backend,
        "attention_note": why,
    }


def measure(args: argparse.Namespace) -> dict:
    """Build the trainer's step for the shape, time it, and summarise (see module doc)."""
    from dwtune.backends.pytorch.perf import mfu, peak_flops, peak_memory_bytes
    from dwtune.backends.pytorch.train import configure_runtime
    from dwtune.core.spec import DataConfig

    _check_counts(args)
    shape = _shape(args)
    runtime = configure_runtime(args.device, args.compile, DataConfig().cache_dir)
    peak = peak_flops(runtime.device, args.peak_flops)
    times = _time_training(args, shape, runtime)
    tokens_per_s = args.seeds * args.batch_size * shape.seq_len / times.median_s
    memory, memory_kind = peak_memory_bytes(runtime.device)
    result = _describe(args, shape, runtime)
    return {
        **result,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_time_s": times.median_s,
        "step_time_min_s": min(times.times_s),
        "tokens_per_s": tokens_per_s,
        "mfu": mfu(result["flops_per_token"], tokens_per_s, peak),
        "peak_flops": peak.flops,
        "peak_source": peak.source,
        "first_step_s": times.first_s,
        "compile_time_s": times.compile_s if runtime.compile else None,
        "peak_memory_bytes": memory,
        "peak_memory_kind": memory_kind,
    }


def format_result(r: dict) -> str:
    compile_line = (
        f"{r['compile_time_s']:.2f} s (first step {r['first_step_s']:.2f} s)"
        if r["compile"]
        else f"off (first step {r['first_step_s']:.3f} s)"
    )
    rows = [
        (
            "shape",
            f"depth {r['depth']} x width {r['width']}, {r['heads']} heads "
            f"(head_dim {r['head_dim']}), seq {r['seq_len']}, batch {r['batch_size']}, "
            f"vocab {r['vocab_size']}, {format_size(r['params'])} params"
            + (f", {r['seeds']} seeds fused" if r["seeds"] > 1 else ""),
        ),
        ("device", f"{r['device_name']}, {r['precision']}"),
        ("attention", f"{r['attention_backend']} ({r['attention_note']})"),
        ("tokens/s", f"{r['tokens_per_s']:,.0f}"),
        (
            "step time",
            f"{1e3 * r['step_time_s']:.2f} ms median of {r['steps']} "
            f"(min {1e3 * r['step_time_min_s']:.2f} ms)",
        ),
        (
            "MFU",
            f"{100 * r['mfu']:.1f}% of {r['peak_flops'] / 1e12:.3g} TFLOP/s [{r['peak_source']}]",
        ),
        ("compile", compile_line),
        ("peak memory", f"{r['peak_memory_bytes'] / 2**20:,.0f} MiB ({r['peak_memory_kind']})"),
    ]
    return "\n".join(f"{name:<12} {value}" for name, value in rows)


def save_result(result: dict, results: str | None) -> None:
    """Append one line; CUDA results there are the MFU `dwtune plan --cost` assumes."""
    from pathlib import Path

    from dwtune.study.planning import BENCH_RESULTS

    if results == "none":
        return
    path = Path(results).expanduser() if results else BENCH_RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(result) + "\n")


def run(args: argparse.Namespace) -> int:
    result = measure(args)
    save_result(result, args.results)
    print(json.dumps(result, indent=2) if args.json else format_result(result))
    return 0
