"""The refiner's early decisions (refine.early_stop), in process (no Ray): the pair's noise is
computed once per state of the pair's points, however often a training reports; a point
re-verified at a size whose first batch was stopped keeps that batch's call and decides by the
end-of-training rule over its seeds trained to the end."""

import contextlib
import dataclasses
import math

import numpy as np
import pytest

from dwtune.core import vocabulary
from dwtune.core.refine.early import (
    EarlyRule,
    PointLook,
    may_stop,
    point_call,
    run_evals,
    seed_end_estimates,
)
from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.points import PairPoint, make_point, mark_unstable, merge_points
from dwtune.core.refine.signs import noise_prior, pair_noise, point_signs, sign_rule
from dwtune.core.refine.steps import Step, reverify_seeds
from dwtune.core.vocabulary import StepKind
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
    """Counts calls of pair_noise (the real one still answers)."""
    calls, real = [], pair_noise

    def counted(points, prior):
        calls.append(len(points))
        return real(points, prior)

    monkeypatch.setattr("dwtune.core.refine.signs.pair_noise", counted)
    return calls


def expected_context(refiner, request) -> tuple[float, float]:
    """(sd, dof) nearest the request's deeper net, from every merged point of the pair now."""
    points = mark_unstable(
        merge_points(refiner.start.points, refine_stage.trial_points(refiner.study))
    )
    noise = pair_noise([p.delta_point() for p in points], noise_prior(refiner.refine))
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
    """Tells ``point`` to the pair's journal as the refine stage does (enqueued at its size,
    as a verify trial is: the sampler proposes only bisection points)."""
    refiner.study.enqueue_trial({refine_stage.LOG_N: math.log(point.budget)})
    trial = refiner.study.ask()
    trial.suggest_float(refine_stage.LOG_N, *refiner._range())
    trial.set_user_attr(refine_stage.POINT_ATTR, point.to_dict())
    refiner.study.tell(trial, 0.0)


@dataclasses.dataclass(frozen=True)
class SettledSize:
    """A size whose first batch (the pair's first two seeds) the early rule settled and told,
    and the records of four seeds there (the batch's stopped): what a verify point reuses."""

    refiner: refine_stage.PairRefiner
    budget: float
    sizes: tuple[float, int, int]
    records: dict
    batch: tuple[int, ...]
    own: dict[int, float]  # each seed's Δ from its records (the batch's: partial losses)
    settled: PairPoint  # the told point of the batch, its Δ the call's estimates


def settled_size(tmp_path) -> SettledSize:
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
    full = make_point(
        budget, sizes, {s: d for s, (d, _) in records.items()},
        {s: h for s, (_, h) in records.items()}, refiner.start.trend, "verify", 4,
    )  # fmt: skip
    own = dict(zip(full.seeds, full.deltas, strict=True))
    ends = (own[batch[0]] + 0.05, own[batch[1]] - 0.04)  # the told call's end estimates
    first = make_point(
        budget, sizes, {s: records[s][0] for s in batch}, {s: records[s][1] for s in batch},
        refiner.start.trend, "bisect", 2,
    )  # fmt: skip
    settled = dataclasses.replace(first, deltas=ends, losses=(), early_sign=+1)
    _tell(refiner, settled)
    return SettledSize(refiner, budget, sizes, records, tuple(batch), own, settled)


def test_a_verify_point_at_a_settled_size_keeps_its_new_seeds_end_deltas(tmp_path):
    """A verify point reuses the stopped batch of the point the early rule settled at its size
    (one identity, one record): the batch's Δ are the end estimates that call gave (as told),
    the new seeds' Δ their own end-of-training Δ, and the one sign rule decides the point; no
    call on every seed at the first stop, which the scheduler never made."""
    size = settled_size(tmp_path)
    refiner, budget, sizes, records = size.refiner, size.budget, size.sizes, size.records
    batch, own, ends = size.batch, size.own, size.settled.deltas

    point = refiner._point(budget, sizes, records, "verify", 4, True)

    assert point.seeds == tuple(sorted(own))
    got = dict(zip(point.seeds, point.deltas, strict=True))
    assert [got[s] for s in batch] == list(ends)
    for seed in refiner.seed_order[2:4]:
        assert got[seed] == own[seed], "a seed trained to the end keeps its own Δ"
    assert point.early_sign == 0
    merged = merge_points(refiner.start.points, [*refine_stage.trial_points(refiner.study), point])
    [expected] = [p for p in decide_points(merged, refiner.refine) if p.budget == budget]
    assert point.decision == expected.decision  # the end-of-training rule, over all four


