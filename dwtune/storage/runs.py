"""Read a table of runs (CSV, Parquet or an experiment directory) into plain columns.

The analysis itself is pure (:mod:`dwtune.core.analysis`); this module only finds the columns,
converts them to numbers and says, in one line, what is wrong with a table and how to fix it.

Roles and columns. The analysis needs the roles ``depth``, ``width``, ``params`` and ``loss``
(optional: ``seed``, ``tokens``, ``step``, ``run``). A role is read from the column of the same
name unless ``--columns ROLE=COLUMN,...`` maps it. Row numbers in messages count data rows from 1
(the header is not a row).

An experiment directory is read through the store
(:class:`~dwtune.storage.experiment.ExperimentReader`) from its ``trials.parquet``: ``params`` is
``params_non_embedding`` (the paper's ``12·L·w²``; ``params_total`` where the spec's
``model.size_convention`` is ``total``), ``loss`` is ``best_val_loss`` (the size and the loss
the refine stage compares), ``run`` is ``trial_id``; trainings that did not finish count as
failures. With ``--tokens`` its ``curves.parquet`` supplies one row per evaluation instead
(``val_loss`` at ``tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dwtune.core import vocabulary
from dwtune.core.analysis import RunTable
from dwtune.core.analysis.table import run_codes
from dwtune.core.errors import InputError, shown
from dwtune.core.vocabulary import CURVES_FILE, SPEC_FILE, TRIALS_FILE
from dwtune.storage.experiment import ExperimentReader
from dwtune.storage.tables import is_simulated

ROLES = (*vocabulary.RUN_COLUMNS_REQUIRED, *vocabulary.RUN_COLUMNS_OPTIONAL)
# Column names other tools use for a role: only to suggest a --columns fix, never applied.
ALIASES = {
    "depth": ("n_layer", "n_layers", "num_layers", "num_hidden_layers", "layers", "L"),
    "width": ("d_model", "n_embd", "hidden_size", "dim", "dx"),
    "params": ("n_params", "num_params", "params_non_embedding", "parameters", "N"),
    "loss": ("val_loss", "eval_loss", "validation_loss", "best_val_loss", "test_loss"),
    "seed": ("random_seed", "run_seed"),
    "tokens": ("tokens_seen", "num_tokens", "train_tokens"),
    "step": ("steps", "global_step", "iteration", "_step"),
    "run": ("run_id", "name", "trial_id", "id"),
}
EXPERIMENT_COLUMNS = {
    "depth": "depth",
    "width": "width",
    "params": "params_non_embedding",
    "loss": "best_val_loss",
    "seed": "seed",
    "run": "trial_id",
}


@dataclass(frozen=True)
class LoadedRuns:
    """A runs table and where it came from."""

    table: RunTable
    source: str
    simulated: bool  # an experiment directory of the SIMULATED backend
    kind: str  # csv | parquet | experiment


def parse_columns(text: str | None) -> dict[str, str]:
    """``"depth=n_layer,params=n_params"`` -> {"depth": "n_layer", "params": "n_params"}."""
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in (text or "").split(",") if part.strip()):
        role, sep, column = (s.strip() for s in item.partition("="))
        if not sep or not column:
            raise InputError(
                f"--columns: got {shown(item)}; expected ROLE=COLUMN such as depth=n_layer"
            )
        if role not in ROLES:
            raise InputError(
                f"--columns: got role {shown(role)}; expected one of {', '.join(ROLES)}"
            )
        mapping[role] = column
    return mapping


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _read_frame(path: Path) -> pd.DataFrame:
    """CSV or Parquet as a DataFrame; an unreadable or empty file is one InputError."""
    if not path.is_file():
        raise InputError(f"{path}: no such file; pass a CSV, a Parquet file or an experiment dir")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty; export the runs with a header line")
    try:
        if path.suffix.lower() == ".csv":
            return _read_csv(path)
        return pq.read_table(path).to_pandas()
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: the file is empty; export the runs with a header line") from None
    except (OSError, ValueError, pa.ArrowException, pd.errors.ParserError) as exc:
        kind = "CSV" if path.suffix.lower() == ".csv" else "Parquet"
        raise InputError(f"{path}: cannot read it as {kind} ({_first_line(exc)})") from None


# Separators other than the comma that spreadsheets write (a `;` where the decimal mark is a
# comma, a tab from a copy): a header that is one column holding one of them was split wrongly.
OTHER_SEPARATORS = (";", "\t")


def _read_csv(path: Path) -> pd.DataFrame:
    """The CSV, comma-separated or, when its header says so, ``;`` or tab separated (with a
    decimal comma where the numbers use one: ``3,25``)."""
    frame = pd.read_csv(path, skipinitialspace=True)
    header = str(frame.columns[0]) if len(frame.columns) == 1 else ""
    sep = next((s for s in OTHER_SEPARATORS if s in header), None)
    if sep is None:
        return frame
    frame = pd.read_csv(path, sep=sep, skipinitialspace=True)
    if any(frame[c].astype(str).str.fullmatch(r"-?\d+,\d*").any() for c in frame.columns):
        frame = pd.read_csv(path, sep=sep, decimal=",", skipinitialspace=True)
    return frame


def _missing(frame: pd.DataFrame, role: str, column: str, path: Path) -> InputError:
    present = [str(c) for c in frame.columns]
    guess = next((a for a in ALIASES.get(role, ()) if a in present), "COLUMN")
    listed = ", ".join(c if len(c) <= 40 else f"{c[:40]}…" for c in present[:12])
    listed += ", ..." if len(present) > 12 else ""
    return InputError(
        f"{path}: no column {shown(column)} for {role} (columns: {listed}); "
        f"map it with --columns {role}={guess}"
    )


def _numbers(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """The column as floats; a value that is not a number names its column and row."""
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce")
    bad = values.isna() & raw.notna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(
            f"{path}: column {column} row {row + 1}: got {shown(raw.iloc[row])}; expected a number"
        )
    return values.to_numpy(dtype=float)


def table_from_frame(
    frame: pd.DataFrame, path: Path, mapping: dict[str, str], failed: np.ndarray | None = None
) -> RunTable:
    """Plain columns of ``frame`` for every role present (required ones must be)."""
    if frame.empty:
        raise InputError(f"{path}: the table has no rows; export the runs with their losses")
    names = {role: mapping.get(role, role) for role in ROLES}
    for role in vocabulary.RUN_COLUMNS_REQUIRED:
        if names[role] not in frame.columns:
            raise _missing(frame, role, names[role], path)
    for role, column in mapping.items():
        if column not in frame.columns:
            raise _missing(frame, role, column, path)
    present = {role: col for role, col in names.items() if col in frame.columns}
    columns = {role: _numbers(frame, col, path) for role, col in present.items() if role != "run"}
    if "seed" in columns:
        columns["seed"] = _integers(columns["seed"], present["seed"], path)
    _check_whole_depths(columns["depth"], present["depth"], path)
    run = frame[present["run"]].astype(str).to_numpy() if "run" in present else None
    table = RunTable(
        row=np.arange(1, len(frame) + 1),
        run=run,
        failed=failed,
        names=present,
        **columns,
    )
    _check_conflicting_rows(table, path)
    return table


def _check_whole_depths(depth: np.ndarray, column: str, path: Path) -> None:
    """Depths count layers: 6.5 is a typo or another column, never a depth to pair."""
    bad = np.isfinite(depth) & (depth != np.round(depth))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: column {column} row {row + 1}: got {depth[row]:g}; expected a whole "
            f"number of layers (map another column with --columns depth=COLUMN)"
        )


def _check_conflicting_rows(table: RunTable, path: Path) -> None:
    """Two rows of one run at one checkpoint with different losses: the checkpoint choice
    would keep one of them silently, and which one is meant cannot be told. Said of the first
    such row in table order, against the first row of its run and checkpoint."""
    order_role = "tokens" if table.tokens is not None else "step"
    order = table.tokens if table.tokens is not None else table.step
    if order is None:  # every row is a run of its own (or a later checkpoint of its run)
        return
    order = np.asarray(order, dtype=float)
    codes = run_codes(table)
    rows = np.lexsort((order, codes))  # stable: table order within a run and checkpoint
    codes, at = codes[rows], order[rows]
    new_group = np.ones(rows.size, bool)
    new_group[1:] = (codes[1:] != codes[:-1]) | ~(at[1:] == at[:-1])  # NaN: a group of its own
    first = rows[np.flatnonzero(new_group)[np.cumsum(new_group) - 1]]  # per row, in row order
    loss, first_loss = table.loss[rows], table.loss[first]
    same = (loss == first_loss) | (np.isnan(loss) & np.isnan(first_loss))
    if same.all():
        return
    i = int(rows[~same].min())
    j = int(first[~same][np.argmin(rows[~same])])
    raise InputError(
        f"{path}: rows {table.row[j]} and {table.row[i]} are one run (depth "
        f"{table.depth[i]:g}, params {table.params[i]:.4g}) at {order_role} "
        f"{order[i]:g} with losses {table.loss[j]:.6g} and {table.loss[i]:.6g}; keep "
        f"one row per checkpoint, or tell the runs apart with a seed or run column"
    )


def _integers(values: np.ndarray, column: str, path: Path) -> np.ndarray:
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: column {column} row {row + 1}: got {values[row]!r}; expected an integer seed"
        )
    return values.astype(np.int64)


# ---------------------------------------------------------------- experiment directories


def _experiment_frames(
    reader: ExperimentReader, tokens: float | None
) -> tuple[pd.DataFrame, np.ndarray]:
    """trials.parquet (or, with --tokens, its curves joined to it) and which rows failed."""
    trials = reader.table(TRIALS_FILE, (*EXPERIMENT_COLUMNS.values(), "status"))
    failed = ~trials["status"].isin(vocabulary.COMPLETED_STATUSES).to_numpy()
    if tokens is None:
        return trials, failed
    curves = reader.table(CURVES_FILE, ("trial_id", "tokens", "val_loss"))
    keep = trials[~failed].drop(columns=["best_val_loss", "tokens"], errors="ignore")
    joined = curves[["trial_id", "tokens", "val_loss"]].merge(keep, on="trial_id")
    joined = joined[np.isfinite(joined["val_loss"].astype(float))]
    return joined.rename(columns={"val_loss": "best_val_loss"}), np.zeros(len(joined), bool)


def _size_column(reader: ExperimentReader) -> str:
    """The trials.parquet column of the study's size convention (spec.yaml's model section;
    without a spec.yaml, the paper's convention)."""
    spec = reader.spec() if reader.has(SPEC_FILE) else {}
    model = spec.get("model")
    total = (
        isinstance(model, dict) and model.get("size_convention") == vocabulary.SizeConvention.TOTAL
    )
    return "params_total" if total else EXPERIMENT_COLUMNS["params"]


