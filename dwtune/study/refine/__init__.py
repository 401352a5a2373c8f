"""The refine stage: Optuna records a noise-aware search for each depth pair's transition.

For each pair of ``refine.pairs`` its design (:mod:`dwtune.core.refine.design`, chosen once per
stage) gives the first points (:func:`dwtune.core.refine.first_points.pair_start`) and an
outcome: a bracket, or a censored pair. Each pair then has its own Optuna study (named
``<Ls>-<Ld>``), all of them in one journal storage in the experiment directory,
``refine/optuna.journal`` (one JSON line per event; :mod:`dwtune.study.journal`). Each
round the pair plans its step once (:meth:`pair.PairRefiner.plan`,
:func:`dwtune.core.refine.steps.next_step`), and every point it trains is one Optuna trial:

- ``verify``: a point that decides the outcome is within noise with the seeds it has: the trial
  is enqueued at that budget and given seeds;
- ``scan``, ``bisect`` (a cut where the design places it), ``extend`` (law design): the
  :class:`~sampler.StepSampler` hands Optuna the planned step's ``log_n``.

A trial trains both depths at its budget with paired seeds (requests of stage ``refine``, one
batch per round of seeds), decides the point's sign by the one rule
(:mod:`dwtune.core.refine.outcome`), stores the point as the trial's ``point`` user attribute
and tells Optuna its |mean Δ|. So a killed stage resumes from the journal: finished trials are
replayed, a trial left running is marked failed and asked again, and its trainings are not
repeated because the runner reuses every recorded trial identity. ``transitions.parquet`` is
derived at the end, with N* and its intervals from every point
(:func:`dwtune.core.refine.estimate.estimate_crossing`).

Journal format: unchanged. Points written before the α-spending rule load (their new fields
take defaults), and every decision is recomputed from the stored Δ under the current rule, so
such a journal resumes without retraining a finished trial.

Modules: :mod:`.stage` (the stage and its waves), :mod:`.pair` (one pair's loop),
:mod:`.early_calls` (its early decisions), :mod:`.sampler` (the Optuna seam), :mod:`.attrs`
(what the journal, the board and the console say).
"""

from dwtune.study.journal import (
    POINT_ATTR,
    Journals,
    journal_path,
    open_study,
    study_path,
    trial_points,
)
from dwtune.study.refine.attrs import OBJECTIVE, describe
from dwtune.study.refine.pair import PairRefiner
from dwtune.study.refine.sampler import LOG_N, StepSampler
from dwtune.study.refine.stage import (
    RefineStage,
    RunTrials,
    observations,
    pair_starts,
    refine_in_process,
    run_refine,
)

__all__ = [
    "LOG_N",
    "OBJECTIVE",
    "POINT_ATTR",
    "Journals",
    "PairRefiner",
    "RefineStage",
    "RunTrials",
    "StepSampler",
    "describe",
    "journal_path",
    "observations",
    "open_study",
    "pair_starts",
    "refine_in_process",
    "run_refine",
    "study_path",
    "trial_points",
]
