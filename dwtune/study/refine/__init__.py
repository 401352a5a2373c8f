"""The refine stage: Optuna drives a noise-aware bisection of each depth pair's transition.

For each pair of ``refine.pairs`` the grid gives the first points
(:func:`dwtune.core.transitions.grid_pair`)
and an outcome: a bracket, or a censored pair. Each pair then has its own Optuna study, stored
in the experiment directory as ``refine/<Ls>-<Ld>.journal`` (journal storage, one JSON line per
event). Every point trained by the refine stage is one Optuna trial:

- ``verify``: a point that decides the outcome (a bracket end, or a censored pair's edge) is
  within noise with the seeds it has: the trial is enqueued at that budget and given seeds;
- ``bisect``: :class:`BisectionSampler` proposes ``log_n``, the midpoint in ln N of the current
  bracket (``refine.design: law``: the interpolated root of Δ, :mod:`dwtune.core.design`),
  computed from the grid points and the study's finished trials alone;
- ``extend`` (law design): a censored pair's next size beyond its decided edge.

A trial trains both depths at its budget with paired seeds (``spec.cell`` shapes, requests of
stage ``refine``, one ``run_trials`` batch per round of seeds), runs the sequential sign test
of :mod:`dwtune.core.transitions`, stores the point as the trial's ``point`` user attribute and
tells Optuna its mean Δ. So a killed stage resumes from the journal: finished trials are
replayed, a trial left running is marked failed and asked again, and its trainings are not
repeated because the runner reuses every recorded trial identity. ``transitions.parquet`` is
derived at the end, with N* and its intervals from every point
(:func:`dwtune.core.crossing.estimate_crossing`).

Journal format: unchanged. Points written before the α-spending rule load (their new fields
take defaults: no failures, not re-verified), and every decision is recomputed from the stored
Δ under the current rule, so such a journal resumes without retraining a finished trial; its
decisive points may then be re-verified, which trains only the added seeds.
"""

from dwtune.study.journal import POINT_ATTR, open_study, study_path, trial_points
from dwtune.study.refine.attrs import OBJECTIVE, describe
from dwtune.study.refine.pair import PairRefiner
from dwtune.study.refine.sampler import LOG_N, StepSampler
from dwtune.study.refine.stage import (
    RefineStage,
    RunTrials,
    grid_pairs,
    observations,
    refine_in_process,
    run_refine,
)

__all__ = [
    "LOG_N",
    "OBJECTIVE",
    "POINT_ATTR",
    "PairRefiner",
    "RefineStage",
    "RunTrials",
    "StepSampler",
    "describe",
    "grid_pairs",
    "observations",
    "open_study",
    "refine_in_process",
    "run_refine",
    "study_path",
    "trial_points",
]
