"""The refine journals as stock Optuna reads them: N*, status and interval as study
attributes, numeric Δ per trial, and a best trial that means something."""

from __future__ import annotations

import math

import optuna
import pandas as pd
import pytest

from dwtune.core.vocabulary import TRANSITIONS_FILE
from dwtune.study import refine as refine_stage
from dwtune.study.runners.local import LocalRunner
from tests.helpers.refine_study import grid_done, make_spec


@pytest.fixture(scope="module")
def refined(tmp_path_factory):
    spec = make_spec(simulated={"noise": 0.002})
    store = grid_done(tmp_path_factory.mktemp("journal"), spec)
    [transition] = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    return store, transition


def _load(store) -> optuna.Study:
    """The pair's study as a user opens it: stock Optuna, no dwtune sampler."""
    path = refine_stage.journal_path(store)
    backend = optuna.storages.journal.JournalFileBackend(str(path))
    return optuna.load_study(study_name="6-12", storage=optuna.storages.JournalStorage(backend))


def test_the_study_attributes_hold_n_star_status_and_interval(refined):
    store, transition = refined
    attrs = _load(store).user_attrs
    row = pd.read_parquet(store.root / TRANSITIONS_FILE).iloc[0]
    assert attrs["pair"] == "6-12" and attrs["status"] == "bracketed" and attrs["final"] is True
    assert attrs["n_star"] == pytest.approx(row.n_star) == transition.n_star
    assert attrs["n_star_low"] < attrs["n_star"] < attrs["n_star_high"]
    assert attrs["n_star_low"] == pytest.approx(row.n_star_low)
    assert attrs["n_star_high"] == pytest.approx(row.n_star_high)
    assert attrs["width_deep"] == pytest.approx(row.width_deep)
    assert attrs["objective"] == refine_stage.OBJECTIVE
    assert isinstance(attrs["statement"], str) and attrs["statement"]


def test_every_trial_holds_numeric_delta_and_the_best_is_nearest_the_crossing(refined):
    store, transition = refined
    study = _load(store)
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    for trial in trials:
        attrs = trial.user_attrs
        assert isinstance(attrs["delta"], float) and isinstance(attrs["n_params"], float)
        assert isinstance(attrs["seeds"], int) and attrs["sign"] in (-1, 0, 1)
        assert trial.value == pytest.approx(abs(attrs["delta"]))
    best = study.best_trial
    assert best.value == min(t.value for t in trials)
    # the point nearest the sign change lies within a factor 2 of N*, never at the range's end
    assert abs(math.log(best.user_attrs["n_params"] / transition.n_star)) < math.log(2)
    frame = study.trials_dataframe()  # the dashboard's and pandas' view: numbers, not strings
    assert frame["user_attrs_delta"].dtype == float


def test_tensorboard_shows_the_pair_decisions_grouped_under_refine(refined):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    store, transition = refined
    boards = EventMultiplexer().AddRunsFromDirectory(str(store.root / "tb"))
    boards.Reload()
    run = "refine/6-12/decisions-SIMULATED"  # what TensorBoard's run list shows
    assert run in boards.Runs()
    events = EventAccumulator(str(store.root / "tb" / run), size_guidance={"scalars": 0})
    events.Reload()
    rounds = len(_load(store).get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    deltas = events.Scalars("refine/delta")
    assert [e.step for e in deltas] == list(range(1, rounds + 1))
    [n_star] = events.Scalars("refine/n_star")
    assert n_star.value == pytest.approx(transition.n_star, rel=1e-6) and n_star.step == rounds
