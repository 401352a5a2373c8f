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
from collections.abc import Callable
from typing import Protocol

from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.records import TrialRecord, TrialRequest, record_from_result, request_spec
from dwtune.core.spec import ExperimentSpec

Report = Callable[[dict, str | None], None]


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