def test_the_batch_is_the_settled_points_even_after_an_early_signed_verify_point(tmp_path):
    """A journal written while a verify point still took the early sign holds, after the point
    that settled the size, a verify point there with an early sign over every seed and
    extrapolated Δ for the seeds trained to the end. A later point at that size takes the
    batch and its call from the first of them, the point that settled it."""
    size = settled_size(tmp_path)
    extrapolated = {seed: size.own[seed] - 0.07 for seed in size.records if seed not in size.batch}
    old_verify = dataclasses.replace(
        size.settled,
        kind="verify",
        requested=4,
        seeds=(*size.settled.seeds, *sorted(extrapolated)),
        deltas=(*size.settled.deltas, *(extrapolated[s] for s in sorted(extrapolated))),
        verified=True,
    )
    _tell(size.refiner, old_verify)

    point = size.refiner._point(size.budget, size.sizes, size.records, "verify", 4, True)

    got = dict(zip(point.seeds, point.deltas, strict=True))
    assert [got[s] for s in size.batch] == list(size.settled.deltas)
    for seed in extrapolated:
        assert got[seed] == size.own[seed], "a seed trained to the end keeps its own Δ"
    assert point.early_sign == 0


# ------------------------------------------- a re-verified point whose first batch was stopped

REVERIFY_BUDGETS = {"min": 1e6, "max": 1e10, "num": 5}  # the first bisection point: 3.2e7


def stopping_spec():
    return make_spec(
        space={"seeds": 2, "budgets": REVERIFY_BUDGETS},
        train={"steps": 1000, "eval_every": 25},  # evals along the run: looks for the rule
        refine={"early_stop": True, "scan_spacing": 0, "seeds": 2, "max_seeds": 4},
        simulated={"noise": 0.002, "curve": "late_descent"},
    )


def stopped_at(record, step: int):
    """The record of a training stopped at ``step``: its curve, losses and steps up to it."""
    curve = [r for r in record.curve if r[vocabulary.STEP] <= step]
    val = [r[vocabulary.VAL_LOSS] for r in curve if vocabulary.VAL_LOSS in r]
    return dataclasses.replace(
        record,
        curve=curve,
        steps=step,
        stopped_step=step,
        status=vocabulary.STATUS_EARLY_STOPPED,
        final_val_loss=val[-1],
        best_val_loss=min(val),
    )


@dataclasses.dataclass(frozen=True)
class Stop:
    """A batch stopped early: the step, the rule's look there, its requests and records."""

    step: int
    look: PointLook
    requests: list
    records: list


class StoppingRunner(LocalRunner):
    """Trains in process and stops the first batch of a new size's point where the early rule
    settles it, as the Tune scheduler does (the same call, with the refiner's context, at the
    first look that settles it); the stopped records replace the trained ones in the store, so
    a later point at that size reuses them, as under Tune."""

    def __init__(self, spec, store, context):
        super().__init__(spec, store)
        self.context = context
        self.rule = EarlyRule(spec.refine.alpha, spec.refine.early_min_fraction)
        self.stops: list[Stop] = []
        self._watched: set[tuple[str, int]] = set()

    def run(self, requests):
        records = super().run(requests)
        key = (requests[0].pair, requests[0].round)
        if not may_stop(requests[0]) or key in self._watched:
            return records  # a verify point, or seeds added to a point: trained to the end
        self._watched.add(key)
        settled = self._first_settled(requests, records)
        if settled is None:
            return records
        stopped = [stopped_at(record, settled.steps[-1]) for record in records]
        for record in stopped:
            self.store.write_record(record)
        self.stops.append(Stop(settled.steps[-1], settled, requests, stopped))
        return stopped

    def _first_settled(self, requests, records) -> PointLook | None:
        evals = run_evals(self.spec, requests[0])
        deep, shallow = [r.curve for r in records[0::2]], [r.curve for r in records[1::2]]
        for step in self.rule.look_steps(evals, evals[-1]):
            context = self.context(requests[0])
            look = point_call(self.rule, deep, shallow, step, evals, context)
            if look is not None and look.call.settled:
                return look
        return None


