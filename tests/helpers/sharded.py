"""Run the sharded trainer on W local processes over gloo (torch.multiprocessing, no Ray).

:func:`run_sharded` spawns the ranks, each of which trains the same trial with
:func:`~dwtune.backends.pytorch.sharded.train_sharded` and writes what it reported (and any
one-line error) to a JSON file; the parent reads them back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from dwtune.core.errors import InputError


class Interrupted(Exception):
    """Raised from a report to stop a training as a killed trial would stop."""


def _rank_main(rank: int, world: int, store: str, out: str, job: dict) -> None:
    from dwtune.backends.pytorch.sharded import train_sharded

    os.environ["DWTUNE_THREADS"] = "1"  # W ranks on a 2-core machine: no oversubscription
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    reports: list[dict] = []
    result: dict = {"reports": reports, "checkpoints": []}

    def report(metrics: dict, checkpoint: str | None) -> None:
        reports.append(metrics)
        result["checkpoints"].append(checkpoint)
        if metrics["step"] == job.get("stop_at"):  # vocabulary.STEP
            raise Interrupted

    try:
        result["final"] = train_sharded(
            job["spec"],
            job["shape"],
            job["seed"],
            report,
            checkpoint_dir=job.get("checkpoint_dir"),
            resume_from=job.get("resume_from"),
        )
    except Interrupted:
        result["interrupted"] = True
    except InputError as exc:
        result["error"] = str(exc)
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def run_sharded(tmp: Path, world: int, **job) -> list[dict]:
    """Each rank's ``{"reports", "checkpoints", "final" | "interrupted" | "error"}``."""
    tmp.mkdir(parents=True, exist_ok=True)
    store = tmp / "store"
    store.unlink(missing_ok=True)
    mp.spawn(_rank_main, args=(world, str(store), str(tmp), job), nprocs=world, join=True)
    return [json.loads((tmp / f"rank{rank}.json").read_text()) for rank in range(world)]
