"""Every Parquet table of an experiment folder, as rows: built from results, read back to them.

One writer for all of them (:func:`write_table`: the schema of :mod:`.schemas`, the provenance
metadata and the atomic write of :mod:`.provenance`), so no table is written by hand twice:

- ``trials.parquet`` and ``curves.parquet``: every :class:`~dwtune.core.records.TrialRecord`
  (all fields but the curve and the window losses; the curve one row per report);
- ``transitions.parquet``: one :class:`~dwtune.core.refine.transition.Transition` per depth pair;
- ``length_check.parquet``: one :class:`~dwtune.core.length_check.LengthShift` per pair and
  factor;
- ``pair_deltas.parquet``: every paired Δ of the refine stage, per (pair, point, seed), read
  back as the study bootstrap's :class:`~dwtune.core.fit.bootstrap.PairPoints`; a study
  without it (older folders, published tables) gets no bootstrap;
- ``projections.parquet``: one row per projection of the fit stage.

``is_simulated`` is the one rule for "does this table hold simulated results"; ``read_table``
reads a Parquet (or CSV) table with the columns a reader needs, or says in one line why not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa

from dwtune.core.errors import InputError
from dwtune.core.fit.bootstrap import PairPoints
from dwtune.core.length_check import LengthShift
from dwtune.core.projection import BudgetProjection, DepthProjection
from dwtune.core.records import TrialRecord
from dwtune.core.refine.signs import DeltaPoint
from dwtune.core.refine.transition import Transition
from dwtune.core.vocabulary import SIMULATED_COLUMN, PointKind, Stage
from dwtune.storage.provenance import frame_attrs, read_parquet_checked, write_parquet_atomic
from dwtune.storage.schemas import (
    CURVE_COLUMNS,
    CURVES_SCHEMA,
    PAIR_DELTAS_REQUIRED,
    RENAMED,
    TRANSITION_SCHEMA,
    TRIALS_SCHEMA,
)


def write_table(rows: Iterable[dict], schema: pa.Schema, path: Path, spec: dict | None) -> Path:
    """``rows`` as a Parquet file of ``schema`` at ``path``, with the provenance metadata."""
    return write_parquet_atomic(pa.Table.from_pylist(list(rows), schema=schema), path, spec)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_table(path: Path, required: tuple[str, ...], hint: str) -> pd.DataFrame:
    """A Parquet or CSV file with ``required`` columns; anything else is one-line InputError.

    A dwtune table's columns renamed since it was written take their new names
    (:data:`~dwtune.storage.schemas.RENAMED`); a Parquet file's provenance and column
    descriptions are the frame's ``attrs`` (as ``pd.read_parquet`` gives them)."""
    renamed = RENAMED.get(Path(path).name, {})
    if path.suffix != ".csv":
        table = read_parquet_checked(path, required, renamed)
        frame = table.to_pandas().rename(columns=renamed)
        frame.attrs = frame_attrs(table.schema)
        return frame
    if not path.is_file():
        raise InputError(f"{path}: no such file; pass an experiment directory, a Parquet or CSV")
    try:
        frame = pd.read_csv(path, skipinitialspace=True)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"{path}: cannot read it as CSV ({_first_line(exc)})") from exc
    frame = frame.rename(columns=renamed)
    require_columns(frame, required, path, hint)
    return frame