def train_round(rounds, runner) -> None:
    """Train every batch of one refiner round until it is told."""
    with contextlib.suppress(StopIteration):
        batch = next(rounds)
        while True:
            batch = rounds.send(runner.run(batch))


def end_of_training_sign(refiner, budget: float) -> tuple[float, bool]:
    """(mean Δ, decided) of the pair's point at ``budget`` by the end-of-training rule alone
    (point_signs over the pair's points as the journal holds them)."""
    points = mark_unstable(
        merge_points(refiner.start.points, refine_stage.trial_points(refiner.study))
    )
    measured = [p.delta_point() for p in points]
    noise = pair_noise(measured, noise_prior(refiner.refine))
    signs = point_signs(measured, noise, sign_rule(refiner.refine))
    i = next(i for i, p in enumerate(points) if p.budget == budget)
    return float(signs.means[i]), bool(signs.signs[i] != 0)


def spying(monkeypatch) -> list[tuple[int, PointLook | None]]:
    """(seeds called on, the look returned) of every point_call, in order."""
    calls, real = [], point_call

    def spied(rule, deep, shallow, *rest):
        calls.append((len(deep), real(rule, deep, shallow, *rest)))
        return calls[-1][1]

    monkeypatch.setattr("dwtune.core.refine.early.point_call", spied)
    return calls


def test_a_reverified_early_point_keeps_its_batchs_call_and_its_new_seeds_end_deltas(
    tmp_path, monkeypatch
):
    spec = stopping_spec()
    store = grid_done(tmp_path, spec)
    [refiner] = refine_stage.RefineStage(spec, store).refiners
    runner = StoppingRunner(spec, store, refiner.early_context)
    calls = spying(monkeypatch)
    step = refiner.plan()
    assert step.kind == StepKind.CUT
    train_round(refiner._round(step), runner)
    [stop] = runner.stops
    [first] = refine_stage.trial_points(refiner.study)
    batch = tuple(sorted({r.seed for r in stop.requests}))
    ends = seed_end_estimates(stop.look.steps, stop.look.deltas, 1000)
    # (d) the refiner makes the scheduler's call again for the first point, from its records
    refiners_look = calls[-1][1]
    assert refiners_look is not None and refiners_look.call == stop.look.call
    assert first.seeds == batch and first.early_sign == stop.look.call.sign != 0
    assert first.deltas == pytest.approx(ends, rel=1e-12)

    seeds = reverify_seeds(first, spec.refine.max_seeds)
    verify = Step(
        StepKind.VERIFY, step.outcome, point=first, seeds=seeds, reason=vocabulary.REVERIFY
    )
    trained, calls[:] = (len(runner.stops), runner.trained), []
    train_round(refiner._round(verify), runner)
    assert len(runner.stops) == trained[0], "a verify point's trainings run to their end"
    assert runner.trained == trained[1] + 2 * (seeds - len(batch)), "the batch is reused"
    assert all(n == len(batch) for n, _ in calls), "no early call beyond the stopped batch"
    again, second = refine_stage.trial_points(refiner.study)
    assert again == first, "the first point's early call is unchanged"
    assert second.kind == StepKind.VERIFY and len(second.seeds) == seeds > len(batch)

    by_seed = dict(zip(second.seeds, second.deltas, strict=True))
    # (b) the batch keeps the end estimates of the call on the batch alone, at its stop
    assert [by_seed[s] for s in batch] == pytest.approx(ends, rel=1e-12)
    # (a) every added seed keeps its own end-of-training Δ, at equal N
    correction = refiner.early_context(stop.requests[0]).correction
    for seed in set(second.seeds) - set(batch):
        deep, shallow = (
            store.read_record(refiner._request(cell, seed).trial_id)
            for cell in (spec.cell(12, second.budget), spec.cell(6, second.budget))
        )
        assert deep.stopped_step == shallow.stopped_step == 0
        assert by_seed[seed] == pytest.approx(
            deep.best_val_loss - shallow.best_val_loss - correction, rel=1e-9
        )
    # (c) its sign is the end-of-training rule's over all its Δ, not an early one
    assert second.early_sign == 0
    mean, decided = end_of_training_sign(refiner, second.budget)
    assert second.decision.mean == pytest.approx(mean) == pytest.approx(np.mean(second.deltas))
    assert second.decision.decided == decided
