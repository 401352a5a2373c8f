"""Parquet export and TensorBoard event files, from trial records (no Ray)."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import threading

import pandas as pd
import pyarrow.parquet as pq
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dwtune.cli import main
from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.records import TrialRecord, grid_requests, record_from_result
from dwtune.core.spec import spec_from_dict
from dwtune.outputs import tables
from dwtune.storage.provenance import read_parquet_checked
from dwtune.storage.store import ExperimentStore


def _curve(depth: int, seed: int, steps: int = 3) -> list[dict]:
    """Reports as a trainer sends them: train loss every time, validation at some steps."""
    points = []
    for i in range(1, steps + 1):
        point = {
            vocabulary.STEP: 100 * i,
            vocabulary.TOKENS: 12_800 * i,
            vocabulary.TRAIN_LOSS: 3.0 / i + 0.01 * depth + 0.001 * seed,
            vocabulary.LR: 1e-3 / i,
            vocabulary.ELAPSED_S: 0.5 * i,
            vocabulary.TOKENS_PER_S: 25_600.0 + i,
            vocabulary.MFU: 0.01 * i,
        }
        if i % 2 == 1 or i == steps:
            point[vocabulary.VAL_LOSS] = 3.1 / i + 0.01 * depth
        points.append(point)
    return points


@pytest.fixture
def store(tmp_path, simulated_raw):
    """An experiment directory with every trial of the small study recorded, one failed."""
    spec = spec_from_dict(simulated_raw())
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    for i, request in enumerate(grid_requests(spec)):
        if i == 3:
            record = record_from_result(
                request,
                spec,
                _curve(request.shape.depth, request.seed)[:1],
                vocabulary.STATUS_FAILED,
                0.7,
                node="n1",
                error="RuntimeError: out of memory",
            )
        else:
            record = record_from_result(
                request,
                spec,
                _curve(request.shape.depth, request.seed),
                vocabulary.STATUS_FINISHED,
                1.5 + i,
                node=f"n{i % 2}",
            )
        store.write_record(record)
    return store


def _same(got, expected) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return math.isnan(got)
    return got == expected


def test_trials_parquet_has_one_row_per_record_with_every_field_but_the_curve(store):
    trials_path, _ = tables.export_experiment(store)
    frame = pd.read_parquet(trials_path)
    record_only = ("curve", "val_windows")  # curves.parquet; the paired evaluation error's input
    record_fields = [f.name for f in dataclasses.fields(TrialRecord) if f.name not in record_only]
    assert list(frame.columns) == record_fields
    records = store.records()
    assert len(frame) == len(records) == 8
    for row, record in zip(frame.to_dict("records"), records, strict=True):
        for name in record_fields:
            assert _same(row[name], getattr(record, name)), name
    assert set(frame.status) == {vocabulary.STATUS_FINISHED, vocabulary.STATUS_FAILED}
    assert frame.loc[frame.status == vocabulary.STATUS_FAILED, "error"].item() == (
        "RuntimeError: out of memory"
    )


def test_curves_parquet_holds_every_report_with_missing_values_as_nan(store):
    _, curves_path = tables.export_experiment(store)
    frame = pd.read_parquet(curves_path)
    assert list(frame.columns) == ["trial_id", *tables.CURVE_COLUMNS]
    records = store.records()
    assert len(frame) == sum(len(r.curve) for r in records) == 7 * 3 + 1
    for record in records:
        rows = frame[frame.trial_id == record.trial_id].to_dict("records")
        for row, point in zip(rows, record.curve, strict=True):
            for column, key in tables.CURVE_COLUMNS.items():
                if key in point:
                    assert row[column] == pytest.approx(point[key]), column
                else:
                    assert math.isnan(row[column]), column


def test_parquet_files_carry_an_explicit_schema_and_the_resolved_spec(store):
    trials_path, curves_path = tables.export_experiment(store)
    assert pq.read_schema(trials_path).remove_metadata() == tables.TRIALS_SCHEMA
    assert pq.read_schema(curves_path).remove_metadata() == tables.CURVES_SCHEMA
    meta = pq.read_schema(trials_path).metadata
    assert json.loads(meta[b"dwtune.core.spec"]) == store.load_spec_dict()
    assert b"dwtune.versions" in meta and b"dwtune.git_revision" in meta


def test_export_command_replaces_a_truncated_parquet_file(store, capsys):
    trials_path, _ = tables.export_experiment(store)
    whole = trials_path.read_bytes()
    trials_path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match=r"trials\.parquet: not a readable Parquet file"):
        read_parquet_checked(trials_path, ("trial_id",))
    assert main(["export", str(store.root)]) == 0
    assert "8 trials" in capsys.readouterr().out
    assert len(read_parquet_checked(trials_path, ("trial_id",))) == 8


def test_export_command_refuses_a_directory_without_a_spec(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no spec.yaml" in err and len(err.strip().splitlines()) == 1


def test_export_command_names_a_corrupt_record(store, capsys):
    victim = next(store.trials_dir.glob("*.json"))
    victim.write_text(victim.read_text()[:40])
    assert main(["export", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert victim.name in err and "corrupt trial record" in err


def _events(path) -> EventAccumulator:
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_event_files_hold_every_curve_scalar_against_step_and_losses_against_tokens(store):
    record = next(r for r in store.records() if r.completed)
    path = tables.write_trial_board(store.root, "L6_trial", record)
    assert path.name == "L6_trial" + tables.SIMULATED_SUFFIX
    events = _events(path)
    for key in (
        vocabulary.TRAIN_LOSS,
        vocabulary.VAL_LOSS,
        vocabulary.LR,
        vocabulary.TOKENS_PER_S,
        vocabulary.MFU,
    ):
        expected = [(p[vocabulary.STEP], p[key]) for p in record.curve if key in p]
        got = [(e.step, e.value) for e in events.Scalars(key)]
        assert got == [(s, pytest.approx(v)) for s, v in expected], key
    for key, tag in tables.BY_TOKENS.items():
        expected = [(p[vocabulary.TOKENS], p[key]) for p in record.curve if key in p]
        assert [(e.step, e.value) for e in events.Scalars(tag)] == [
            (s, pytest.approx(v)) for s, v in expected
        ]
    assert events.Scalars("hparam/final_val_loss")[0].value == pytest.approx(record.final_val_loss)


def test_event_files_register_hparams_and_label_the_simulated_backend(store):
    record = next(r for r in store.records() if r.completed)
    path = tables.write_trial_board(store.root, "L6_trial", record)
    events = _events(path)
    plugins = events.PluginTagToContent("hparams")
    session_start = next(v for k, v in plugins.items() if "session_start" in k)
    for name in ("depth", "width", "budget", "seed"):
        assert name.encode() in session_start
    assert "backend/text_summary" in events.Tags()["tensors"]
    text = events.Tensors("backend/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "SIMULATED" in text


def test_rewriting_a_trial_board_replaces_what_was_there(store):
    record = next(r for r in store.records() if r.completed)
    path = tables.write_trial_board(store.root, "L6_trial", record)
    tables.write_trial_board(store.root, "L6_trial", record)
    assert len(list(path.glob("events.out.tfevents.*"))) == 1
    assert len(_events(path).Scalars(vocabulary.TRAIN_LOSS)) == len(record.curve)


def test_tensorboard_is_available_in_this_environment():
    assert tables.tensorboard_problem() is None


def test_a_full_disk_fails_the_event_write_in_the_callers_thread(store, monkeypatch):
    """tensorboardX's own writer would fail in a thread of its own (a traceback nobody can
    catch, then a blocked queue): ours raises where the event is added, and starts no thread."""
    import tensorboardX.record_writer

    def full_disk(path):
        return open("/dev/full", "wb")  # the writer closes it

    monkeypatch.setattr(tensorboardX.record_writer, "open_file", full_disk)
    record = next(r for r in store.records() if r.completed)
    threads = set(threading.enumerate())
    with pytest.raises(OSError) as failed:
        tables.write_trial_board(store.root, "L6_trial", record)
    assert failed.value.errno == errno.ENOSPC
    assert set(threading.enumerate()) == threads
