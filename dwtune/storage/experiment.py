"""The one writer of an experiment folder's derived files.

:class:`~dwtune.storage.store.ExperimentStore` keeps the records, the spec and the driver lock;
everything derived from them (the Parquet tables, ``fit.json``) is written here, each file
inside the folder (a symlink out is refused), atomically, with the provenance metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dwtune.core.fit.bootstrap import PairPoints
from dwtune.core.length_check import LengthShift
from dwtune.core.transitions import Transition
from dwtune.core.vocabulary import (
    CURVES_FILE,
    FIT_FILE,
    LENGTH_CHECK_FILE,
    PAIR_DELTAS_FILE,
    PROJECTIONS_FILE,
    TRANSITIONS_FILE,
    TRIALS_FILE,
)
from dwtune.storage import tables
from dwtune.storage.fit_json import fit_json_text
from dwtune.storage.provenance import refuse_losing_trials, write_parquet_atomic
from dwtune.storage.schemas import (
    LENGTH_CHECK_SCHEMA,
    PAIR_DELTAS_SCHEMA,
    PROJECTION_SCHEMA,
    TRANSITION_SCHEMA,
)
from dwtune.storage.store import ExperimentStore, atomic_write_text


class ExperimentWriter:
    """Writes the tables of one experiment folder; ``spec`` (the resolved spec as a mapping,
    or None where the folder has none) goes into every file's metadata."""

    def __init__(self, store: ExperimentStore, spec: dict | None):
        self.store, self.spec = store, spec

    @classmethod
    def of(cls, store: ExperimentStore) -> ExperimentWriter:
        """A writer with the spec the folder holds (a missing or damaged one is one line)."""
        return cls(store, store.load_spec_dict())

    def path(self, name: str) -> Path:
        return self.store.inside(self.store.root / name)

    def exports(self) -> tuple[Path, Path]:
        """``trials.parquet`` and ``curves.parquet`` of every recorded trial; a trials table
        holding a trial the records lack is kept (it may be that trial's last copy)."""
        records = self.store.records()
        trials, curves = self.path(TRIALS_FILE), self.path(CURVES_FILE)
        refuse_losing_trials(trials, {r.trial_id for r in records})
        write_parquet_atomic(tables.trials_table(records), trials, self.spec)
        write_parquet_atomic(tables.curves_table(records), curves, self.spec)
        return trials, curves

    def transitions(self, transitions: Sequence[Transition]) -> Path:
        rows = tables.transition_rows(transitions)
        return tables.write_table(rows, TRANSITION_SCHEMA, self.path(TRANSITIONS_FILE), self.spec)

    def pair_deltas(self, pairs: Sequence[PairPoints], simulated: bool) -> Path:
        rows = tables.pair_delta_rows(pairs, simulated)
        return tables.write_table(rows, PAIR_DELTAS_SCHEMA, self.path(PAIR_DELTAS_FILE), self.spec)

    def length_check(self, shifts: Sequence[LengthShift]) -> Path:
        rows = tables.length_check_rows(shifts)
        path = self.path(LENGTH_CHECK_FILE)
        return tables.write_table(rows, LENGTH_CHECK_SCHEMA, path, self.spec)

    def projections(self, rows: Sequence[dict]) -> Path:
        return tables.write_table(rows, PROJECTION_SCHEMA, self.path(PROJECTIONS_FILE), self.spec)

    def fit(self, record: dict) -> Path:
        """``fit.json``: the fit stage's ``record`` (NaN and inf written as null)."""
        path = self.path(FIT_FILE)
        atomic_write_text(path, fit_json_text(record))
        return path


def export_experiment(store: ExperimentStore) -> tuple[Path, Path]:
    """Write ``trials.parquet`` and ``curves.parquet`` of every recorded trial."""
    return ExperimentWriter.of(store).exports()
