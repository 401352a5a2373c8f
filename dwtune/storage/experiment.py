"""The experiment folder's one reader and one writer of everything derived from its records.

:class:`~dwtune.storage.store.ExperimentStore` keeps the records, the spec and the driver lock;
:class:`ExperimentWriter` writes the Parquet tables and ``fit.json``; :class:`ExperimentReader`
reads every file back: the spec through the bounded loader, each table with the columns its
reader needs (:func:`~dwtune.storage.tables.read_table`), ``fit.json`` bounded, each path
inside the folder (a symlink out is refused). :meth:`ExperimentReader.read` is the folder's
results read once, as the report and the fit stage see them (:class:`Experiment`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dwtune.core.errors import InputError
from dwtune.core.fit.bootstrap import PairPoints
from dwtune.core.length_check import LengthShift
from dwtune.core.projection import DepthWidthLaw, no_projection_reason
from dwtune.core.refine.transition import Transition
from dwtune.core.units import parse_size
from dwtune.core.vocabulary import (
    COMPLETED_STATUSES,
    CURVES_FILE,
    FIT_FILE,
    LENGTH_CHECK_FILE,
    OTHER_LENGTH_STAGES,
    PAIR_DELTAS_FILE,
    PROJECTIONS_FILE,
    SPEC_FILE,
    TRANSITIONS_FILE,
    TRIAL_RECORDS_DIR,
    TRIALS_FILE,
)
from dwtune.storage import loaders, tables
from dwtune.storage.fit_json import (
    FitOutcome,
    fit_from_dict,
    fit_json_text,
    is_fitted,
    law_from_json,
    read_fit_json,
)
from dwtune.storage.fit_points import FitInput, points_from_transitions
from dwtune.storage.provenance import refuse_losing_trials, write_parquet_atomic
from dwtune.storage.schemas import (
    CURVES_SCHEMA,
    DEFAULT_BUDGETS,
    LENGTH_CHECK_SCHEMA,
    PAIR_DELTAS_SCHEMA,
    PROJECTION_SCHEMA,
    TRANSITION_SCHEMA,
    TRIALS_SCHEMA,
    columns,
)
from dwtune.storage.store import ExperimentStore, atomic_write_text

# The columns the report and the fit stage need from each table.
CURVE_COLUMNS = columns(CURVES_SCHEMA, "trial_id", "step", "val_loss")
TRIAL_COLUMNS = columns(
    TRIALS_SCHEMA, "depth", "budget", "params_non_embedding", "status", "best_val_loss"
)
PAIR_COLUMNS = columns(TRANSITION_SCHEMA, "pair", "depth_shallow", "depth_deep", "status")
LENGTH_COLUMNS = columns(
    LENGTH_CHECK_SCHEMA, "pair", "factor", "status", "n_star", "n_star_check", "moved"
)
PROJECTION_COLUMNS = tuple(PROJECTION_SCHEMA.names)
HINTS = {
    TRIALS_FILE: "expected the trials schema of dwtune export",
    CURVES_FILE: "expected the curves schema of dwtune export",
    TRANSITIONS_FILE: "expected the transitions schema",
    LENGTH_CHECK_FILE: "expected the length_check schema; rerun the study",
    PROJECTIONS_FILE: "expected the projections schema of the fit stage; rerun `dwtune report`",
}
PAIR_DELTAS_MISSING = f"no {PAIR_DELTAS_FILE} (rerun the refine stage)"


@dataclasses.dataclass(frozen=True)
class Experiment:
    """What an experiment folder holds, read once."""

    root: Path
    name: str
    trials: pd.DataFrame  # the grid and refine trials (empty if trials.parquet is missing)
    transitions: pd.DataFrame | None  # None if transitions.parquet is missing
    simulated: bool
    spec: dict | None
    notes: tuple[str, ...]  # what is missing or could not be read
    length_check: pd.DataFrame | None = None  # None without refine.length_check

    @property
    def completed(self) -> pd.DataFrame:
        """Trials with a usable loss: finished or early-stopped, finite best_val_loss."""
        ok = self.trials["status"].isin(COMPLETED_STATUSES)
        return self.trials[ok & np.isfinite(self.trials["best_val_loss"].astype(float))]

    def fit_points(self) -> FitInput | None:
        """The transitions as the fit's points (None before the refine stage wrote any)."""
        if self.transitions is None:
            return None
        return points_from_transitions(self.transitions, self.root / TRANSITIONS_FILE)

    def fit_budgets(self) -> tuple[list[float], str]:
        """Budgets to tabulate: the spec's ``fit.budgets`` if it has them, else the defaults
        (with a note saying why, where the spec's are unusable)."""
        section = (self.spec or {}).get("fit")
        if section is not None and not isinstance(section, dict):
            return list(DEFAULT_BUDGETS), f"{SPEC_FILE}: fit is not a mapping; default budgets used"
        wanted = section.get("budgets") if section else None
        if isinstance(wanted, str | int | float):
            wanted = [wanted]  # a single budget written without brackets
        if not wanted:
            return list(DEFAULT_BUDGETS), ""
        try:
            return sorted({parse_size(b, field="fit.budgets") for b in wanted}), ""
        except InputError as exc:
            return list(DEFAULT_BUDGETS), f"{exc}; default budgets used"


