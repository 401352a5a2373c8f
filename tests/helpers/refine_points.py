"""Refine-stage points and grid records built by hand, for the pure tests of transitions and
decisions."""

from __future__ import annotations

import math
from types import SimpleNamespace

from dwtune.core.records import TrialRecord
from dwtune.core.refine import steps
from dwtune.core.refine.design import RefineDesign, design_for
from dwtune.core.refine.points import Decision, PairPoint
from dwtune.core.spec import RefineConfig

REFINE = RefineConfig(pairs=((6, 12),), tolerance=0.05, seeds=1, max_seeds=4, max_rounds=8)


def point(
    log_n: float,
    mean: float,
    *,
    decided: bool = True,
    n: int = 1,
    kind: str = "grid",
    se: float = 0.001,
    verified: bool = True,
) -> PairPoint:
    return PairPoint(
        budget=math.exp(log_n),
        log_n=log_n,
        width_deep=int(100 * log_n),
        width_shallow=int(120 * log_n),
        seeds=tuple(range(n)),
        deltas=(mean,) * n,
        decision=Decision(mean, se, 0.002, decided),
        kind=kind,
        requested=n,
        verified=verified,
    )


def record(
    depth: int,
    budget: float,
    params: int,
    seed: int,
    loss: float,
    *,
    total: int | None = None,
    status: str = "finished",
) -> TrialRecord:
    return TrialRecord(
        trial_id=f"{depth}-{budget}-{seed}",
        stage="grid",
        depth=depth,
        width=int(math.sqrt(params / (12 * depth))),
        heads=2,
        budget=budget,
        params_non_embedding=params,
        params_total=params if total is None else total,
        seed=seed,
        status=status,
        best_val_loss=loss,
    )


def steps_design(refine: RefineConfig) -> RefineDesign:
    """The design ``refine.design`` names, for its steps alone (its first sizes need a spec)."""
    return design_for(SimpleNamespace(refine=refine))  # type: ignore[arg-type]


def next_step(points, refine: RefineConfig, rounds: int, width_of=None, span=None) -> steps.Step:
    """:func:`dwtune.core.refine.steps.next_step` with the design ``refine`` names."""
    return steps.next_step(points, refine, rounds, width_of, span, design=steps_design(refine))
