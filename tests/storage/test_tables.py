"""The tables of an experiment folder: trials and curves from the records, their schemas,
`dwtune export` rebuilding a damaged one, the refine stage's paired Δs read back."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from dwtune.cli import main
from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.records import TrialRecord
from dwtune.core.vocabulary import PAIR_DELTAS_FILE
from dwtune.storage import schemas
from dwtune.storage.experiment import (
    PAIR_DELTAS_MISSING,
    ExperimentReader,
    ExperimentWriter,
    export_experiment,
)
from dwtune.storage.provenance import read_parquet_checked
from dwtune.storage.store import ExperimentStore
from dwtune.storage.tables import read_pair_deltas
from tests.helpers.paired_deltas import paired_study
from tests.helpers.recorded import recorded_store


@pytest.fixture
def store(tmp_path, simulated_raw):
    """An experiment directory with every trial of the small study recorded, one failed."""
    return recorded_store(tmp_path, simulated_raw())


def _same(got, expected) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return math.isnan(got)
    return got == expected


def test_trials_parquet_has_one_row_per_record_with_every_field_but_the_curve(store):
    trials_path, _ = export_experiment(store)
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
    _, curves_path = export_experiment(store)
    frame = pd.read_parquet(curves_path)
    assert list(frame.columns) == ["trial_id", *schemas.CURVE_COLUMNS]
    records = store.records()
    assert len(frame) == sum(len(r.curve) for r in records) == 7 * 3 + 1
    for record in records:
        rows = frame[frame.trial_id == record.trial_id].to_dict("records")
        for row, point in zip(rows, record.curve, strict=True):
            for column, key in schemas.CURVE_COLUMNS.items():
                if key in point:
                    assert row[column] == pytest.approx(point[key]), column
                else:
                    assert math.isnan(row[column]), column


def test_parquet_files_carry_an_explicit_schema_and_the_resolved_spec(store):
    trials_path, curves_path = export_experiment(store)
    assert pq.read_schema(trials_path).remove_metadata() == schemas.TRIALS_SCHEMA
    assert pq.read_schema(curves_path).remove_metadata() == schemas.CURVES_SCHEMA
    meta = pq.read_schema(trials_path).metadata
    assert json.loads(meta[b"dwtune.core.spec"]) == store.load_spec_dict()
    assert b"dwtune.versions" in meta and b"dwtune.git_revision" in meta


def test_export_command_replaces_a_truncated_parquet_file(store, capsys):
    trials_path, _ = export_experiment(store)
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


def test_pair_deltas_round_trip(tmp_path):
    pairs = paired_study(np.random.default_rng(1))
    ExperimentWriter(ExperimentStore(tmp_path), None).pair_deltas(pairs, simulated=True)
    back = read_pair_deltas(tmp_path / PAIR_DELTAS_FILE)
    assert [p.label for p in back] == [p.label for p in pairs]
    assert back[2].points[4].deltas == pairs[2].points[4].deltas
    assert back[2].points[4].seeds == (0, 1, 2, 3)


def test_a_missing_pair_deltas_table_is_said_and_a_damaged_one_named(tmp_path):
    store = ExperimentStore(tmp_path)
    assert ExperimentReader(tmp_path).pair_deltas() == (None, PAIR_DELTAS_MISSING)
    (tmp_path / PAIR_DELTAS_FILE).write_bytes(b"not parquet")
    pairs, why = ExperimentReader(store.root).pair_deltas()
    assert pairs is None and PAIR_DELTAS_FILE in why and "not a readable Parquet file" in why
