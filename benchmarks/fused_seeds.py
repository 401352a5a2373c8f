"""Fused seeds against separate trainings: per-seed throughput of the trainer's own step.

For each shape and each k in ``--ks``, in one process and alternating rounds (so a load
change on a shared machine hits both alike): k seeds as one fused model
(:func:`dwtune.backends.pytorch.fused.build_fused_training`) take ``--steps`` timed steps,
and k separate trainings (:func:`dwtune.backends.pytorch.train.build_training`, one model
per seed) take ``--steps`` steps each, one after the other, as one trial slot trains them.
Both train on random token batches of the spec's batch size and sequence length; each
round's time is the wall time of its steps, the median over ``--rounds`` is kept.

    per-seed tokens/s = k · steps · batch · seq_len / time
    speedup at k      = separate time / fused time

Shapes: ``search_spaces/quickstart.yaml``'s grid (depths 1, 2 at 1e5, 3e5, 1e6), and the CPU
law study's (:data:`LAW_DEPTHS` at :data:`LAW_BUDGETS`, the quickstart's data, heads and batch;
its depths 1 and 2 are the quickstart's shapes and are timed once).
Also prints the equality check's largest relative loss difference: 3 fused seeds against the
same seeds alone, 300 steps of a tiny net on CPU in fp32 (tests/backends/test_fused.py).

Run::

    python benchmarks/fused_seeds.py [--json] [--threads 1] [--steps 4] [--rounds 2]

Nothing here asserts a time; the figures it printed are quoted in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dwtune.backends.pytorch.fused import build_fused_training
from dwtune.backends.pytorch.train import Runtime, build_training, to_device
from dwtune.core.budget import ModelShape
from dwtune.core.spec import TrainConfig, load_spec

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "search_spaces" / "quickstart.yaml"
LAW_DEPTHS = (1, 2, 3, 4)  # a CPU law study: four depths, three pairs of neighbours
LAW_BUDGETS = ("1e5", "3e5", "1e6")  # non-embedding sizes a 2-core machine trains in minutes
BATCHES = 4  # distinct random batches cycled through the timed steps


def spec_shapes(overrides: list[str]) -> tuple[list[ModelShape], TrainConfig]:
    spec = load_spec(QUICKSTART, overrides)
    return [cell.shape for cell in spec.grid()], spec.train


def random_batches(shape: ModelShape, cfg: TrainConfig, seeds: int) -> list[np.ndarray]:
    """``BATCHES`` random (S, B, T + 1) token windows."""
    rng = np.random.default_rng(0)
    size = (seeds, cfg.batch_size, shape.seq_len + 1)
    return [rng.integers(0, shape.vocab_size, size) for _ in range(BATCHES)]


def timed(step, batches: list[np.ndarray], pick, steps: int) -> float:
    """Seconds of ``steps`` steps."""
    start = time.perf_counter()
    for i in range(steps):
        step(*to_device(pick(batches[i % BATCHES]), torch.device("cpu")))
    return time.perf_counter() - start


def compare(shape: ModelShape, cfg: TrainConfig, k: int, args) -> dict:
    runtime = Runtime(torch.device("cpu"), compile=False, threads=args.threads)
    batches = random_batches(shape, cfg, k)
    seeds = list(range(k))
    fused = build_fused_training(shape, cfg, runtime, seeds)
    alone = [build_training(shape, cfg, runtime, seed) for seed in seeds]
    pick_all, picks = (lambda w: w), [lambda w, s=s: w[s] for s in seeds]
    timed(fused, batches, pick_all, args.warmup)  # untimed: first-touch allocations
    for step, pick in zip(alone, picks, strict=True):
        timed(step, batches, pick, args.warmup)
    fused_s, separate_s = [], []
    for _ in range(args.rounds):
        fused_s.append(timed(fused, batches, pick_all, args.steps))
        separate_s.append(
            sum(
                timed(step, batches, pick, args.steps)
                for step, pick in zip(alone, picks, strict=True)
            )
        )
    tokens = k * args.steps * cfg.batch_size * shape.seq_len  # summed over the k seeds
    fused_t, separate_t = statistics.median(fused_s), statistics.median(separate_s)
    return {
        "depth": shape.depth,
        "width": shape.width,
        "k": k,
        # tokens every seed trains, summed over the seeds, per wall second of one slot
        "fused_seed_tokens_per_s": tokens / fused_t,
        "separate_seed_tokens_per_s": tokens / separate_t,
        "speedup": separate_t / fused_t,  # per seed: the same seeds in less time
    }


def equality_difference(steps: int = 300) -> float:
    """The equality test's figure: 3 fused seeds against each alone, largest relative gap."""
    sys.path.insert(0, str(ROOT / "tests" / "backends"))
    from test_fused import SHAPE, largest_difference  # the test's own check

    cfg = TrainConfig(steps=steps, batch_size=4, lr=3e-3, warmup_steps=10, grad_clip=0.5)
    return largest_difference(SHAPE, cfg, steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per model, once")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ks", default="1,2,4,8")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]
    started = time.perf_counter()
    quick, cfg = spec_shapes([])
    law, _ = spec_shapes(
        [f"space.depths={list(LAW_DEPTHS)}", f"space.budgets=[{', '.join(LAW_BUDGETS)}]"]
    )
    # cpu_law's depths 1 and 2 are the quickstart's shapes: timed once, under quickstart
    studies = {"quickstart": quick, "cpu_law": [s for s in law if s not in quick]}
    rows = []
    for study, shapes in studies.items():
        for shape in shapes:
            for k in ks:
                row = {"study": study, **compare(shape, cfg, k, args)}
                rows.append(row)
                if not args.json:
                    print(_line(row), flush=True)
    result = {
        "threads": args.threads,
        "steps": args.steps,
        "rounds": args.rounds,
        "batch_size": cfg.batch_size,
        "seq_len": quick[0].seq_len,
        "load_average_start": os.getloadavg()[0],
        "rows": rows,
        "median_speedup_by_k": {
            k: statistics.median(r["speedup"] for r in rows if r["k"] == k) for k in ks
        },
        "equality_max_relative_difference": equality_difference(),
        "load_average_end": os.getloadavg()[0],
        "wall_s": time.perf_counter() - started,
    }
    print(json.dumps(result, indent=1) if args.json else _summary(result))
    return 0


def _line(row: dict) -> str:
    return (
        f"{row['study']:10s} depth {row['depth']} width {row['width']:4d} k={row['k']}: "
        f"fused {row['fused_seed_tokens_per_s']:8.0f} seed-tokens/s, separate "
        f"{row['separate_seed_tokens_per_s']:8.0f}, per-seed speedup {row['speedup']:.2f}x"
    )


def _summary(result: dict) -> str:
    by_k = ", ".join(f"k={k}: {v:.2f}x" for k, v in result["median_speedup_by_k"].items())
    return (
        f"median per-seed speedup {by_k}; equality check's largest relative loss difference "
        f"{result['equality_max_relative_difference']:.2e}; {result['wall_s']:.0f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
