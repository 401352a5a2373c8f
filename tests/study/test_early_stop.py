"""refine.early_stop in a real Tune run: a pair point's trainings stop once the early rule
settles their sign, the stop is recorded, the point takes the rule's sign, a rerun resumes."""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from ray.tune.schedulers import TrialScheduler

from dwtune.backends.simulated import pair_delta_mean
from dwtune.core import vocabulary
from dwtune.core.records import grid_requests
from dwtune.core.refine.early import EarlyRule, PointNoise, point_call, run_evals
from dwtune.core.spec import load_spec
from dwtune.storage.experiment import export_experiment
from dwtune.storage.store import ExperimentStore
from dwtune.study.journal import open_study, trial_points
from dwtune.study.progress import StudyProgress
from dwtune.study.refine import RefineStage
from dwtune.study.runners.local import LocalRunner
from dwtune.study.runners.ray_tune import TuneRunner
from dwtune.study.runners.ray_tune.early_stop import PairPointStopper
from dwtune.study.runners.ray_tune.trial import REQUEST_KEY

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPEC = Path(__file__).resolve().parents[2] / "search_spaces" / "simulated.yaml"
TOTAL = 1000
OVERRIDES = [
    "space.depths=[6, 12]",
    "space.budgets={min: 1e6, max: 1e10, num: 5}",
    "space.seeds=2",  # the pair's noise gets degrees of freedom from the grid
    "refine.pairs=[[6, 12]]",
    "refine.seeds=2",
    "refine.max_seeds=3",
    "refine.max_rounds=3",
    "refine.scan_spacing=0",
    f"train.steps={TOTAL}",
    "train.eval_every=25",
    "simulated.curve=late_descent",
    "refine.early_stop=true",
    "resources.cpu=0.5",
]


def _refine(spec, store) -> tuple[list, str]:
    stream = io.StringIO()
    with TuneRunner(spec, store, progress=StudyProgress(stream)) as runner:
        runner.run(grid_requests(spec))
        transitions = RefineStage(spec, store).run_on(runner)
    return transitions, stream.getvalue()


@pytest.fixture(scope="module")
def refined(tmp_path_factory):
    spec = load_spec(SPEC, OVERRIDES)
    store = ExperimentStore.for_spec(tmp_path_factory.mktemp("early"), spec)
    store.initialise(spec)
    transitions, console = _refine(spec, store)
    return spec, store, transitions, console


def test_settled_points_stop_their_trainings_and_record_the_step(refined):
    spec, store, _, console = refined
    stopped = [r for r in store.records() if r.status == vocabulary.STATUS_EARLY_STOPPED]
    assert stopped, "no training was stopped early"
    for record in stopped:
        assert record.stage == vocabulary.Stage.REFINE
        assert spec.refine.early_min_fraction * TOTAL <= record.stopped_step < TOTAL
        assert record.steps == record.stopped_step == record.curve[-1][vocabulary.STEP]
    trials, _ = export_experiment(store)
    table = pd.read_parquet(trials).set_index("trial_id")
    for record in stopped:
        assert table.loc[record.trial_id, "stopped_step"] == record.stopped_step
    finished = table[table["status"] == vocabulary.STATUS_FINISHED]
    assert (finished["stopped_step"] == 0).all()
    assert f"{len(stopped)} training(s) stopped early" in console


def test_a_point_settled_early_takes_the_rules_sign_which_is_the_planted_one(refined):
    spec, store, _, _ = refined
    study = open_study(store, (6, 12), None, lambda _line: None)
    early = [p for p in trial_points(study) if p.early_sign]
    assert early
    for point in early:
        planted = pair_delta_mean(spec.simulated, 6, 12, math.exp(point.log_n))
        assert point.decision.decided and point.decision.sign == point.early_sign
        assert point.early_sign == int(math.copysign(1, planted))


def test_running_the_stage_again_trains_nothing_and_decides_the_same(refined):
    spec, store, transitions, _ = refined
    before = {r.trial_id: r.status for r in store.records()}
    again, _ = _refine(spec, store)
    assert {r.trial_id: r.status for r in store.records()} == before
    assert again == transitions


# ------------------------------------------------ the stopper and the refiner make one call

CLEAR_BUDGET = 1e10  # far above the pair's transition: the deeper net wins clearly


@pytest.fixture(scope="module")
def trained_point(tmp_path_factory):
    """A pair refiner (grid trained in process) and a point's trainings run to the end, as
    (request, record) by seed: (deep, shallow) each."""
    spec = load_spec(SPEC, OVERRIDES)
    store = ExperimentStore.for_spec(tmp_path_factory.mktemp("paths"), spec)
    store.initialise(spec)
    LocalRunner(spec, store).run(grid_requests(spec))
    [refiner] = RefineStage(spec, store).refiners
    cells = [spec.cell(depth, CLEAR_BUDGET) for depth in (12, 6)]
    seeds = refiner.seed_order[: spec.refine.seeds]
    requests = [refiner._request(cell, seed) for seed in seeds for cell in cells]
    records = LocalRunner(spec, store).run(requests)
    pairs = {
        seed: tuple(zip(requests[2 * i : 2 * i + 2], records[2 * i : 2 * i + 2], strict=True))
        for i, seed in enumerate(seeds)
    }
    return spec, refiner, pairs


