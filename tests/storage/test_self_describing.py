"""Every table describes itself: a description per column (field metadata, df.attrs and the
generated docs/outputs_columns.md from one source), provenance in ``pd.read_parquet().attrs``,
units in names with old names still read, and who asked for each training in trials.parquet."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dwtune.core.spec import spec_from_dict
from dwtune.core.vocabulary import (
    CURVES_FILE,
    PAIR_DELTAS_FILE,
    PROJECTIONS_FILE,
    TRANSITIONS_FILE,
    TRIALS_FILE,
    PointKind,
    Stage,
)
from dwtune.outputs.columns_doc import columns_markdown, table_markdown
from dwtune.storage import schemas
from dwtune.storage.experiment import ExperimentReader, export_experiment
from dwtune.storage.store import ExperimentStore
from dwtune.study.fit_stage import write_fit
from dwtune.study.refine import refine_in_process
from tests.helpers.specs import small_simulated

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "outputs_columns.md"
ATTRS_KEYS = {"table", "spec", "versions", "git_revision", "columns"}


@pytest.fixture(scope="module")
def refined(tmp_path_factory) -> ExperimentStore:
    """The small study's grid and refine stages (pair 6-12) in process, exported and fitted."""
    raw = small_simulated(space={"budgets": [1e6, 1e7, 1e8]}, refine={"pairs": [[6, 12]]})
    spec = spec_from_dict(raw)
    store = ExperimentStore.for_spec(tmp_path_factory.mktemp("described"), spec)
    refine_in_process(spec, store)
    export_experiment(store)
    write_fit(store.root)
    return store


def test_every_column_of_every_table_has_a_description():
    for name, schema in schemas.TABLE_SCHEMAS.items():
        described = schemas.column_descriptions(schema)
        assert list(described) == schema.names, name
        assert all(len(text) > 10 for text in described.values()), name


def test_a_column_without_a_description_fails_where_the_schema_is_built():
    with pytest.raises(AssertionError, match=r"without a description.*'undocumented'"):
        schemas.described(TRIALS_FILE, [pa.field("undocumented", pa.int64())])


def test_the_generated_page_lists_every_column_of_every_table_and_is_checked_in():
    page = columns_markdown()
    for name, schema in schemas.TABLE_SCHEMAS.items():
        section = table_markdown(name)
        assert f"## `{name}`" in page and section in page
        for field in schema:
            assert f"| `{field.name}` |" in section, (name, field.name)
    assert DOCS_PAGE.read_text() == page, (
        "docs/outputs_columns.md is stale: python -m dwtune.outputs.columns_doc > "
        "docs/outputs_columns.md"
    )


@pytest.mark.parametrize(
    "name", [TRIALS_FILE, CURVES_FILE, TRANSITIONS_FILE, PAIR_DELTAS_FILE, PROJECTIONS_FILE]
)
def test_pandas_reads_provenance_and_descriptions_as_attrs(refined, name):
    path = refined.root / name
    frame = pd.read_parquet(path)
    assert set(frame.attrs) == ATTRS_KEYS
    assert frame.attrs["table"] == name
    assert frame.attrs["spec"]["name"] == "small"
    assert frame.attrs["spec"]["refine"]["pairs"] == [[6, 12]]
    assert {"dwtune", "pandas", "pyarrow"} <= set(frame.attrs["versions"])
    assert frame.attrs["git_revision"]
    assert list(frame.attrs["columns"]) == list(frame.columns)
    schema = pq.read_schema(path)
    assert schemas.column_descriptions(schema) == schemas.DESCRIPTIONS[name]
    # the store's own reader hands out the same attrs
    assert ExperimentReader(refined.root).table(name).attrs == frame.attrs


def test_curves_carry_their_unit_and_an_old_folder_still_reads(refined, tmp_path):
    curves = pd.read_parquet(refined.root / CURVES_FILE)
    assert "time_s" in curves.columns and "time" not in curves.columns
    assert curves.attrs["columns"]["time_s"].endswith("(seconds)")
    # a folder written before the rename: curves.parquet with `time`
    old = tmp_path / "old"
    old.mkdir()
    curves.rename(columns={"time_s": "time"}).to_parquet(old / CURVES_FILE)
    read = ExperimentReader(old).table(CURVES_FILE, ("trial_id", "time_s"))
    assert list(read["time_s"]) == list(curves["time_s"])


def test_trials_say_which_pair_round_and_point_kind_asked_for_them(refined):
    trials = pd.read_parquet(refined.root / TRIALS_FILE)
    grid = trials[trials.stage == Stage.GRID]
    refine = trials[trials.stage == Stage.REFINE]
    assert len(grid) == 12 and not refine.empty
    assert set(grid.point_kind) == {PointKind.GRID} and set(grid.pair) == {""}
    assert set(grid["round"]) == {0}
    assert set(refine.pair) == {"6-12"}
    assert set(refine.point_kind) <= {PointKind.VERIFY, PointKind.CUT, PointKind.SCAN}
    assert PointKind.CUT in set(refine.point_kind)
    assert refine["round"].min() >= 1
    # a round trains the pair's depths (one of them may reuse an earlier round's shape)
    for _, rows in refine.groupby("round"):
        assert set(rows.depth) <= {6, 12}


def test_records_written_before_the_columns_export_with_their_kind(refined, tmp_path):
    import json
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(refined.root, copy)
    for path in (copy / "trials").glob("*.json"):
        raw = json.loads(path.read_text())
        for key in ("pair", "round", "point_kind"):
            raw.pop(key)
        path.write_text(json.dumps(raw))
    export_experiment(ExperimentStore(copy))
    trials = pd.read_parquet(copy / TRIALS_FILE)
    assert set(trials[trials.stage == Stage.GRID].point_kind) == {PointKind.GRID}
    assert set(trials[trials.stage == Stage.REFINE].point_kind) == {""}


def test_trials_carry_workers_and_gpu_seconds_and_an_older_table_still_reads(refined, tmp_path):
    import shutil

    trials = pd.read_parquet(refined.root / TRIALS_FILE)
    # simulated trials: one process, no GPU held, no device peak
    assert set(trials.workers) == {1} and set(trials.gpu_seconds) == {0.0}
    assert trials.mfu.isna().all()
    # a folder exported before these columns (and with the old mfu column dropped too)
    old = tmp_path / "old"
    shutil.copytree(refined.root, old)
    new_columns = ["workers", "gpu_seconds", "mfu"]
    pq.write_table(
        pa.Table.from_pandas(trials.drop(columns=new_columns), preserve_index=False),
        old / TRIALS_FILE,
    )
    reader = ExperimentReader(old)
    experiment = reader.read()
    assert len(experiment.trials) == len(ExperimentReader(refined.root).read().trials) > 0
    assert not set(new_columns) & set(reader.table(TRIALS_FILE).columns)
