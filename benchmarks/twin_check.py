"""A sharded or micro-batched trial against its plain twin (same data, seed and global batch).

    python benchmarks/twin_check.py micro [sharded] [--device cuda] [--depth 2] [--width 64] ...

The shape trains once whole in this process (the plain twin), then per check: ``micro`` as
micro-batches of ``--micro-batch`` sequences (gradient accumulation, the same optimiser step),
``sharded`` as an FSDP2 job of ``--workers`` local processes (:mod:`torch.multiprocessing`). The
process group is NCCL when every worker has a GPU of its own and gloo otherwise (CPU, or the
workers sharing one GPU: NCCL refuses two ranks on one device). Prints a JSON line per check:
the largest relative difference between the two loss curves (train and validation loss at every
evaluation), the tolerance and whether it held, each run's final validation loss and seconds.
The tolerance: 1e-4 in fp32 (CPU; the tests hold 1e-4 and 1e-5), 2e-2 under bf16 autocast
(CUDA), where another split rounds each matmul differently.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dwtune.backends.pytorch.train import train_model
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.spec import spec_from_dict

CURVE = (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS)
RTOL = {"cpu": 1e-4, "cuda": 2e-2}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checks", nargs="+", choices=("micro", "sharded"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rtol", type=float, default=None)
    parser.add_argument("--cache-dir", default=None, help="token cache (default: a scratch one)")
    return parser.parse_args(argv)


def make_spec(args: argparse.Namespace, cache_dir: str, **train):
    """The bundled corpus, char-level; an evaluation every quarter of the steps."""
    data = {"cache_dir": cache_dir, "seq_len": args.seq_len, "vocab_size": args.vocab_size}
    return spec_from_dict(
        {
            "name": "twin",
            "space": {"depths": [args.depth], "budgets": [1e4]},
            "data": data,
            "model": {"heads": args.heads, "width_multiple": 2},
            "train": {
                "steps": args.steps,
                "batch_size": args.batch_size,
                "lr": 3e-3,
                "warmup_steps": max(1, args.steps // 5),
                "eval_every": max(1, args.steps // 4),
                "eval_batches": 2,
                "device": args.device,
                **train,
            },
        }
    )


def shape_of(args: argparse.Namespace) -> ModelShape:
    return ModelShape(args.depth, args.width, args.heads, args.vocab_size, args.seq_len)


def plain_run(spec, shape: ModelShape) -> tuple[list[dict], float]:
    reports: list[dict] = []
    start = time.perf_counter()
    train_model(spec, shape, 0, lambda metrics, _c: reports.append(metrics))
    return reports, time.perf_counter() - start


def _rank(rank: int, world: int, store: str, out: str, spec, shape, backend: str) -> None:
    from dwtune.backends.pytorch.sharded import train_sharded

    os.environ.setdefault("DWTUNE_THREADS", "1")
    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        torch.cuda.set_device(rank)  # a GPU of its own; else every rank shares the current one
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
    reports: list[dict] = []
    start = time.perf_counter()
    try:
        train_sharded(spec, shape, 0, lambda metrics, _c: reports.append(metrics))
    finally:
        dist.destroy_process_group()
    if rank == 0:
        seconds = time.perf_counter() - start
        Path(out).write_text(json.dumps({"reports": reports, "seconds": seconds}))


def sharded_run(spec, shape: ModelShape, workers: int, scratch: str) -> tuple[list[dict], float]:
    own_gpus = spec.train.device == "cuda" and torch.cuda.device_count() >= workers
    backend = "nccl" if own_gpus else "gloo"
    out = str(Path(scratch) / "rank0.json")
    args = (workers, str(Path(scratch) / "store"), out, spec, shape, backend)
    mp.spawn(_rank, args=args, nprocs=workers, join=True)
    result = json.loads(Path(out).read_text())
    return result["reports"], result["seconds"]


def largest_difference(got: list[dict], want: list[dict]) -> float:
    """Largest relative difference of the curves; inf where their evaluation steps differ."""
    if [r[vocabulary.STEP] for r in got] != [r[vocabulary.STEP] for r in want]:
        return math.inf
    return max(
        abs(g[key] - w[key]) / max(abs(w[key]), 1e-12)
        for g, w in zip(got, want, strict=True)
        for key in CURVE
    )


def twin_run(check: str, args: argparse.Namespace, spec, scratch: str) -> tuple[list[dict], float]:
    shape = shape_of(args)
    if check == "micro":
        split = make_spec(args, spec.data.cache_dir, micro_batch_size=args.micro_batch)
        return plain_run(split, shape)
    return sharded_run(spec, shape, args.workers, scratch)


def result_row(check: str, args: argparse.Namespace, plain: tuple, twin: tuple) -> dict:
    rtol = args.rtol if args.rtol is not None else RTOL[args.device]
    difference = largest_difference(twin[0], plain[0])
    return {
        "check": check,
        "device": args.device,
        "depth": args.depth,
        "width": args.width,
        "batch_size": args.batch_size,
        "micro_batch": args.micro_batch if check == "micro" else None,
        "workers": args.workers if check == "sharded" else 1,
        "steps": args.steps,
        "max_rel_diff": difference,
        "rtol": rtol,
        "passed": difference <= rtol,
        "plain_val_loss": plain[0][-1][vocabulary.VAL_LOSS],
        "twin_val_loss": twin[0][-1][vocabulary.VAL_LOSS],
        "plain_seconds": plain[1],
        "twin_seconds": twin[1],
    }


def main(argv: list[str]) -> int:
    args = parse(argv)
    passed = True
    with tempfile.TemporaryDirectory(prefix="dwtune-twin-") as scratch:
        spec = make_spec(args, args.cache_dir or str(Path(scratch) / "cache"))
        plain = plain_run(spec, shape_of(args))
        for check in args.checks:
            row = result_row(check, args, plain, twin_run(check, args, spec, scratch))
            print(json.dumps(row), flush=True)
            passed = passed and row["passed"]
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
