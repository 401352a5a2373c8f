"""One training, whatever the backend: the seam between the orchestration and the trainers.

Backends (the torch trainer, the simulated surface) implement one contract, :class:`Backend`::

    backend(spec, shape, seed, report, *, checkpoint_dir=None, resume_from=None) -> dict

``report(metrics, checkpoint_dir)`` is called at every evaluation with a dict in the metric
vocabulary (:mod:`dwtune.core.vocabulary`); ``checkpoint_dir`` is not None when the backend has just
saved its full state there (so Ray Tune can attach it to the report). ``resume_from`` is a
directory such a checkpoint was saved to. The return value is the last metrics dict, whose
``status`` is finished, early_stopped or diverged. torch is imported only for the torch backend.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.records import TrialRecord, TrialRequest, record_from_result, request_spec
from dwtune.core.spec import ExperimentSpec

Report = Callable[[dict, str | None], None]
# seed -> that seed's report, for the seeds that report at this evaluation
FusedReport = Callable[[dict[int, dict], str | None], None]


class Backend(Protocol):
    """What trains one shape: reports every evaluation, returns the last metrics dict."""

    def __call__(
        self,
        spec: ExperimentSpec,
        shape: ModelShape,
        seed: int,
        report: Report,
        *,
        checkpoint_dir: str | None = None,
        resume_from: str | None = None,
        lr: float | None = None,  # the trial's own learning rate; None = spec.train.lr
    ) -> dict: ...


class FusedBackend(Protocol):
    """What trains several seeds of one shape in one trial: every seed reports as it would
    alone (``report({seed: metrics, ...}, checkpoint_dir)``); returns seed -> last metrics."""

    def __call__(
        self,
        spec: ExperimentSpec,
        shape: ModelShape,
        seeds: Sequence[int],
        report: FusedReport,
        *,
        checkpoint_dir: str | None = None,
        resume_from: str | None = None,
        lr: float | None = None,
    ) -> dict[int, dict]: ...


def fused_backend_for(spec: ExperimentSpec) -> FusedBackend:
    """The torch trainer's fused seeds (:mod:`dwtune.backends.pytorch.fused`); the simulated
    backend trains the seeds one after another (nothing to share), with the same reports."""
    if spec.trainer == vocabulary.Trainer.SIMULATED:
        return _seeds_one_by_one
    from dwtune.backends.pytorch.fused import train_fused

    return train_fused


def _seeds_one_by_one(
    spec: ExperimentSpec,
    shape: ModelShape,
    seeds: Sequence[int],
    report: FusedReport,
    *,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
    lr: float | None = None,
) -> dict[int, dict]:
    """Each seed alone, through the spec's own backend; no checkpoint (the simulated
    backend's trainings take milliseconds)."""
    del checkpoint_dir, resume_from
    backend = backend_for(spec)
    return {
        seed: backend(spec, shape, seed, lambda m, _c, s=seed: report({s: m}, None), lr=lr)
        for seed in seeds
    }


def backend_for(spec: ExperimentSpec) -> Backend:
    if spec.trainer == vocabulary.Trainer.SIMULATED:
        from dwtune.backends.simulated import simulate_training

        return simulate_training
    from dwtune.backends.pytorch.train import train_model

    return train_model


def run_training(
    spec: ExperimentSpec,
    shape: ModelShape,
    seed: int,
    report: Report,
    *,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
    lr: float | None = None,
) -> dict:
    backend = backend_for(spec)
    return backend(
        spec, shape, seed, report, checkpoint_dir=checkpoint_dir, resume_from=resume_from, lr=lr
    )


def run_fused_inprocess(
    spec: ExperimentSpec, requests: Sequence[TrialRequest]
) -> list[TrialRecord]:
    """Train requests that differ only in their seed as one fused trial in this process; one
    record per request, in order, each as :func:`run_trial_inprocess` writes it (its wall
    time: the fused trial's)."""
    if len(requests) == 1:
        return [run_trial_inprocess(spec, requests[0])]
    first = requests[0]
    curves: dict[int, list[dict]] = {r.seed: [] for r in requests}

    def report(batch: dict[int, dict], _checkpoint: str | None) -> None:
        for seed, metrics in batch.items():
            curves[seed].append(dict(metrics))

    start = time.perf_counter()
    finals = fused_backend_for(spec)(
        request_spec(spec, first), first.shape, [r.seed for r in requests], report
    )
    wall = time.perf_counter() - start
    node = socket.gethostname()
    return [
        record_from_result(
            r,
            spec,
            curves[r.seed],
            finals[r.seed].get(vocabulary.STATUS, vocabulary.STATUS_FINISHED),
            wall,
            node=node,
        )
        for r in requests
    ]


def run_trial_inprocess(spec: ExperimentSpec, request: TrialRequest) -> TrialRecord:
    """Train one request in this process (no Ray) and summarise it as a record."""
    curve: list[dict] = []
    start = time.perf_counter()
    final = run_training(
        request_spec(spec, request),
        request.shape,
        request.seed,
        lambda m, _ckpt: curve.append(dict(m)),
    )
    return record_from_result(
        request,
        spec,
        curve,
        final.get(vocabulary.STATUS, vocabulary.STATUS_FINISHED),
        time.perf_counter() - start,
        node=socket.gethostname(),
    )
