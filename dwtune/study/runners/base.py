"""The runner contract every runner implements, and the one trial-reuse policy they share."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from dwtune.core.records import TrialRecord, TrialRequest
from dwtune.core.vocabulary import TrialStatus
from dwtune.storage.store import ExperimentStore


@runtime_checkable
class TrialRunner(Protocol):
    """Trains batches of requests. ``run`` returns one record per request, in order; a trial
    already recorded is reused (:func:`reusable_record`), a new one is recorded as it ends."""

    def run(self, requests: list[TrialRequest]) -> list[TrialRecord]: ...


def reusable_record(
    store: ExperimentStore, request: TrialRequest, failed_here: set[str]
) -> TrialRecord | None:
    """The recorded result of ``request`` if it is reused, else None (train it).

    A finished trial is never trained again. A failure recorded by an earlier driver is retried
    (the cause may be gone: a lost node, a full disk); one that failed under this runner is not
    retried within the same driver (a refine step asking again gets the same failure).
    """
    record = store.read_record(request.trial_id)
    if record is None:
        return None
    if record.status == TrialStatus.FAILED and request.trial_id not in failed_here:
        return None
    return record


def reusable_records(
    store: ExperimentStore, requests: list[TrialRequest], failed_here: set[str]
) -> dict[str, TrialRecord]:
    """The reused record of every request that has one (:func:`reusable_record`), by trial id."""
    return {
        r.trial_id: rec
        for r in requests
        if (rec := reusable_record(store, r, failed_here)) is not None
    }
