"""The points a fit is made from: a transitions table (an experiment's, or a copy of it) or a
published CSV of ``depth,width,width_err``, read into a :class:`FitInput`.

A bracketed pair is a point (its ``N*`` and σ(ln N*)); any other pair is listed with its bound
(:class:`~dwtune.core.fit.CensoredPair`), and every pair of a transitions table is also an
observation of the interval-censored likelihood. A bad table is one line naming the file, the
column, the row and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dwtune.core.errors import InputError, shown
from dwtune.core.fit import (
    CensoredPair,
    FitResult,
    TransitionObservation,
    fit_law,
    fit_transitions,
)
from dwtune.core.vocabulary import TRANSITIONS_FILE, TransitionStatus
from dwtune.storage.store import ExperimentStore
from dwtune.storage.tables import is_simulated, read_table, require_columns

TRANSITION_COLUMNS = ("status", "depth_deep", "width_deep", "width_deep_err")

CSV_COLUMNS = ("depth", "width", "width_err")

TRANSITIONS_HINT = "expected the transitions schema (pair, depth_deep, status, width_deep, ...)"

CSV_HINT = "expected a header line depth,width,width_err"

SIGMA_COLUMN = "sigma_ln"  # σ(ln N*) where the transitions table carries it


@dataclass(frozen=True)
class FitInput:
    """Points to fit (bracketed transitions) plus the pairs listed but not fitted."""

    depths: tuple[float, ...]
    widths: tuple[float, ...]
    width_errs: tuple[float, ...]
    labels: tuple[str, ...]
    censored: tuple[CensoredPair, ...]
    simulated: bool
    source: str
    seeds: tuple[int, ...] = ()  # seeds behind each point, where the table says
    # Every pair of a transitions table (censored ones with their bound); () for a CSV table.
    observations: tuple[TransitionObservation, ...] = ()

    def fit(self) -> FitResult:
        """The censored likelihood over every pair of a study; WLS for a published table.

        Without censored pairs the two are the same fit (dwtune.core.fit.censored)."""
        if self.observations:
            return fit_law(self.observations, listed=self.censored)
        return fit_transitions(
            self.depths, self.widths, self.width_errs, labels=self.labels, censored=self.censored
        )


def _numeric(frame: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """The column as floats; text that is not a number names the column and row."""
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() & frame[column].notna()
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise InputError(
            f"{path}: column {column} row {row + 1}: got {shown(frame[column].iloc[row])}; "
            "expected a number"
        )
    return values.astype(float)


def _row_number(row: pd.Series, name: str) -> float:
    value = row.get(name, math.nan)
    try:
        return float(value) if value is not None and pd.notna(value) else math.nan
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"pair {row.get('pair', '?')}: {name} = {shown(value)} is not a number"
        ) from exc


def censored_pair(row: pd.Series) -> CensoredPair:
    """A transitions row that is not bracketed, as the fit lists it (NaN where unknown)."""
    deep, shallow, seeds = (_row_number(row, k) for k in ("depth_deep", "depth_shallow", "seeds"))
    if not math.isfinite(deep):
        raise InputError(f"pair {row.get('pair', '?')}: depth_deep is missing; re-export it")
    return CensoredPair(
        pair=str(row.get("pair", f"{shallow:g}-{deep:g}")),
        status=str(row["status"]),
        depth_shallow=int(shallow) if math.isfinite(shallow) else 0,
        depth_deep=int(deep),
        n_low=_row_number(row, "n_star_low"),
        n_high=_row_number(row, "n_star_high"),
        seeds=int(seeds) if math.isfinite(seeds) else 0,
    )


def _sigma_ln(row: pd.Series) -> tuple[float, str]:
    """σ(ln N*) of a row and the column it came from: its own column where the table has
    one, else 2·width_err/width."""
    own = _row_number(row, SIGMA_COLUMN) if SIGMA_COLUMN in row.index else math.nan
    if math.isfinite(own):
        return own, SIGMA_COLUMN
    err = _row_number(row, "width_deep_err")
    return 2.0 * err / _row_number(row, "width_deep"), "width_err"


def observation(row: pd.Series, label: str) -> TransitionObservation:
    """A transitions row as the fit's observation (bound of a censored pair: its range end)."""
    status = str(row["status"])
    listed = censored_pair(row)
    seeds = listed.seeds
    if status != TransitionStatus.BRACKETED:
        bound = listed.bound
        log_n = math.log(bound) if math.isfinite(bound) else math.nan
        return TransitionObservation(
            label, listed.depth_shallow, listed.depth_deep, status, log_n, math.nan, seeds,
            direction=listed.direction if status == TransitionStatus.UNDECIDED else None,
        )  # fmt: skip
    n_star = _row_number(row, "n_star")
    if not (math.isfinite(n_star) and n_star > 0):  # older tables: N* from the width
        n_star = 12.0 * listed.depth_deep * _row_number(row, "width_deep") ** 2
    sigma, field = _sigma_ln(row)
    return TransitionObservation(
        label, listed.depth_shallow, listed.depth_deep, status, math.log(n_star), sigma, seeds,
        sigma_field=field,
    )  # fmt: skip


