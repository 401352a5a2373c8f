"""Trials on Ray Tune: the only module of dwtune that imports ray.

:class:`TuneRunner` starts Ray (a local instance sized to the machine, or joins a cluster),
checks that some node can hold one trial, and runs batches of trial requests as Ray Tune runs.
dwtune's own experiment store stays the source of truth (``Tuner.restore`` cannot add trials):
a Tune callback on the driver writes each trial's record the moment it finishes, so a killed
driver loses nothing finished and a rerun trains only what is missing. Every call of
:meth:`TuneRunner.run` is a fresh Tune experiment under ``<experiment>/ray/<stage>-<n>``, so the
refine stage can call it again and again while Ray stays up; once its trials are recorded the
run folder is removed (Ray's tools could not restore it, and dwtune never needs to).

Inside a trial the trainer's ``report(metrics, checkpoint_dir)`` becomes
``ray.tune.report(metrics)``, its checkpoint kept under ``<experiment>/train/<trial_id>``
(:mod:`.checkpoints`; a sharded trial's Ray Train run lives there): an attempt retried on any
node, or the trial started again by a new driver after the old one was stopped, resumes from
it, and its record says from which step (``resumed_from_step``).

The package itself imports nothing heavy: a Tune trial's worker process imports
:mod:`.trial` (and so this package) to run :func:`~.trial.trial_main`, and every module
imported here would be imported again by the worker of every trial of every batch. The runner
lives in :mod:`.runner`; ``TuneRunner`` is re-exported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dwtune.study.runners.ray_tune.runner import TuneRunner

__all__ = ["TuneRunner"]


def __getattr__(name: str):
    if name == "TuneRunner":
        from dwtune.study.runners.ray_tune.runner import TuneRunner

        return TuneRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
