"""The cost estimate: what the refine stage will train, estimated before anything trains.

The refine decision (bisection, extra seeds where Δ is within noise) runs in this process on
the SIMULATED backend with the spec's own space, refine and simulated settings (the planted
law defaults to Levine et al.'s), through the in-process runner in a scratch experiment
folder, the pairs' Optuna studies in memory (:class:`~dwtune.study.journal.ScratchJournals`:
no journal written, nothing published). The trainings it requests, round by round, are the
estimate: the shapes are the ones the real study would train if its transitions sat where the
simulated surface puts them.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field

from dwtune.core.records import TrialRequest, grid_requests
from dwtune.core.refine.transition import Transition
from dwtune.core.spec import ExperimentSpec, TrainConfig
from dwtune.core.vocabulary import Trainer
from dwtune.storage.store import ExperimentStore
from dwtune.study.journal import ScratchJournals
from dwtune.study.refine import run_refine
from dwtune.study.runners.local import LocalRunner


def simulated_twin(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec on the simulated backend, two evaluations per training (the loss surface
    does not depend on the training length)."""
    train = TrainConfig(steps=2, batch_size=spec.train.batch_size, eval_every=1, warmup_steps=0)
    return dataclasses.replace(spec, trainer=Trainer.SIMULATED.value, train=train)


@dataclass(frozen=True)
class RefineEstimate:
    """The simulated twin's refine stage: its new trainings per round and its transitions."""

    rounds: list[list[TrialRequest]] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)


def refine_estimate(spec: ExperimentSpec) -> RefineEstimate:
    """The refine stage of the spec's simulated twin (module doc)."""
    if not spec.refine.pairs:
        return RefineEstimate()
    twin = simulated_twin(spec)
    grid_ids = {r.trial_id for r in grid_requests(twin)}
    rounds: list[list[TrialRequest]] = []
    with tempfile.TemporaryDirectory(prefix="dwtune-estimate-") as scratch:
        store = ExperimentStore.for_spec(scratch, twin)
        store.initialise(twin)
        runner = LocalRunner(twin, store)
        runner.run(grid_requests(twin))

        def recording(requests: list[TrialRequest]):
            fresh = [r for r in requests if r.trial_id not in grid_ids]
            seen = {r.trial_id for batch in rounds for r in batch}
            rounds.append([r for r in fresh if r.trial_id not in seen])
            return runner.run(requests)

        found = run_refine(twin, store, recording, journals=ScratchJournals(store))
    return RefineEstimate([batch for batch in rounds if batch], found)
