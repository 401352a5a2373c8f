"""Ray Tune's own tracker callbacks, each trial's run named and grouped by dwtune.

Tune's ``WandbLoggerCallback`` gives every trial of a Tune run one group (the run's name, or
the one ``group`` it was given), so it cannot group a cell's seeds together (ray#33084);
:class:`CellWandbCallback` sets each trial's group, job type, tags and config from its request
(:func:`dwtune.study.trackers.run_group`) before Tune's callback starts the trial's run.
:class:`CellMLflowCallback` does the same with MLflow tags, and logs the request's parameters
instead of the Tune config (a feed trial's config holds the request object itself).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback

from dwtune.core.errors import InputError
from dwtune.core.records import TrialRequest
from dwtune.study.trackers import MLFLOW, WANDB, Trackers, run_config, run_group, run_tags

RequestOf = Callable[[object], TrialRequest]
# Tune's result keys that are bookkeeping, not metrics of the training
EXCLUDED = ["trial_id", "config", "experiment_tag", "node_ip", "hostname", "pid", "date"]


class CellWandbCallback(WandbLoggerCallback):
    """Tune's W&B callback, each trial's run grouped by its cell (``<stage>[/<pair>]/<cell>``)
    and written under ``dir`` (Tune's default, the trial's folder, is removed after a batch)."""

    def __init__(self, request_of: RequestOf, **kwargs):
        super().__init__(**kwargs)
        self.request_of = request_of
        self.common = dict(self.kwargs)

    def log_trial_start(self, trial) -> None:
        request = self.request_of(trial)
        # Tune merges self.kwargs into the trial's wandb.init arguments last
        self.kwargs = {
            **self.common,
            "name": request.name,
            "group": run_group(request),
            "job_type": request.stage,
            "tags": [tag for tag in (request.stage, request.pair) if tag],
            "config": run_config(request),
        }
        super().log_trial_start(trial)


class CellMLflowCallback(MLflowLoggerCallback):
    """Tune's MLflow callback, each trial's run tagged with its group, stage, pair and cell."""

    def __init__(self, request_of: RequestOf, **kwargs):
        super().__init__(**kwargs)
        self.request_of = request_of

    def log_trial_start(self, trial) -> None:
        if trial in self._trial_runs:  # a retried trial keeps its run
            return
        request = self.request_of(trial)
        tags = {**self.tags, **run_tags(request), "trial_name": request.name}
        run = self.mlflow_util.start_run(tags=tags, run_name=request.name)
        self._trial_runs[trial] = run.info.run_id
        self.mlflow_util.log_params(run_id=run.info.run_id, params_to_log=run_config(request))

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        metrics = {k: v for k, v in result.items() if k not in EXCLUDED}
        super().log_trial_result(iteration, trial, metrics)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        if trial in self._trial_runs:
            super().log_trial_end(trial, failed)


def tracker_callbacks(trackers: Trackers | None, request_of: RequestOf) -> list:
    """The Tune callbacks of ``trackers`` (set up here: a missing W&B key is one line)."""
    if trackers is None:
        return []
    callbacks: list = []
    if WANDB in trackers.names:
        mode = os.environ.get("WANDB_MODE")
        callback = CellWandbCallback(
            request_of,
            project=trackers.project,
            excludes=EXCLUDED,
            dir=trackers.wandb_dir,
            **({"mode": mode} if mode else {}),  # the logging actors' processes
        )
        try:
            callback.setup()
        except ValueError as exc:
            raise InputError(
                f"--log-to wandb: {str(exc).splitlines()[0]}; or set WANDB_MODE=offline to "
                f"write runs to files only (`wandb sync` uploads them later)"
            ) from None
        callbacks.append(callback)
    if MLFLOW in trackers.names:
        trackers.file_store()
        callbacks.append(
            CellMLflowCallback(
                request_of, tracking_uri=trackers.mlflow_uri, experiment_name=trackers.project
            )
        )
    return callbacks
