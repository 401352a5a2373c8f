"""The Optuna seam of a pair's study: its one parameter and the sampler that hands Optuna the
size of the step the pair planned."""

from __future__ import annotations

import math

import optuna
from optuna.trial import TrialState

from dwtune.core.refine.steps import (
    Step,
)
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import (
    StepKind,
)

LOG_N = "log_n"  # the one Optuna parameter: ln of the budget to train both depths at


KIND_ATTR = "kind"  # verify | bisect


PROPOSED = (StepKind.CUT, StepKind.SCAN, StepKind.EXTEND)  # sizes the sampler proposes


def cut_rounds(study: optuna.Study) -> int:
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sum(t.user_attrs.get(KIND_ATTR) == StepKind.CUT for t in finished)


def budget_span(spec: ExperimentSpec) -> tuple[float, float]:
    """ln of space.budgets' least and greatest: where the law design's extensions stop."""
    return math.log(min(spec.space.budgets)), math.log(max(spec.space.budgets))


class StepSampler(optuna.samplers.BaseSampler):
    """Hands Optuna the size of the step its pair planned: a scan, bisect or extend step's
    ``log_n`` (:func:`dwtune.core.refine.steps.next_step`). The pair plans each step once,
    from its points as they stand, and sets it here before it asks for the trial; the sampler
    decides nothing itself. (A verify step's size is enqueued: Optuna asks no sampler.)"""

    def __init__(self) -> None:
        self.planned: Step | None = None

    def infer_relative_search_space(self, study, trial) -> dict:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution) -> float:
        step = self.planned
        if param_name != LOG_N or step is None or step.kind not in PROPOSED:
            kind = step.kind if step is not None else "none planned"
            raise RuntimeError(f"no planned size for {param_name} ({kind})")
        return step.log_n
