"""The loaders' advice, followed: every finished result is present afterwards."""

from __future__ import annotations

import json
import os
import stat

import pytest

from dwtune.cli import main
from dwtune.core.errors import InputError
from dwtune.core.spec import spec_from_dict
from dwtune.storage import loaders
from dwtune.storage.store import ExperimentStore, atomic_write_text
from dwtune.study.refine import refine_in_process, run_refine, study_path
from dwtune.study.runners.local import LocalRunner
from tests.helpers.hostile_experiment import base_raw


def _refined(tmp_path):
    spec = spec_from_dict(base_raw())
    store = ExperimentStore.for_spec(tmp_path, spec)
    transitions, _ = refine_in_process(spec, store)
    return spec, store, transitions


def test_a_damaged_refine_record_removed_as_advised_is_trained_again(tmp_path, capsys):
    spec, store, transitions = _refined(tmp_path)
    refine_records = [r for r in store.records() if r.stage == "refine"]
    assert refine_records
    victim = store.record_path(refine_records[0].trial_id)
    original = victim.read_bytes()
    victim.write_text('{"trial_id": "trunc')
    assert main(["export", str(store.root)]) == 2
    line = capsys.readouterr().err.strip()
    assert "corrupt trial record" in line and "remove that one file and rerun" in line
    victim.unlink()  # the advice
    runner = LocalRunner(spec, store)
    assert run_refine(spec, store, runner.run) == transitions
    assert runner.trained == 1  # that trial, and only it
    again, before = json.loads(victim.read_bytes()), json.loads(original)
    same = ("trial_id", "stage", "depth", "width", "seed", "status", "best_val_loss", "steps")
    assert {k: again[k] for k in same} == {k: before[k] for k in same}
    assert [p["val/loss"] for p in again["curve"]] == [p["val/loss"] for p in before["curve"]]
    assert main(["export", str(store.root)]) == 0
    assert len(store.records()) == len({r.trial_id for r in store.records()})


def test_a_torn_journal_tail_is_cut_off_and_the_stage_resumes(tmp_path):
    spec, store, transitions = _refined(tmp_path)
    journal = study_path(store, (6, 12))
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id": "to')
    said = []
    runner = LocalRunner(spec, store)
    assert run_refine(spec, store, runner.run, progress=said.append) == transitions
    assert runner.trained == 0
    assert journal.read_bytes().startswith(whole)  # the partial line is gone, not built on
    loaders.check_journal(journal, said.append)  # and what was appended after is whole
    assert any("cut off a partial last line" in line for line in said)


def test_a_journal_damaged_in_the_middle_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "6-12.journal"
    path.write_bytes(b'{"op_code": 0}\nnot json\n{"op_code": 1}\n')
    with pytest.raises(InputError, match=r"line 2 is not an operation\); remove 6-12.journal"):
        loaders.check_journal(path, print)


def test_a_stale_journal_lock_is_removed(tmp_path):
    journal = tmp_path / "6-12.journal"
    journal.write_text("")
    lock = tmp_path / "6-12.journal.lock"
    lock.symlink_to(journal)
    said = []
    loaders.clear_stale_journal_lock(journal, said.append)
    assert not lock.is_symlink() and said


def test_results_are_written_with_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[1]", "holds list"),
        ("null", "holds NoneType"),
        ('{"trial_id": 1}', "trial_id is int"),
    ],
)
def test_a_record_of_the_wrong_shape_is_named(tmp_path, text, problem):
    path = tmp_path / "abc.json"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"abc.json: corrupt trial record \({problem}"):
        loaders.load_trial_record(path)
