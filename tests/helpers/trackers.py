"""Reading back what the experiment trackers wrote: W&B's offline run folders (their
``run-<id>.wandb`` record log) and an MLflow tracking store, as plain dicts."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

# W&B's transaction log: a 7-byte header (":W&B", magic 0xBEE1, version), then 32 KiB blocks of
# chunks, each a 7-byte header (CRC-32, length, type: 1 full, 2 first, 3 middle, 4 last) and its
# bytes; a protobuf Record is one full chunk or a first..last run of them (LevelDB's log format).
BLOCK = 32 * 1024
HEADER = 7
FULL, LAST = 1, 4


def wandb_records(path: Path) -> Iterator[object]:
    """The protobuf ``Record``s of one ``run-<id>.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run log"
    position, pending = HEADER, b""
    while position + HEADER <= len(data):
        left = BLOCK - position % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + HEADER])
        if length == 0 and kind == 0:  # zero padding to the block's end
            position += left
            continue
        pending += data[position + HEADER : position + HEADER + length]
        position += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_runs(wandb_dir: Path) -> list[dict]:
    """Every offline run under ``<wandb_dir>/wandb``: name, group, job type, tags, project,
    the history keys it logged, its summary keys and its artifacts (name, type, files)."""
    runs = []
    for log in sorted(Path(wandb_dir).glob("wandb/offline-run-*/run-*.wandb")):
        run: dict = {"history": set(), "summary": set(), "artifacts": [], "folder": log.parent}
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                info = record.run
                run |= {
                    "name": info.display_name,
                    "group": info.run_group,
                    "job_type": info.job_type,
                    "tags": list(info.tags),
                    "project": info.project,
                }
            elif kind == "history":
                run["history"] |= {
                    item.key or "/".join(item.nested_key) for item in record.history.item
                }
            elif kind == "summary":
                run["summary"] |= {item.key for item in record.summary.update if item.key}
            elif kind == "artifact":
                files = sorted(entry.path for entry in record.artifact.manifest.contents)
                run["artifacts"].append((record.artifact.name, record.artifact.type, files))
        runs.append(run)
    return runs


def mlflow_runs(uri: str, experiment: str) -> list[dict]:
    """Every run of ``experiment`` in the tracking store at ``uri``: name, tags, params,
    metric keys, artifact paths and status."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"{uri}: no experiment {experiment!r}"
    return [
        {
            "name": run.info.run_name,
            "status": run.info.status,
            "tags": run.data.tags,
            "params": run.data.params,
            "metrics": set(run.data.metrics),
            "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id)),
        }
        for run in client.search_runs([found.experiment_id], max_results=10_000)
    ]
