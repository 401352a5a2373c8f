"""Which requests a trial trains together: the seeds of one training that fuse.

Requests that differ only in their seed (and in who asked: pair, round, point kind, which are
not part of a training) are one training's seeds; a trial carries as many of them as
:func:`dwtune.core.sharding.fused_seeds` allows for their shape (the rule ``dwtune plan``
shows per cell), and writes one record per request, exactly as the requests trained alone
would be recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from dwtune.core import sharding
from dwtune.core.records import TrialRequest
from dwtune.core.spec import ExperimentSpec


def training_key(request: TrialRequest) -> TrialRequest:
    """The request with what varies across one training's seeds blanked out."""
    return dataclasses.replace(request, trial_id="", seed=0, pair="", round=0, point_kind="")


def fused_groups(
    spec: ExperimentSpec,
    requests: Sequence[TrialRequest],
    gpu_bytes: int | None,
    placeable: Callable[[int], bool] | None = None,
) -> list[list[TrialRequest]]:
    """``requests`` (distinct identities) as trials: each a list of seeds of one training, at
    most ``fused_seeds`` of them and, with ``placeable``, at most as many as some node holds
    (``placeable(k)``: k seeds' resources fit a node), in the order the requests came."""
    by_training: dict[TrialRequest, list[TrialRequest]] = {}
    for request in requests:
        by_training.setdefault(training_key(request), []).append(request)
    groups = []
    for members in by_training.values():
        k = sharding.fused_seeds(spec, members[0].shape, gpu_bytes, len(members))
        while k > 1 and placeable is not None and not placeable(k):
            k -= 1
        groups += [members[i : i + k] for i in range(0, len(members), k)]
    return groups
