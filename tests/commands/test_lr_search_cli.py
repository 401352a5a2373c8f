"""`dwtune run` with train.lr as a search: SIGKILLed during the search, rerun, every search
trial exactly once; `dwtune coordcheck` bad input and its JSON."""

from __future__ import annotations

import signal

import optuna
import pandas as pd
import pytest

from dwtune.cli import main
from dwtune.core.lr_search import SearchOutcome, best_rate
from dwtune.storage.store import ExperimentStore
from tests.helpers.drivers import (
    leftovers,
    run_driver,
    start_driver,
    trials_snapshot,
    wait_for_records,
)
from tests.helpers.processes import Processes

TRIALS = 4  # per cell: two rounds of two
SEARCH = {"search": "log", "min": 1e-4, "max": 3e-2, "trials": TRIALS, "fidelity": 0.5}


@pytest.fixture
def search_study(write_spec, simulated_raw, tmp_path):
    """2 depths x 2 budgets = 4 cells x 4 search trials (~1 s each), then 8 grid trials."""
    raw = simulated_raw(
        name="lrsearch",
        simulated={"seconds_per_step": 0.005, "lr_penalty": 0.02},
        train={"lr": SEARCH},
    )
    return write_spec(raw), tmp_path, ExperimentStore(tmp_path / "lrsearch")


def _journal_trials(root) -> list:
    trials = []
    for path in sorted((root / "lr_search").glob("*.journal")):
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(path))
        )
        trials += optuna.load_study(study_name="lr_search", storage=storage).trials
    return trials


@pytest.mark.ray
@pytest.mark.slow
def test_a_driver_killed_during_the_search_resumes_with_every_search_trial_once(search_study):
    spec, storage, store = search_study
    driver = start_driver(spec, storage)
    wait_for_records(store, 2, driver)
    table = Processes.table()
    ray_processes = Processes.descendants({driver.pid}, table)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=30)
    assert leftovers(ray_processes, table) == []
    before = trials_snapshot(store)
    assert 2 <= len(before) < 4 * TRIALS  # killed during the search

    done = run_driver(spec, storage, "--grid-only")
    assert done.returncode == 0, done.stderr
    after = trials_snapshot(store)
    assert {k: after[k] for k in before} == before  # nothing finished was trained again
    trials = pd.read_parquet(store.root / "trials.parquet")
    search = trials[trials.stage == "lr_search"]
    assert len(search) == search.trial_id.nunique() == 4 * TRIALS
    assert search.groupby(["depth", "width"]).size().tolist() == [TRIALS] * 4
    assert not search.duplicated(["depth", "width", "lr"]).any()
    journal = _journal_trials(store.root)
    assert len(journal) == 4 * TRIALS
    assert {t.state for t in journal} == {optuna.trial.TrialState.COMPLETE}
    grid = trials[trials.stage == "grid"]
    assert len(grid) == 8 and set(grid.lr_source) == {"search"}
    for (depth, width), rows in grid.groupby(["depth", "width"]):
        cell = search[(search.depth == depth) & (search.width == width)]
        outcomes = [
            SearchOutcome(r.lr, r.status, r.final_val_loss, r.steps) for r in cell.itertuples()
        ]
        assert rows.lr.iloc[0] == pytest.approx(best_rate(outcomes, cell.steps.max()))

    again = run_driver(spec, storage, "--grid-only")  # a rerun trains nothing
    assert again.returncode == 0 and "training" not in again.stderr
    assert trials_snapshot(store) == after


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_coordcheck_refuses_an_unknown_parametrization_and_a_width_head_dim_cannot_split(
    write_spec, simulated_raw, capsys
):
    spec = write_spec(simulated_raw(name="cc"))
    assert main(["coordcheck", str(spec), "--parametrization", "sp,ntk"]) == 2
    assert "--parametrization: got 'ntk'" in _one_line(capsys)
    raw = simulated_raw(name="cchd", model={"head_dim": 16, "width_multiple": 8})
    raw["model"].pop("heads")
    assert main(["coordcheck", str(write_spec(raw)), "--widths", "32,40"]) == 2
    assert "model.head_dim: 16 does not divide width 40" in _one_line(capsys)


@pytest.mark.slow
def test_coordcheck_json_gives_a_width_slope_per_parametrization(tmp_path, capsys):
    import json

    out = tmp_path / "cc.png"
    code = main(
        [
            "coordcheck",
            "search_spaces/tiny_lr.yaml",
            "--parametrization",
            "sp,mup",
            "--widths",
            "32,64,128",
            "--steps",
            "3",
            "--lr",
            "1e-2",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0 and out.is_file()
    result = json.loads(capsys.readouterr().out)["parametrizations"]
    assert result["sp"]["width_slope"] > result["mup"]["width_slope"] + 0.5
    assert set(result["mup"]["layers"]["2"]["64"]) == {"embedding", "block_1", "block_2", "logits"}
