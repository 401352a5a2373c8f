"""`dwtune analyze` on a large sweep table: seconds and peak memory of the whole command.

SYNTHETIC DATA: a W&B-style export (``n_layer``, ``d_model``, ``n_params``, ``seed``, ``tokens``,
``val_loss``) of 4 depths x 50 budgets x 50 seeds = 10,000 runs, each logging ``--rows`` / 10,000
evaluations evenly spaced in tokens; loss = a power law in size + a planted transition per
adjacent depth pair + a decaying curve in tokens + Gaussian checkpoint jitter (0.002 nats).
Rows are shuffled, as an export gives them.

    python benchmarks/analyze_scale.py --rows 1000000 [--format csv|parquet]

prints one line: rows, runs, file size, wall and CPU seconds and peak memory (MB, maxrss of
the analyze process). benchmarks/README.md quotes its figures.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

DEPTHS = (6, 12, 18, 24)
BUDGETS = np.geomspace(1e6, 1e9, 50)
SEEDS = 50
N_STARS = (2e7, 6e7, 2e8)  # planted per adjacent pair
TOKENS = 2e9
COLUMNS = "depth=n_layer,width=d_model,params=n_params,loss=val_loss"


def sweep(rows: int, rng_seed: int = 0) -> pd.DataFrame:
    """The synthetic export: ``rows`` rows (rounded to whole runs), shuffled."""
    rng = np.random.default_rng(rng_seed)
    depth, budget_index, replica = (
        a.ravel() for a in np.meshgrid(DEPTHS, range(BUDGETS.size), range(SEEDS))
    )
    budget = BUDGETS[budget_index]
    # seeds shared by the depths of one budget (paired runs), distinct across budgets: two
    # budgets can round to one width at depth 24, and must stay two runs
    seed = budget_index * SEEDS + replica
    runs = depth.size
    checkpoints = max(4, rows // runs)
    width = np.maximum(8, np.round(np.sqrt(budget / (12 * depth)) / 8) * 8).astype(int)
    params = 12 * depth * width.astype(float) ** 2
    planted = sum(
        0.05 * np.tanh((np.log(star) - np.log(params)) / 0.5) * (depth > shallow)
        for shallow, star in zip(DEPTHS, N_STARS, strict=False)
    )
    final = (8.8e13 / params) ** 0.076 + planted + 0.002 * rng.standard_normal(runs)
    share = np.arange(1, checkpoints + 1) / checkpoints
    tokens = np.outer(np.ones(runs), share * TOKENS)
    loss = final[:, None] + 0.1 * (share[None, :] ** -0.5 - 1)
    loss += 0.002 * rng.standard_normal(loss.shape)
    repeat = lambda a: np.repeat(a, checkpoints)  # noqa: E731 - one column per run, per row
    frame = pd.DataFrame(
        {
            "n_layer": repeat(depth),
            "d_model": repeat(width),
            "n_params": repeat(params),
            "seed": repeat(seed),
            "tokens": tokens.ravel().astype(np.int64),
            "val_loss": loss.ravel(),
        }
    )
    return frame.sample(frac=1.0, random_state=rng_seed).reset_index(drop=True)


def measure(path: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak MB) of `dwtune analyze` on ``path`` in its own
    process (CPU seconds: what a busy machine's wall time hides)."""
    command = [sys.executable, "-m", "dwtune", "analyze", str(path), "--columns", COLUMNS]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"analyze failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # maxrss: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv")
    args = parser.parse_args()
    frame = sweep(args.rows)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"sweep.{args.format}"
        if args.format == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
        size = path.stat().st_size / 2**20
        runs = len(frame.groupby(["n_layer", "d_model", "seed"]))
        del frame  # the child's memory is measured, not this process's
        seconds, cpu, peak = measure(path)
    print(
        f"analyze {args.format}: {args.rows:,} rows, {runs:,} runs, {size:.0f} MB file: "
        f"{seconds:.1f} s ({cpu:.1f} s CPU), peak {peak:.0f} MB"
    )


if __name__ == "__main__":
    main()
