"""Read an experiment's results for the report: tables into DataFrames, the fit files back.

Nothing here computes the fit: ``fit.json`` and ``projections.parquet`` are written once by the
pipeline's fit stage (:mod:`dwtune.study.fit_stage`) and read back here, so the report, the
console and the files never disagree. Column names come from :mod:`dwtune.storage.schemas`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from dwtune.core.errors import InputError
from dwtune.core.fit import FitResult
from dwtune.core.projection import DepthWidthLaw, no_projection_reason
from dwtune.core.units import parse_size
from dwtune.core.vocabulary import (
    COMPLETED_STATUSES,
    FIT_FILE,
    LENGTH_CHECK_FILE,
    OTHER_LENGTH_STAGES,
    PROJECTIONS_FILE,
    SPEC_FILE,
    TB_DIR,
    TB_FIT_DIR,
    TRANSITIONS_FILE,
    TRIALS_FILE,
)
from dwtune.storage.fit_json import fit_from_dict, read_fit_json
from dwtune.storage.fit_points import FitInput, points_from_transitions
from dwtune.storage.schemas import (
    CURVES_SCHEMA,
    LENGTH_CHECK_SCHEMA,
    PROJECTION_SCHEMA,
    TRANSITION_SCHEMA,
    TRIALS_SCHEMA,
    columns,
)
from dwtune.storage.tables import read_table

LEVEL = 0.95
TB_FIT = Path(TB_DIR) / TB_FIT_DIR
# Budgets (parameters) tabulated when the spec names none: GPT-3, 1T, the curve's end.
DEFAULT_BUDGETS = (1.75e11, 1e12, 1e13)
GPT3 = {"budget": 1.75e11, "depth": 96, "width": 12288}
CURVE_MAX = 1e13  # parameters; figure 4 runs up to here
CURVE_STEPS_PER_DECADE = 8


# The columns the report needs from each table.
CURVE_COLUMNS = columns(CURVES_SCHEMA, "trial_id", "step", "val_loss")
TRIAL_COLUMNS = columns(
    TRIALS_SCHEMA, "depth", "budget", "params_non_embedding", "status", "best_val_loss"
)
PAIR_COLUMNS = columns(TRANSITION_SCHEMA, "pair", "depth_shallow", "depth_deep", "status")
LENGTH_COLUMNS = columns(
    LENGTH_CHECK_SCHEMA, "pair", "factor", "status", "n_star", "n_star_check", "moved"
)
PROJECTION_COLUMNS = tuple(PROJECTION_SCHEMA.names)
PROJECTIONS_HINT = "expected the projections schema of the fit stage; rerun `dwtune report`"
SIM_BANNER = "SIMULATED DATA: a planted loss surface, not a measurement of any model"


@dataclasses.dataclass(frozen=True)
class Study:
    """What the experiment directory holds, read once."""

    exp_dir: Path
    name: str
    trials: pd.DataFrame  # every row of trials.parquet (empty if the file is missing)
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


@dataclasses.dataclass(frozen=True)
class FitOutcome:
    points: FitInput | None
    fit: FitResult | None
    law: DepthWidthLaw | None  # None when there is no fit or the slope is not positive
    reason: str  # why there is no fit / no projection ("" when there is)


# ---------------------------------------------------------------- loading


def _any_true(frame: pd.DataFrame | None) -> bool:
    if frame is None or "simulated" not in frame.columns:
        return False
    return bool(frame["simulated"].fillna(False).astype(bool).any())


def _read_spec(exp_dir: Path) -> tuple[dict | None, str]:
    path = exp_dir / SPEC_FILE
    if not path.is_file():
        return None, ""
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return None, f"{SPEC_FILE} could not be read ({type(exc).__name__}); defaults used"
    return (spec if isinstance(spec, dict) else None), ""


def _read_trials(exp_dir: Path) -> tuple[pd.DataFrame, str]:
    path = exp_dir / TRIALS_FILE
    if not path.is_file():
        note = f"{TRIALS_FILE} not found (run `dwtune export {exp_dir}`): no losses to plot"
        return pd.DataFrame({c: pd.Series(dtype=float) for c in TRIAL_COLUMNS}), note
    trials = read_table(path, TRIAL_COLUMNS, "expected the trials schema of dwtune export")
    if "stage" in trials.columns:  # search and length-check trials train other lengths
        trials = trials[~trials.stage.isin(OTHER_LENGTH_STAGES)]
    return trials, ""


def _read_length_check(exp_dir: Path) -> pd.DataFrame | None:
    path = exp_dir / LENGTH_CHECK_FILE
    if not path.is_file():
        return None
    return read_table(path, LENGTH_COLUMNS, "expected the length_check schema; rerun the study")


def _read_transitions(exp_dir: Path) -> tuple[pd.DataFrame | None, str]:
    path = exp_dir / TRANSITIONS_FILE
    if not path.is_file():
        return None, f"{TRANSITIONS_FILE} not found: no refine stage results yet"
    return read_table(path, PAIR_COLUMNS, "expected the transitions schema"), ""


def load_study(exp_dir: str | Path) -> Study:
    exp_dir = Path(exp_dir).resolve()
    if not exp_dir.is_dir():
        raise InputError(f"{exp_dir}: not a directory; pass an experiment directory")
    if not (exp_dir / TRIALS_FILE).is_file() and not (exp_dir / TRANSITIONS_FILE).is_file():
        raise InputError(
            f"{exp_dir}: no {TRIALS_FILE} or {TRANSITIONS_FILE}; run `dwtune run` or "
            f"`dwtune export {exp_dir}` first"
        )
    trials, trials_note = _read_trials(exp_dir)
    transitions, transitions_note = _read_transitions(exp_dir)
    spec, spec_note = _read_spec(exp_dir)
    name = str(spec.get("name", exp_dir.name)) if spec else exp_dir.name
    return Study(
        exp_dir=exp_dir,
        name=name,
        trials=trials,
        transitions=transitions,
        simulated=_any_true(trials) or _any_true(transitions),
        spec=spec,
        notes=tuple(n for n in (trials_note, transitions_note, spec_note) if n),
        length_check=_read_length_check(exp_dir),
    )


# ---------------------------------------------------------------- tables


def cell_table(completed: pd.DataFrame) -> pd.DataFrame:
    """One row per (depth, budget): mean size, loss mean/sd over seeds, seed count."""
    if completed.empty:
        columns = ["depth", "budget", "size", "width", "loss", "loss_sd", "n"]
        return pd.DataFrame(columns=columns)
    frame = completed.assign(loss=completed["best_val_loss"].astype(float))
    if "width" not in frame.columns:
        frame = frame.assign(width=np.nan)
    grouped = frame.groupby(["depth", "budget"], as_index=False)
    return grouped.agg(
        size=("params_non_embedding", "mean"),
        width=("width", "first"),
        loss_sd=("loss", "std"),  # NaN with one seed
        n=("loss", "size"),
        loss=("loss", "mean"),
    ).sort_values(["depth", "size"])


def depth_pairs(study: Study, cells: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(label, shallow, deep): the transitions' pairs, else neighbouring depths of the grid."""
    if study.transitions is not None and not study.transitions.empty:
        rows = study.transitions.drop_duplicates("pair")
        return [
            (str(r.pair), int(r.depth_shallow), int(r.depth_deep))
            for r in rows.itertuples(index=False)
        ]
    depths = sorted(int(d) for d in cells["depth"].unique())
    return [(f"{s}-{d}", s, d) for s, d in itertools.pairwise(depths)]


