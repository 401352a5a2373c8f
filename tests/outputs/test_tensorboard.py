"""TensorBoard event files of a trial, drawn from its record."""

from __future__ import annotations

import errno
import threading

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dwtune.core import vocabulary
from dwtune.outputs import tensorboard
from tests.helpers.recorded import recorded_store


@pytest.fixture
def store(tmp_path, simulated_raw):
    """An experiment directory with every trial of the small study recorded, one failed."""
    return recorded_store(tmp_path, simulated_raw())


def _events(path) -> EventAccumulator:
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_event_files_hold_every_curve_scalar_against_step_and_losses_against_tokens(store):
    record = next(r for r in store.records() if r.completed)
    path = tensorboard.write_trial_board(store.root, "L6_trial", record)
    assert path.name == "L6_trial" + tensorboard.SIMULATED_SUFFIX
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
    for key, tag in tensorboard.BY_TOKENS.items():
        expected = [(p[vocabulary.TOKENS], p[key]) for p in record.curve if key in p]
        assert [(e.step, e.value) for e in events.Scalars(tag)] == [
            (s, pytest.approx(v)) for s, v in expected
        ]
    assert events.Scalars("hparam/final_val_loss")[0].value == pytest.approx(record.final_val_loss)


def test_event_files_register_hparams_and_label_the_simulated_backend(store):
    record = next(r for r in store.records() if r.completed)
    path = tensorboard.write_trial_board(store.root, "L6_trial", record)
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
    path = tensorboard.write_trial_board(store.root, "L6_trial", record)
    tensorboard.write_trial_board(store.root, "L6_trial", record)
    assert len(list(path.glob("events.out.tfevents.*"))) == 1
    assert len(_events(path).Scalars(vocabulary.TRAIN_LOSS)) == len(record.curve)


def test_tensorboard_is_available_in_this_environment():
    assert tensorboard.tensorboard_problem() is None


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
        tensorboard.write_trial_board(store.root, "L6_trial", record)
    assert failed.value.errno == errno.ENOSPC
    assert set(threading.enumerate()) == threads


def test_runs_are_grouped_by_stage_and_pair_with_pair_lr_and_parametrization_hparams(store):
    import dataclasses

    record = next(r for r in store.records() if r.completed)
    grid = tensorboard.write_trial_board(store.root, "L6_grid", record)
    assert grid.relative_to(store.root).parts[:2] == ("tb", vocabulary.Stage.GRID)
    refine = dataclasses.replace(
        record, stage=vocabulary.Stage.REFINE, pair="6-12", round=3, point_kind="bisect"
    )
    path = tensorboard.write_trial_board(store.root, "L6_refine", refine)
    assert path.relative_to(store.root).parts[:3] == ("tb", "refine", "6-12")
    session_start = next(
        v for k, v in _events(path).PluginTagToContent("hparams").items() if "session_start" in k
    )
    for name in ("pair", "6-12", "lr", "parametrization", "point_kind", "bisect", "round"):
        assert name.encode() in session_start, name
