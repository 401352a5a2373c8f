"""Sharded checkpoints: model and optimizer saved and loaded with ``torch.distributed.checkpoint``.

Rule: every rank of a sharded trial saves only the shards it holds, into its own directory
(a node's local scratch), as one file named by its rank, ``__<rank>_0.distcp``; the
coordinator (rank 0) also writes DCP's ``.metadata`` (where every shard of every tensor
lives, by file name) and the small :data:`TRAINER_FILE` (progress, RNG, last metrics, seed,
shape, train settings, version). No file name repeats across ranks, so the files every rank
reports, copied into one folder (Ray Train's merge of a distributed checkpoint on shared
storage), are a complete DCP checkpoint.

Guarantee: saving and loading never gather a full tensor onto a device. The state dicts are
DTensor-aware (``get_state_dict`` without ``full_state_dict``: each rank's own shards, no
copy); the writer copies each shard straight from the device to host memory as it writes it;
a load reads each stored shard into host memory and copies it into the shard this rank
already holds, so a checkpoint saved over W ranks loads over any number (one plain process
included).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from dwtune.core.errors import InputError

TRAINER_FILE = "trainer.pt"  # the small non-tensor part, written by rank 0
METADATA_FILE = ".metadata"  # DCP's index of the shards, written by the coordinator
# DCP's warnings about what is meant here: a save into a directory holding an earlier
# checkpoint (a trial's scratch directory holds the previous evaluation's, to be replaced),
# and a save or load by one process without a process group (a plain trial)
_EXPECTED_WARNINGS = ("Detected an existing checkpoint", "torch.distributed is disabled")


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Model and optimizer state keyed by parameter name, each tensor this rank's shard."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def save(model: nn.Module, optimizer: torch.optim.Optimizer, directory: str | Path) -> None:
    """Every rank: write this rank's shards to ``directory`` (a collective)."""
    writer = dcp.FileSystemWriter(
        str(directory), single_file_per_rank=True, thread_count=1, overwrite=True
    )
    with _expected_warnings():
        dcp.save(_state(model, optimizer), storage_writer=writer, no_dist=_alone())


def load(model: nn.Module, optimizer: torch.optim.Optimizer, directory: str | Path) -> None:
    """Every rank: read its shards from ``directory`` (all ranks' files in one folder) into
    the model and optimizer it holds (a collective)."""
    folder = Path(directory)
    if not (folder / METADATA_FILE).is_file():
        raise InputError(
            f"resume_from: {folder} has no {METADATA_FILE}; pass the folder holding every "
            f"rank's files of a sharded checkpoint (rank 0 writes {METADATA_FILE})"
        )
    state = _state(model, optimizer)  # allocates the optimizer's state to load into
    try:
        reader = dcp.FileSystemReader(str(folder))
        with _expected_warnings():
            dcp.load(state, storage_reader=reader, no_dist=_alone())
    except (Exception, CheckpointException) as exc:  # every rank's failures, gathered
        raise InputError(
            f"resume_from: {folder} is not a complete sharded checkpoint "
            f"({type(exc).__name__}: {_first_line(exc)}); pass the folder holding every "
            f"rank's __<rank>_0.distcp file"
        ) from None
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )


@contextlib.contextmanager
def _expected_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        for message in _EXPECTED_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        yield


def _alone() -> bool:
    """No process group: one plain process saves or loads the whole state by itself."""
    return not (dist.is_available() and dist.is_initialized())


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
