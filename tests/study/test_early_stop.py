"""refine.early_stop in a real Tune run: a pair point's trainings stop once the early rule
settles their sign, the stop is recorded, the point takes the rule's sign, a rerun resumes."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
import pytest

from dwtune.backends.simulated import pair_delta_mean
from dwtune.core import vocabulary
from dwtune.core.records import grid_requests
from dwtune.core.spec import load_spec
from dwtune.storage.experiment import export_experiment
from dwtune.storage.store import ExperimentStore
from dwtune.study.journal import open_study, study_path, trial_points
from dwtune.study.progress import StudyProgress
from dwtune.study.refine import RefineStage
from dwtune.study.runners.ray_tune import TuneRunner

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
    study = open_study(study_path(store, (6, 12)), None, lambda _line: None)
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