def points_from_transitions(frame: pd.DataFrame, path: Path) -> FitInput:
    """Bracketed rows are points (depth_deep, width_deep, width_deep_err); others are listed."""
    require_columns(frame, TRANSITION_COLUMNS, path, TRANSITIONS_HINT)
    _check_status(frame, path)
    bracketed = frame[frame["status"] == TransitionStatus.BRACKETED]
    labels = (
        [f"pair {p}" for p in bracketed["pair"]]
        if "pair" in frame.columns
        else [f"row {i + 1}" for i in bracketed.index]
    )
    return FitInput(
        depths=tuple(_numeric(bracketed, "depth_deep", path)),
        widths=tuple(_numeric(bracketed, "width_deep", path)),
        width_errs=tuple(_numeric(bracketed, "width_deep_err", path)),
        labels=tuple(labels),
        censored=tuple(
            censored_pair(r)
            for _, r in frame[frame["status"] != TransitionStatus.BRACKETED].iterrows()
        ),
        simulated=is_simulated(frame),
        source=str(path),
        seeds=tuple(_seed_counts(bracketed, path)),
        observations=tuple(
            observation(row, _pair_label(row, i)) for i, (_, row) in enumerate(frame.iterrows())
        ),
    )


def _pair_label(row: pd.Series, index: int) -> str:
    return f"pair {row['pair']}" if "pair" in row.index else f"row {index + 1}"


MAX_SEED_COUNT = 10**6  # seeds behind one transition point


def _seed_counts(rows: pd.DataFrame, path: Path) -> list[int]:
    if "seeds" not in rows.columns:
        return []
    counts = _numeric(rows, "seeds", path).fillna(0)
    bad = ~counts.between(0, MAX_SEED_COUNT) | (counts != counts.round())
    if bad.any():
        raise InputError(
            f"{path}: column seeds: got {shown(counts[bad].iloc[0])}; expected a whole count "
            f"0..{MAX_SEED_COUNT}"
        )
    return [int(n) for n in counts]


def _check_status(frame: pd.DataFrame, path: Path) -> None:
    """The status column holds strings; lists or numbers there are not a dwtune export."""
    bad = [v for v in frame["status"] if not isinstance(v, str)]
    if bad:
        raise InputError(
            f"{path}: column status: got {shown(bad[0])}; expected strings such as 'bracketed'; "
            f"{TRANSITIONS_HINT}"
        )


def points_from_csv(frame: pd.DataFrame, path: Path) -> FitInput:
    """A published table: one row per transition, columns depth, width, width_err."""
    return FitInput(
        depths=tuple(_numeric(frame, "depth", path)),
        widths=tuple(_numeric(frame, "width", path)),
        width_errs=tuple(_numeric(frame, "width_err", path)),
        labels=tuple(f"{path.name} row {i + 1}" for i in range(len(frame))),
        censored=(),
        simulated=is_simulated(frame),
        source=str(path),
    )


def load_fit_input(target: str | Path) -> FitInput:
    """Points from an experiment directory, a transitions Parquet file or a CSV table."""
    path = Path(target)
    if path.is_dir():
        path = ExperimentStore(path).inside(path / TRANSITIONS_FILE)
        if not path.is_file():
            raise InputError(
                f"{path}: not found; run the refine stage first (dwtune refine {path.parent}) "
                "or pass a CSV with columns depth,width,width_err"
            )
    if path.suffix not in (".parquet", ".csv"):
        raise InputError(f"{path}: expected an experiment directory, a .parquet or a .csv file")
    if path.suffix == ".csv":
        return points_from_csv(read_table(path, CSV_COLUMNS, CSV_HINT), path)
    return points_from_transitions(read_table(path, TRANSITION_COLUMNS, TRANSITIONS_HINT), path)
