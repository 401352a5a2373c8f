"""Run the sharded trainer on W local processes over gloo (torch.multiprocessing, no Ray).

:func:`run_sharded_jobs` spawns the ranks once; each trains the given jobs one after another
with :func:`~dwtune.backends.pytorch.sharded.train_sharded` and writes what it reported (and
any one-line error) to a JSON file; the parent reads them back. A job's ``checkpoint_dir``
may name ``{rank}`` (each rank's own directory, as on separate nodes); with ``no_gather``
every full-tensor gather of a DTensor raises while a rank saves or restores a checkpoint.
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


def _rank_main(rank: int, world: int, store: str, out: str, jobs: list[dict]) -> None:
    os.environ["DWTUNE_THREADS"] = "1"  # W ranks on a 2-core machine: no oversubscription
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    results = []
    try:
        for job in jobs:  # one after another in the same group, as separate jobs would run:
            results.append(_train({**job, "rank": rank}))
            dist.barrier()  # every rank's checkpoint is written before any rank resumes it
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))


def _counted(result: dict) -> None:
    """Record in ``result`` the rows of every training pass (``passes``) and the blocks
    checkpointed (``checkpointed``): the step's split, seen from inside a rank."""
    from dwtune.backends.pytorch import model, sharded

    passes, checkpointed = result.setdefault("passes", []), result.setdefault("checkpointed", [])
    loss, checkpoint = sharded.ShardedStep._loss, model.checkpoint

    def counting_loss(self, inputs, targets):
        passes.append(inputs.shape[0])
        return loss(self, inputs, targets)

    def counting_checkpoint(*args, **kwargs):
        checkpointed.append(True)
        return checkpoint(*args, **kwargs)

    sharded.ShardedStep._loss = counting_loss
    model.checkpoint = counting_checkpoint


class Gathered(AssertionError):
    """Raised where a checkpoint would gather a full tensor onto this rank's device."""


def _forbid_gathers(result: dict) -> None:
    """While a rank saves or restores: DTensor.full_tensor and redistribute raise (and are
    counted in ``result["gathers"]``), so a checkpoint that gathers the model fails."""
    from torch.distributed.tensor import DTensor

    from dwtune.backends.pytorch import sharded

    result["gathers"] = 0
    save, restore = sharded.ShardedTrainer.save, sharded.ShardedTrainer.restore
    full_tensor, redistribute = DTensor.full_tensor, DTensor.redistribute

    def refuse(*_args, **_kwargs):
        result["gathers"] += 1
        raise Gathered("a checkpoint gathered a DTensor")

    def guarded(method):
        def call(self, *args, **kwargs):
            DTensor.full_tensor, DTensor.redistribute = refuse, refuse
            try:
                return method(self, *args, **kwargs)
            finally:
                DTensor.full_tensor, DTensor.redistribute = full_tensor, redistribute

        return call

    sharded.ShardedTrainer.save = guarded(save)
    sharded.ShardedTrainer.restore = guarded(restore)
    result["_restore"] = (save, restore)


def _train(job: dict) -> dict:
    from dwtune.backends.pytorch import model, sharded
    from dwtune.backends.pytorch.sharded import train_sharded

    reports: list[dict] = []
    result: dict = {"reports": reports, "checkpoints": []}
    loss, checkpoint = sharded.ShardedStep._loss, model.checkpoint
    _counted(result)
    if job.get("no_gather"):
        _forbid_gathers(result)
    directory = job.get("checkpoint_dir")

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
            checkpoint_dir=directory.format(rank=job["rank"]) if directory else None,
            resume_from=job.get("resume_from"),
        )
    except Interrupted:
        result["interrupted"] = True
    except (InputError, Gathered) as exc:
        result["error"] = str(exc)
    finally:
        sharded.ShardedStep._loss, model.checkpoint = loss, checkpoint
        if "_restore" in result:
            sharded.ShardedTrainer.save, sharded.ShardedTrainer.restore = result.pop("_restore")
    return result


def run_sharded_jobs(tmp: Path, world: int, jobs: list[dict]) -> list[list[dict]]:
    """Several trainings in one start of the W processes (torch imports once): per job, each
    rank's ``{"reports", "checkpoints", "passes", "checkpointed", "final" | "interrupted" |
    "error"}``."""
    tmp.mkdir(parents=True, exist_ok=True)
    store = tmp / "store"
    store.unlink(missing_ok=True)
    mp.spawn(_rank_main, args=(world, str(store), str(tmp), jobs), nprocs=world, join=True)
    ranks = [json.loads((tmp / f"rank{rank}.json").read_text()) for rank in range(world)]
    return [[ranks[rank][index] for rank in range(world)] for index in range(len(jobs))]