def require_columns(frame: pd.DataFrame, columns: tuple[str, ...], path: Path, hint: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; {hint}")


def is_simulated(frame: pd.DataFrame | None) -> bool:
    """Whether any row of a table is from the simulated backend (no column: it is not)."""
    if frame is None or SIMULATED_COLUMN not in frame.columns:
        return False
    return bool(frame[SIMULATED_COLUMN].fillna(False).astype(bool).any())


# --------------------------------------------------------------------------- trials and curves


def _trial_row(record: TrialRecord) -> dict:
    row = {name: getattr(record, name) for name in TRIALS_SCHEMA.names}
    if not row["point_kind"] and record.stage == Stage.GRID:  # a record from before the column
        row["point_kind"] = PointKind.GRID.value
    return row


def trials_table(records: Sequence[TrialRecord]) -> pa.Table:
    return pa.Table.from_pylist([_trial_row(r) for r in records], schema=TRIALS_SCHEMA)


def _curve_value(point: dict, key: str, integer: bool) -> float | int | None:
    value = point.get(key)
    if value is None:
        return None
    return int(value) if integer else float(value)


def curves_table(records: Sequence[TrialRecord]) -> pa.Table:
    integer = {f.name for f in CURVES_SCHEMA if pa.types.is_integer(f.type)}
    rows = [
        {"trial_id": r.trial_id}
        | {
            column: _curve_value(point, key, column in integer)
            for column, key in CURVE_COLUMNS.items()
        }
        for r in records
        for point in r.curve
    ]
    return pa.Table.from_pylist(rows, schema=CURVES_SCHEMA)


# --------------------------------------------------------------------------- refine results


def transition_rows(transitions: Sequence[Transition]) -> list[dict]:
    names = TRANSITION_SCHEMA.names
    return [
        {name: t.pair if name == "pair" else getattr(t, name) for name in names}
        for t in transitions
    ]


def length_check_rows(rows: Sequence[LengthShift]) -> list[dict]:
    return [{"pair": row.pair, **dataclasses.asdict(row)} for row in rows]


def pair_delta_rows(pairs: Sequence[PairPoints], simulated: bool) -> list[dict]:
    """One row per (pair, point, seed); a point without per-seed ids gets null seeds."""
    rows = []
    for pair in pairs:
        for point in pair.points:
            count = len(point.deltas)
            seeds = point.seeds if len(point.seeds) == count else (None,) * count
            flags = point.unstable or ("",) * count
            for seed, delta, flag in zip(seeds, point.deltas, flags, strict=True):
                rows.append(
                    {
                        "pair": pair.label,
                        "depth_shallow": int(pair.depth_shallow),
                        "depth_deep": int(pair.depth_deep),
                        "n": float(point.n),
                        "seed": seed,
                        "delta": float(delta),
                        "extra_sd": float(point.extra_sd),
                        SIMULATED_COLUMN: simulated,
                        "failures_deep": point.failures_deep,
                        "failures_shallow": point.failures_shallow,
                        "unstable": flag,
                    }
                )
    return rows


def _failures(at: pd.DataFrame) -> dict:
    """A point's failure counts and unstable flags (absent in tables written before them)."""
    found: dict = {}
    for column in ("failures_deep", "failures_shallow"):
        if column in at and at[column].notna().all():
            found[column] = int(at[column].iloc[0])
    if "unstable" in at and at["unstable"].notna().all() and (at["unstable"] != "").any():
        found["unstable"] = tuple(str(v) for v in at["unstable"])
    return found


def _delta_point(n: float, at: pd.DataFrame) -> DeltaPoint:
    seeds = tuple(int(s) for s in at["seed"]) if at["seed"].notna().all() else ()
    extra = float(at["extra_sd"].iloc[0]) if "extra_sd" in at else 0.0
    return DeltaPoint(
        float(n),
        tuple(float(d) for d in at["delta"]),
        extra_sd=extra if math.isfinite(extra) else 0.0,
        seeds=seeds,
        **_failures(at),
    )


def read_pair_deltas(path: Path) -> list[PairPoints]:
    """Per pair (in the table's order) its DeltaPoints sorted by size."""
    frame = read_parquet_checked(path, PAIR_DELTAS_REQUIRED).to_pandas()
    pairs = []
    for label, rows in frame.groupby("pair", sort=False):
        points = tuple(_delta_point(n, at) for n, at in rows.groupby("n", sort=True))
        first = rows.iloc[0]
        depths = int(first["depth_shallow"]), int(first["depth_deep"])
        pairs.append(PairPoints(str(label), *depths, points))
    return pairs


# --------------------------------------------------------------------------- projections


def projection_row(p: BudgetProjection | DepthProjection, simulated: bool) -> dict:
    """One row of projections.parquet; the given input has NaN bounds (it is not estimated)."""
    nan = math.nan
    if isinstance(p, BudgetProjection):
        n, n_lo, n_hi, query = p.budget, nan, nan, "budget"
        depth, d_lo, d_hi = p.depth, p.depth_lo, p.depth_hi
    else:
        n, n_lo, n_hi, query = p.n_star, p.n_lo, p.n_hi, "depth"
        depth, d_lo, d_hi = p.depth, nan, nan
    return {
        "law": p.law,
        "query": query,
        "n_params": n,
        "n_params_lo": n_lo,
        "n_params_hi": n_hi,
        "depth": depth,
        "depth_lo": d_lo,
        "depth_hi": d_hi,
        "width": p.width,
        "width_lo": p.width_lo,
        "width_hi": p.width_hi,
        "level": p.level,
        SIMULATED_COLUMN: simulated,
    }
