"""Successive halving of a learning-rate search's rates, within each cell (depth, width)."""

from __future__ import annotations

from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler

from dwtune.core import vocabulary
from dwtune.core.records import TrialRequest
from dwtune.core.spec import ExperimentSpec

ASHA_REDUCTION_FACTOR = 2  # each rung keeps the better half of a cell's rates


class CellASHA(FIFOScheduler):
    """ASHA (asynchronous successive halving) within each cell of an lr-search batch.

    One Tune run trains the search trials of many cells at once; comparing a narrow net's loss
    with a wide one's would stop the wrong rates, so each cell (depth, width) gets its own
    :class:`~ray.tune.schedulers.AsyncHyperBandScheduler` on ``val/loss`` against ``step``:
    rungs from one evaluation interval up to the search steps, halving at each rung. A rate's
    last report at the full search steps is never stopped (``stop_last_trials=False``), so
    finished trials keep their final report.
    """

    def __init__(self, requests: list[TrialRequest], spec: ExperimentSpec):
        super().__init__()
        self._cell = {r.trial_id: (r.shape.depth, r.shape.width) for r in requests}
        self._steps = {r.trial_id: r.search_steps or 1 for r in requests}
        self._grace = spec.train.eval_every
        self._by_cell: dict[tuple[int, int], AsyncHyperBandScheduler] = {}

    def _for(self, trial) -> AsyncHyperBandScheduler:
        trial_id = trial.config["trial_id"]
        cell = self._cell[trial_id]
        if cell not in self._by_cell:
            max_t = self._steps[trial_id]
            self._by_cell[cell] = AsyncHyperBandScheduler(
                time_attr=vocabulary.STEP,
                metric=vocabulary.VAL_LOSS,
                mode="min",
                max_t=max_t,
                grace_period=min(self._grace, max_t),
                reduction_factor=ASHA_REDUCTION_FACTOR,
                stop_last_trials=False,
            )
        return self._by_cell[cell]

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True  # the metric is fixed: val/loss, minimised

    def on_trial_add(self, tune_controller, trial) -> None:
        self._for(trial).on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        self._for(trial).on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        return self._for(trial).on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        self._for(trial).on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self._for(trial).on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        return f"ASHA per cell ({len(self._by_cell)} cells)"
