"""`dwtune refine EXPERIMENT_DIR`: bad input is one line and exit code 2; a real run on Ray."""

import copy
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from dwtune.cli import main
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.core.vocabulary import TRANSITIONS_FILE
from dwtune.storage.store import ExperimentStore
from dwtune.study.refine import refine_in_process, study_path
from dwtune.study.runners.local import LocalRunner

RAW = {
    "name": "refine_cli",
    "trainer": "simulated",
    "data": {"tokenizer": "bpe", "vocab_size": 2000, "seq_len": 128},
    "model": {"heads": 2, "width_multiple": 2},
    "space": {"depths": [6, 12, 18], "budgets": {"min": 1e6, "max": 1e9, "num": 4}, "seeds": 1},
    "train": {"steps": 200, "batch_size": 8, "eval_every": 100},
    # no scan for a second crossing (tests/study/test_refine.py tests it): 16 trainings, not 48
    "refine": {"pairs": [[6, 12]], "tolerance": 0.5, "seeds": 1, "max_seeds": 2, "scan_spacing": 0},
    "simulated": {"noise": 0.0},
    "resources": {"cpu": 1, "retries": 0},
}


def experiment(tmp_path, trained_depths=(6, 12, 18), **sections):
    """An experiment directory whose grid finished for ``trained_depths`` (in-process)."""
    raw = copy.deepcopy(RAW)
    for key, values in sections.items():
        raw[key] = {**raw[key], **values}
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    requests = [r for r in grid_requests(spec) if r.shape.depth in trained_depths]
    LocalRunner(spec, store).run(requests)
    return store


def refine(store, capsys) -> tuple[int, str, str]:
    code = main(["refine", str(store.root)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dwtune refine: error: ")
    return lines[0]


def test_a_missing_directory_is_one_line_exit_2(tmp_path, capsys):
    code = main(["refine", str(tmp_path / "nowhere")])
    assert code == 2
    assert "no such experiment directory" in one_error_line(capsys.readouterr().err)


def test_a_pair_whose_depth_the_grid_never_trained_is_refused(tmp_path, capsys):
    store = experiment(tmp_path, trained_depths=(6, 12), refine={"pairs": [[6, 12], [12, 18]]})
    code, _, err = refine(store, capsys)
    assert code == 2
    assert one_error_line(err).endswith(
        "refine pair [12, 18]: depth 18 has no finished grid trials (its records were "
        "removed, or all failed); rerun `dwtune run SPEC` to train its grid (finished trials "
        "are kept)"
    )
    assert not (store.root / "refine").exists() and not (store.root / TRANSITIONS_FILE).exists()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tolerance": 0}, "refine.tolerance: got 0"),
        ({"tolerance": -0.1}, "refine.tolerance: got -0.1"),
        ({"seeds": 0}, "refine.seeds: got 0; expected a value >= 1"),
        ({"max_seeds": 0}, "refine.max_seeds: got 0; expected a value >= 1"),
    ],
)
def test_bad_refine_settings_in_the_experiment_spec_are_refused(tmp_path, capsys, change, message):
    store = experiment(tmp_path)
    raw = yaml.safe_load(store.spec_path.read_text())
    raw["refine"].update(change)
    store.spec_path.write_text(yaml.safe_dump(raw))
    code, _, err = refine(store, capsys)
    assert code == 2
    assert message in one_error_line(err)


def test_a_corrupt_journal_is_refused_and_nothing_else_is_touched(tmp_path, capsys):
    store = experiment(tmp_path)
    journal = study_path(store, (6, 12))
    journal.parent.mkdir()
    journal.write_bytes(b'{"op_code": 0, "worker_id": "x"}\n\x00\x01 garbage\n{}\n')
    records = {p.name: p.read_bytes() for p in store.trials_dir.iterdir()}
    code, _, err = refine(store, capsys)
    assert code == 2
    line = one_error_line(err)
    assert f"{journal}: corrupt Optuna journal" in line and "remove optuna.journal" in line
    assert {p.name: p.read_bytes() for p in store.trials_dir.iterdir()} == records


def refine_process(store) -> subprocess.CompletedProcess:
    """`dwtune refine` as a user runs it: its own process, its own local Ray instance."""
    return subprocess.run(
        [sys.executable, "-m", "dwtune", "refine", str(store.root)],
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_refine_runs_on_ray_tune_and_a_second_run_trains_nothing(tmp_path):
    store = experiment(tmp_path)
    grid = {p.stem for p in store.trials_dir.iterdir()}
    done = refine_process(store)
    assert done.returncode == 0, done.stderr
    assert "6-12: bracketed" in done.stdout
    assert "[refine 6-12] trial 1 (" in done.stderr and "(bisect)" in done.stderr
    refined = {p.stem for p in store.trials_dir.iterdir()}
    new = [store.read_record(trial_id) for trial_id in refined - grid]
    assert new and all(r.stage == "refine" and r.simulated and r.completed for r in new)
    first = pq.read_table(store.root / TRANSITIONS_FILE).to_pylist()
    assert first[0]["status"] == "bracketed" and first[0]["trials"] == len(new)

    again = refine_process(store)
    assert again.returncode == 0, again.stderr
    assert "Ray:" not in again.stderr  # nothing left to train: Ray is not even started
    assert {p.stem for p in store.trials_dir.iterdir()} == refined
    assert pq.read_table(store.root / TRANSITIONS_FILE).to_pylist() == first


def test_a_resume_whose_batches_are_all_recorded_answers_them_without_ray(tmp_path, capsys):
    """A driver killed after its trainings were recorded, before the stage wrote its rounds:
    `dwtune refine` answers every batch from the records. Nothing listens at the address, so
    starting Ray would fail; the stage finishes and finds the first run's N*."""
    spec = spec_from_dict(RAW)
    first = experiment(tmp_path / "first")
    expected, _ = refine_in_process(spec, first)
    resumed = ExperimentStore.for_spec(tmp_path / "resumed", spec)
    resumed.initialise(spec)
    for record in first.trials_dir.glob("*.json"):
        (resumed.trials_dir / record.name).write_text(record.read_text())
    assert not (resumed.root / TRANSITIONS_FILE).exists()

    code = main(["refine", str(resumed.root), "--address", "127.0.0.1:9"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Ray:" not in err and "already recorded" in err and "6-12: bracketed" in out
    found = pq.read_table(resumed.root / TRANSITIONS_FILE).to_pylist()
    assert [row["n_star"] for row in found] == [t.n_star for t in expected]
    assert {p.name for p in resumed.trials_dir.glob("*.json")} == {
        p.name for p in first.trials_dir.glob("*.json")
    }