def _experiment_runs(path: Path, mapping: dict[str, str], tokens: float | None) -> LoadedRuns:
    """An experiment directory's trials (or curves) as runs, read through the store."""
    reader = ExperimentReader(path)
    if not reader.has(TRIALS_FILE):
        raise InputError(
            f"{path}: no trials.parquet; pass an experiment directory (export it with "
            f"`dwtune export {path}`), a CSV or a Parquet file"
        )
    frame, failed = _experiment_frames(reader, tokens)
    columns = EXPERIMENT_COLUMNS | {"params": _size_column(reader)}
    columns |= {"tokens": "tokens"} if tokens is not None else {}
    table = table_from_frame(frame, path / TRIALS_FILE, columns | mapping, failed)
    return LoadedRuns(table, str(path), is_simulated(frame), "experiment")


def load_runs(target: str | Path, mapping: dict[str, str], tokens: float | None) -> LoadedRuns:
    """A CSV, Parquet file or experiment directory as a :class:`RunTable` (module doc)."""
    path = Path(target)
    if path.is_dir():
        return _experiment_runs(path, mapping, tokens)
    if path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise InputError(f"{path}: expected a .csv or .parquet file or an experiment directory")
    frame = _read_frame(path)
    table = table_from_frame(frame, path, mapping)
    kind = "csv" if path.suffix.lower() == ".csv" else "parquet"
    return LoadedRuns(table, str(path), is_simulated(frame), kind)