def stopped_at(record, step: int):
    """The record of a training the stopper stopped at ``step``."""
    curve = [r for r in record.curve if r[vocabulary.STEP] <= step]
    return dataclasses.replace(
        record, curve=curve, steps=step, stopped_step=step, status=vocabulary.STATUS_EARLY_STOPPED
    )


def stopper_for(spec, pairs, context):
    """A stopper watching the point's batch (its trainings' records as ``pairs`` hold them)."""
    batch = [both for pair in pairs.values() for both in pair]
    feed = SimpleNamespace(early_context=context, batch_of=lambda _id: batch, received={})
    return PairPointStopper(spec, feed)


def spying(monkeypatch) -> list:
    """Every look point_call returns, in order."""
    looks, real = [], point_call

    def spied(*args):
        looks.append(real(*args))
        return looks[-1]

    monkeypatch.setattr("dwtune.core.refine.early.point_call", spied)
    return looks


def test_the_stopper_and_the_refiner_make_the_same_call_at_every_look(trained_point, monkeypatch):
    spec, refiner, pairs = trained_point
    looks = spying(monkeypatch)
    stopper = stopper_for(spec, pairs, refiner.early_context)
    deep_request = pairs[min(pairs)][0][0]
    evals = run_evals(spec, deep_request)
    signs = set()
    for step in stopper.rule.look_steps(evals, evals[-1]):
        settles = stopper._settles(deep_request, step)
        stopped = {s: tuple(stopped_at(rec, step) for _, rec in pair) for s, pair in pairs.items()}
        call, _, ends = refiner._first_batch_call(CLEAR_BUDGET, stopped)
        scheduler_look, refiner_look = looks[-2:]
        assert scheduler_look.call == refiner_look.call == call
        assert settles == call.settled
        assert len(ends) == len(pairs)
        signs.add(call.sign)
    assert -1 in signs, "the clear Δ (the deeper net wins) is settled at some look"


def test_neither_path_calls_a_point_whose_curves_have_not_reached_the_step(trained_point):
    spec, refiner, pairs = trained_point
    deep_request = pairs[min(pairs)][0][0]
    step = last_look(spec, run_evals(spec, deep_request))
    assert stopper_for(spec, pairs, refiner.early_context)._settles(deep_request, step)
    lagging = [r for r in shallow_curve(pairs) if r[vocabulary.STEP] < step]
    # the stopper: one shallow training still runs, its reports so far end before the step
    running = dict(pairs)
    (deep, (shallow_request, _)) = running[max(pairs)]
    running[max(pairs)] = (deep, (shallow_request, None))
    stopper = stopper_for(spec, running, refiner.early_context)
    stopper._curves[shallow_request.trial_id] = lagging
    assert not stopper._settles(deep_request, step)
    # the refiner: a record stopped at the step whose curve lacks that eval
    stopped = {s: tuple(stopped_at(rec, step) for _, rec in pair) for s, pair in pairs.items()}
    deep_record, shallow_record = stopped[max(pairs)]
    stopped[max(pairs)] = (deep_record, dataclasses.replace(shallow_record, curve=lagging))
    assert refiner._first_batch_call(CLEAR_BUDGET, stopped) is None


def test_a_settled_point_stops_its_trainings_but_not_at_their_last_report(trained_point):
    """The last eval report carries the training's end status; stopped there, a finished
    training lost its final report and was recorded early_stopped at its last step."""
    spec, refiner, pairs = trained_point
    stopper = stopper_for(spec, pairs, refiner.early_context)
    (request, record), _ = pairs[min(pairs)]
    # a bisect training: one the rule may stop
    request = dataclasses.replace(request, point_kind=vocabulary.PointKind.CUT)
    stopper._settled[(request.pair, request.round)] = 1  # settled by another training's look
    trial = SimpleNamespace(config={REQUEST_KEY: request})
    last = {vocabulary.STEP: record.steps, vocabulary.VAL_LOSS: record.final_val_loss}
    middle = {**last, vocabulary.STEP: record.steps // 2}
    assert stopper.on_trial_result(None, trial, middle) == TrialScheduler.STOP
    ended = {**last, vocabulary.STATUS: vocabulary.STATUS_FINISHED}
    assert stopper.on_trial_result(None, trial, ended) == TrialScheduler.CONTINUE


def shallow_curve(pairs) -> list[dict]:
    """The reported curve of the last seed's shallow training."""
    return pairs[max(pairs)][1][1].curve


def test_neither_path_calls_a_point_before_the_pair_has_a_measured_noise(
    trained_point, monkeypatch
):
    spec, refiner, pairs = trained_point
    deep_request = pairs[min(pairs)][0][0]
    step = last_look(spec, run_evals(spec, deep_request))
    assert stopper_for(spec, pairs, refiner.early_context)._settles(deep_request, step)
    measured = refiner.early_context

    def no_noise(request):  # the pair's correction, no learned noise yet
        return PointNoise(math.nan, 0.0, measured(request).correction)

    assert not stopper_for(spec, pairs, no_noise)._settles(deep_request, step)
    monkeypatch.setattr(refiner, "early_context", no_noise)
    stopped = {s: tuple(stopped_at(rec, step) for _, rec in pair) for s, pair in pairs.items()}
    assert refiner._early_call(CLEAR_BUDGET, stopped, trial_points(refiner.study)) is None


def last_look(spec, evals: list[int]) -> int:
    rule = EarlyRule(spec.refine.alpha, spec.refine.early_min_fraction)
    return rule.look_steps(evals, evals[-1])[-1]
