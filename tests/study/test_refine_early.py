"""The refiner's early-decision context (refine.early_stop), in process (no Ray): the pair's
noise is computed once per state of the pair's points, however often a training reports."""

import math

import numpy as np

from dwtune.core import crossing, pair_points, transitions
from dwtune.study import refine as refine_stage
from dwtune.study.runners.local import LocalRunner
from tests.helpers.refine_study import grid_done, make_spec

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


def _records_at(refiner, budget: float, seeds: int):
    """Both depths' records at ``budget`` for the pair's first ``seeds`` seeds, trained in
    process; and the point's sizes, as the refiner computes them."""
    cells = (refiner.spec.cell(refiner.pair[1], budget), refiner.spec.cell(refiner.pair[0], budget))
    order = refiner.seed_order[:seeds]
    requests = [refiner._request(cell, seed) for seed in order for cell in cells]
    done = LocalRunner(refiner.spec, refiner.store).run(requests)
    records = {seed: (done[2 * i], done[2 * i + 1]) for i, seed in enumerate(order)}
    size = cells[0].params_non_embedding
    return records, (math.log(size), cells[0].shape.width, cells[1].shape.width)


def _tell(refiner, point) -> None:
    """Tells ``point`` to the pair's journal as the refine stage does."""
    trial = refiner.study.ask()
    trial.suggest_float(refine_stage.LOG_N, *refiner._range())
    trial.set_user_attr(refine_stage.POINT_ATTR, point.to_dict())
    refiner.study.tell(trial, 0.0)


def test_a_verify_point_at_a_settled_size_keeps_its_new_seeds_end_deltas(tmp_path):
    """A verify point reuses the stopped batch of the point the early rule settled at its size
    (one identity, one record): the batch's Δ are the end estimates that call gave (as told),
    the new seeds' Δ their own end-of-training Δ, and the one sign rule decides the point; no
    call on every seed at the first stop, which the scheduler never made."""
    import dataclasses

    spec = early_spec()
    store = grid_done(tmp_path, spec)
    [refiner] = refine_stage.RefineStage(spec, store).refiners
    budget = 3e7  # inside the grid's range, no grid budget
    records, sizes = _records_at(refiner, budget, 4)
    stop = 100  # the first batch (seeds of the first two) stopped early there
    for seed in refiner.seed_order[:2]:
        records[seed] = tuple(
            dataclasses.replace(r, status="early_stopped", stopped_step=stop) for r in records[seed]
        )
    batch = refiner.seed_order[:2]
    full = pair_points.make_point(
        budget, sizes, {s: d for s, (d, _) in records.items()},
        {s: h for s, (_, h) in records.items()}, refiner.grid.trend, "verify", 4,
    )  # fmt: skip
    own = dict(zip(full.seeds, full.deltas, strict=True))
    ends = (own[batch[0]] + 0.05, own[batch[1]] - 0.04)  # the told call's end estimates
    first = pair_points.make_point(
        budget, sizes, {s: records[s][0] for s in batch}, {s: records[s][1] for s in batch},
        refiner.grid.trend, "bisect", 2,
    )  # fmt: skip
    settled = dataclasses.replace(first, deltas=ends, losses=(), early_sign=+1)
    _tell(refiner, settled)

    point = refiner._point(budget, sizes, records, "verify", 4, True)

    assert point.seeds == tuple(sorted(own))
    got = dict(zip(point.seeds, point.deltas, strict=True))
    assert [got[s] for s in batch] == list(ends)
    for seed in refiner.seed_order[2:4]:
        assert got[seed] == own[seed], "a seed trained to the end keeps its own Δ"
    assert point.early_sign == 0
    merged = pair_points.merge_points(
        refiner.grid.points, [*refine_stage.trial_points(refiner.study), point]
    )
    [expected] = [
        p for p in transitions.decide_points(merged, refiner.refine) if p.budget == budget
    ]
    assert point.decision == expected.decision  # the end-of-training rule, over all four
