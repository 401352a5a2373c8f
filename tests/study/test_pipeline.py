"""The library API: the simulated study run through ``dwtune.Study`` returns its planted law.
(The README's and docs' examples themselves run in tests/docs/test_doc_examples.py.)"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dwtune
from dwtune.core.errors import InputError
from dwtune.core.spec import load_spec
from dwtune.storage.store import ExperimentStore
from dwtune.study.pipeline import Study, StudyResults
from dwtune.study.refine import refine_in_process

ROOT = Path(__file__).resolve().parents[2]
PLANTED_A, PLANTED_B = 5.039, 0.0555  # search_spaces/simulated.yaml


def train_in_process(storage: Path) -> dict[str, str]:
    """simulated.yaml's grid and refine trainings, done without Ray; ``trial_id -> record``.

    The simulated backend is deterministic, so these are the records the Ray runner writes (the
    kill tests in tests/hostile rely on the same fact); Ray's own path is tested on small studies
    in tests/study/test_ray_tune.py and tests/commands. Training its ~440 trials through Ray
    here took 7-15 minutes of the suite for no check that those tests do not make."""
    spec = load_spec(ROOT / "search_spaces" / "simulated.yaml")
    store = ExperimentStore.for_spec(storage, spec)
    refine_in_process(spec, store)
    return {path.name: path.read_text() for path in store.trials_dir.glob("*.json")}


@pytest.mark.ray
@pytest.mark.slow
def test_the_simulated_study_run_as_a_library_returns_its_planted_law(tmp_path):
    trained = train_in_process(tmp_path)  # then Study.run resumes: nothing trains again
    results = dwtune.Study.from_yaml(ROOT / "search_spaces" / "simulated.yaml").run(
        storage=tmp_path
    )
    fit = results.fit
    assert isinstance(results, StudyResults) and results.root == tmp_path / "simulated"
    assert fit["status"] == "fitted" and fit["simulated"] is True
    assert fit["level"] == 0.95
    assert set(results.transitions["status"]) <= {"bracketed", "censored_low", "censored_high"}
    assert (results.transitions["status"] == "bracketed").sum() >= 3
    assert len(results.trials) == results.trials["trial_id"].nunique() > 0
    assert set(results.curves["trial_id"]) <= set(results.trials["trial_id"])
    projection = results.project("175B")
    assert projection.budget == 1.75e11 and projection.depth_lo < projection.depth
    assert results.report.is_file()
    # Study.open reads the same directory back without running anything.
    reopened = Study.open(results.root)
    assert reopened.spec.name == "simulated"
    pd.testing.assert_frame_equal(reopened.results.transitions, results.transitions)
    records = {
        p.name: p.read_text() for p in ExperimentStore(results.root).trials_dir.glob("*.json")
    }
    assert records == trained  # the example resumed: every trial recorded, none trained again
    assert fit["ci_a"][0] < PLANTED_A < fit["ci_a"][1]
    assert fit["ci_b"][0] < PLANTED_B < fit["ci_b"][1]


def test_dwtune_study_is_the_pipeline_study_imported_on_first_use():
    assert dwtune.Study is Study and dwtune.StudyResults is StudyResults
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = dwtune.Nope


def test_opening_a_missing_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such experiment directory"):
        Study.open(tmp_path / "missing")


def test_results_of_a_directory_without_tables_name_the_missing_file(tmp_path):
    with pytest.raises(InputError, match=r"trials\.parquet: no such file"):
        _ = StudyResults(tmp_path).trials