class ExperimentReader:
    """Reads the files of one experiment folder."""

    def __init__(self, root: str | Path):
        self.store = ExperimentStore(root)
        self.root = self.store.root

    def path(self, name: str) -> Path:
        return self.store.inside(self.root / name)

    def has(self, name: str) -> bool:
        return self.path(name).is_file()

    # ------------------------------------------------------------------ files

    def spec(self) -> dict:
        """The resolved spec the folder was created with (bounded; damage is one line)."""
        return loaders.load_spec_mapping(self.path(SPEC_FILE))

    def table(self, name: str, required: Sequence[str] = ()) -> pd.DataFrame:
        """A table of the folder with ``required`` columns; anything else is one line."""
        hint = HINTS.get(name, "rerun the command that writes it")
        return tables.read_table(self.path(name), tuple(required), hint)

    def pair_deltas(self) -> tuple[list[PairPoints] | None, str]:
        """The refine stage's paired Δs per pair, or None and why there are none."""
        if not self.has(PAIR_DELTAS_FILE):
            return None, PAIR_DELTAS_MISSING
        try:
            return tables.read_pair_deltas(self.path(PAIR_DELTAS_FILE)), ""
        except InputError as exc:
            return None, str(exc)

    def fit_record(self) -> dict:
        """fit.json as the fit stage wrote it."""
        path = self.path(FIT_FILE)
        if not path.is_file():
            raise InputError(
                f"{path}: no such file; the fit stage writes it (`dwtune run`, `dwtune refine` "
                f"or `dwtune report {self.root}`)"
            )
        return read_fit_json(path)

    def law(self) -> tuple[DepthWidthLaw, bool]:
        """(the fitted law, simulated) from fit.json; one line where it holds no fit."""
        return law_from_json(self.path(FIT_FILE))

    def fit(self, experiment: Experiment) -> tuple[FitOutcome, dict]:
        """(outcome, fit.json record) as the fit stage wrote them."""
        record = self.fit_record()
        points = experiment.fit_points()
        path = self.path(FIT_FILE)
        fit = fit_from_dict(record, path) if is_fitted(record) else None
        law = None
        if fit is not None and fit.b > 0:
            law = DepthWidthLaw.from_fit(fit, source=points.source if points else str(path))
        reason = no_projection_reason(fit) if fit is not None else str(record.get("reason", ""))
        return FitOutcome(points, fit, law, reason), record

    def projections(self) -> pd.DataFrame:
        return self.table(PROJECTIONS_FILE, PROJECTION_COLUMNS)

    def curves(self) -> pd.DataFrame | None:
        """curves.parquet's columns the report draws (None before the first export)."""
        return self.table(CURVES_FILE, CURVE_COLUMNS) if self.has(CURVES_FILE) else None

    # ------------------------------------------------------------------ the folder read once

    def read(self) -> Experiment:
        """Trials, transitions, spec and length check, each with a note where it is missing."""
        if not self.root.is_dir():
            raise InputError(f"{self.root}: not a directory; pass an experiment directory")
        if not self.has(TRIALS_FILE) and not self.has(TRANSITIONS_FILE):
            raise InputError(
                f"{self.root}: no {TRIALS_FILE} or {TRANSITIONS_FILE}; run `dwtune run` or "
                f"`dwtune export {self.root}` first"
            )
        trials, trials_note = self._trials()
        transitions, transitions_note = self._transitions()
        spec, spec_note = self._spec()
        name = str(spec.get("name", self.root.name)) if spec else self.root.name
        return Experiment(
            root=self.root,
            name=name,
            trials=trials,
            transitions=transitions,
            simulated=tables.is_simulated(trials) or tables.is_simulated(transitions),
            spec=spec,
            notes=tuple(n for n in (trials_note, transitions_note, spec_note) if n),
            length_check=self._length_check(),
        )

    def _spec(self) -> tuple[dict | None, str]:
        """The spec, or None (no spec.yaml) with a note where it cannot be read."""
        if not self.has(SPEC_FILE):
            return None, ""
        try:
            return self.spec(), ""
        except InputError as exc:
            return None, f"{exc}; defaults used"

    def _trials(self) -> tuple[pd.DataFrame, str]:
        if not self.has(TRIALS_FILE):
            note = f"{TRIALS_FILE} not found (run `dwtune export {self.root}`): no losses to plot"
            return pd.DataFrame({c: pd.Series(dtype=float) for c in TRIAL_COLUMNS}), note
        trials = self.table(TRIALS_FILE, TRIAL_COLUMNS)
        if "stage" in trials.columns:  # search and length-check trials train other lengths
            trials = trials[~trials.stage.isin(OTHER_LENGTH_STAGES)]
        return trials, ""

    def _transitions(self) -> tuple[pd.DataFrame | None, str]:
        if not self.has(TRANSITIONS_FILE):
            return None, f"{TRANSITIONS_FILE} not found: no refine stage results yet"
        return self.table(TRANSITIONS_FILE, PAIR_COLUMNS), ""

    # ------------------------------------------------------------------ staleness and damage

    def fit_is_stale(self) -> bool:
        """True when fit.json or projections.parquet is missing or older than a table it
        uses (written by `dwtune export`, or by a dwtune before the fit stage existed)."""
        outputs = [self.path(FIT_FILE), self.path(PROJECTIONS_FILE)]
        if not all(p.is_file() for p in outputs):
            return True
        inputs = [p for p in (self.path(TRANSITIONS_FILE), self.path(TRIALS_FILE)) if p.is_file()]
        oldest_output = min(p.stat().st_mtime for p in outputs)
        return any(p.stat().st_mtime > oldest_output for p in inputs)

    def unreadable_exports(self) -> dict[Path, str]:
        """The exports (trials, curves) that exist but cannot be read: path -> why. They are
        rebuilt from the records, the source of truth."""
        paths = [self.path(name) for name in (TRIALS_FILE, CURVES_FILE)]
        return {path: problem for path in paths if (problem := loaders.parquet_problem(path))}

    def _length_check(self) -> pd.DataFrame | None:
        return (
            self.table(LENGTH_CHECK_FILE, LENGTH_COLUMNS) if self.has(LENGTH_CHECK_FILE) else None
        )


class ExperimentWriter:
    """Writes the tables and fit.json of one experiment folder; ``spec`` (the resolved spec as
    a mapping, or None where the folder has none) goes into every table's metadata."""

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


def rebuilt_note(path: Path, problem: str) -> str:
    """The line that says an unreadable export was rebuilt from the records."""
    return f"{path}: could not be read ({problem}); rebuilt it from {TRIAL_RECORDS_DIR}/"


def export_experiment(store: ExperimentStore) -> tuple[Path, Path]:
    """Write ``trials.parquet`` and ``curves.parquet`` of every recorded trial."""
    return ExperimentWriter.of(store).exports()
