"""The refiner's early-decision context (refine.early_stop), in process (no Ray): the pair's
noise is computed once per state of the pair's points, however often a training reports."""

import math

import numpy as np

from dwtune.core import crossing, pair_points, transitions
from dwtune.study import refine as refine_stage
from dwtune.study.runners.local import LocalRunner
from tests.study.test_refine import grid_done, make_spec

REPORTS = 40  # eval reports of one training: each asks the context once


def early_spec():
    return make_spec(
        space={"seeds": 2},  # the grid gives the pair's noise degrees of freedom
        refine={"early_stop": True, "scan_spacing": 0, "seeds": 2},
        simulated={"noise": 0.003},
    )


def counting(monkeypatch) -> list[int]:
    """Counts calls of crossing.pair_noise (the real one still answers)."""
    calls, real = [], crossing.pair_noise

    def pair_noise(points, prior):
        calls.append(len(points))
        return real(points, prior)

    monkeypatch.setattr(crossing, "pair_noise", pair_noise)
    return calls


def expected_context(refiner, request) -> tuple[float, float]:
    """(sd, dof) nearest the request's deeper net, from every merged point of the pair now."""
    points = pair_points.mark_unstable(
        pair_points.merge_points(refiner.grid.points, refine_stage.trial_points(refiner.study))
    )
    noise = crossing.pair_noise(
        [p.delta_point() for p in points], transitions.noise_prior(refiner.refine)
    )
    cell = refiner.spec.cell(refiner.pair[1], request.cell.budget)
    x_deep = math.log(cell.params_non_embedding)
    nearest = int(np.argmin([abs(p.log_n - x_deep) for p in points]))
    return float(noise.sd[nearest]), float(noise.dof[nearest])


def told(refiner) -> int:
    return len(refine_stage.trial_points(refiner.study))


def test_a_points_trainings_compute_the_pairs_noise_once_per_state_of_its_points(
    tmp_path, monkeypatch
):
    spec = early_spec()
    store = grid_done(tmp_path, spec)
    [refiner] = refine_stage.RefineStage(spec, store).refiners
    rounds, run = refiner.rounds(), LocalRunner(spec, store).run
    batch = next(rounds)
    calls = counting(monkeypatch)
    contexts = {r.trial_id: {refiner.early_context(r) for _ in range(REPORTS)} for r in batch}
    assert len(calls) == 1, "every report of the batch's trainings after the first is cached"
    assert all(len(seen) == 1 for seen in contexts.values())
    for request in batch:
        [context] = contexts[request.trial_id]
        assert (context.sd, context.dof) == expected_context(refiner, request)
        assert math.isfinite(context.sd) and context.sd > 0

    before = told(refiner)
    while told(refiner) == before:  # train until the pair tells its next point
        batch = rounds.send(run(batch))
    calls.clear()
    context = refiner.early_context(batch[0])
    refiner.early_context(batch[-1])
    assert len(calls) == 1, "a told point changes the pair's noise: computed again, once"
    assert (context.sd, context.dof) == expected_context(refiner, batch[0])