def delta_table(cells: pd.DataFrame, shallow: int, deep: int) -> pd.DataFrame:
    """Δ loss = deep − shallow at each budget both depths reached (same target size).

    The x position is the geometric mean of the two nets' non-embedding sizes (they differ
    only by width rounding); the error is the unpaired standard error of the difference.
    """
    left = cells[cells["depth"] == shallow]
    right = cells[cells["depth"] == deep]
    both = left.merge(right, on="budget", suffixes=("_s", "_d"))
    return pd.DataFrame(
        {
            "size": np.sqrt(both["size_s"].astype(float) * both["size_d"].astype(float)),
            "delta": both["loss_d"] - both["loss_s"],
            "err": np.sqrt(
                both["loss_sd_d"] ** 2 / both["n_d"] + both["loss_sd_s"] ** 2 / both["n_s"]
            ),
            "seeds": np.minimum(both["n_d"], both["n_s"]),
        }
    ).sort_values("size")


def best_depth_table(cells: pd.DataFrame) -> pd.DataFrame:
    """At each budget where every depth trained, the depth with the lowest mean loss and its
    margin over the runner-up. A refine point trains only its pair's two depths: its "best
    depth" would be the better of two, not of the study's depths."""
    rows = []
    depths = cells["depth"].nunique()
    for budget, group in cells.groupby("budget"):
        if group["depth"].nunique() < depths:
            continue
        ranked = group.sort_values("loss")
        best = ranked.iloc[0]
        margin = ranked.iloc[1]["loss"] - best["loss"] if len(ranked) > 1 else math.nan
        rows.append(
            {
                "budget": budget,
                "depth": int(best["depth"]),
                "width": best["width"],
                "loss": best["loss"],
                "margin": margin,
                "seeds": int(best["n"]),
            }
        )
    return pd.DataFrame(rows)


def table_budgets(study: Study) -> tuple[list[float], str]:
    """Budgets to tabulate: the spec's ``fit.budgets`` if it has them, else the defaults."""
    section = (study.spec or {}).get("fit")
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


def study_depths(outcome: FitOutcome) -> list[float]:
    measured = set(outcome.points.depths) if outcome.points is not None else set()
    return sorted(measured | {float(GPT3["depth"])})


# ---------------------------------------------------------------- the fit stage's files


def load_fit(study: Study) -> tuple[FitOutcome, pd.DataFrame, dict]:
    """(outcome, projection rows, fit.json record) as the fit stage wrote them."""
    path = study.exp_dir / FIT_FILE
    if not path.is_file():
        raise InputError(
            f"{path}: no such file; the fit stage writes it (`dwtune run`, `dwtune refine` "
            f"or `dwtune report {study.exp_dir}`)"
        )
    record = read_fit_json(path)
    points = None
    if study.transitions is not None:
        points = points_from_transitions(study.transitions, study.exp_dir / TRANSITIONS_FILE)
    fit = fit_from_dict(record, path) if record.get("status") == "fitted" else None
    law = None
    if fit is not None and fit.b > 0:
        law = DepthWidthLaw.from_fit(fit, source=points.source if points else str(path))
    reason = no_projection_reason(fit) if fit is not None else str(record.get("reason", ""))
    rows = read_table(study.exp_dir / PROJECTIONS_FILE, PROJECTION_COLUMNS, PROJECTIONS_HINT)
    return FitOutcome(points, fit, law, reason), rows, record
