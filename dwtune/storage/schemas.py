"""Every Parquet schema of an experiment folder, in one place.

A column of ``trials.parquet`` is a :class:`~dwtune.core.records.TrialRecord` field and a column
of ``transitions.parquet`` a :class:`~dwtune.core.transitions.Transition` field (of
``length_check.parquet`` a :class:`~dwtune.core.length_check.LengthShift` field), with the Arrow
type of the field's annotation; adding a field to a record adds its column. ``curves.parquet``,
``pair_deltas.parquet`` and ``projections.parquet`` are written out here field by field.
Readers (the report, the fit stage, ``dwtune fit``) take their column names from here.
"""

from __future__ import annotations

import dataclasses
import typing

import pyarrow as pa

from dwtune.core import vocabulary
from dwtune.core.length_check import LengthShift
from dwtune.core.records import TrialRecord
from dwtune.core.transitions import Transition

ARROW_TYPES = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
    tuple[float, ...]: pa.list_(pa.float64()),  # e.g. every crossing of a non-monotone pair
}


def fields_schema(record_type: type, exclude: tuple[str, ...] = ()) -> list[pa.Field]:
    """One Arrow field per dataclass field of ``record_type`` (in order), except ``exclude``."""
    hints = typing.get_type_hints(record_type)
    return [
        pa.field(f.name, ARROW_TYPES[hints[f.name]])
        for f in dataclasses.fields(record_type)
        if f.name not in exclude
    ]


# Not columns: the curve goes to curves.parquet; the window losses stay in the record.
TRIAL_RECORD_ONLY = ("curve", "val_windows")
TRIALS_SCHEMA = pa.schema(fields_schema(TrialRecord, exclude=TRIAL_RECORD_ONLY))

# The pair label first; the stop reason is for the console and the report, not a column.
TRANSITION_SCHEMA = pa.schema(
    [pa.field("pair", pa.string()), *fields_schema(Transition, exclude=("reason",))]
)

# length_check.parquet: the pair label first, then every LengthShift field.
LENGTH_CHECK_SCHEMA = pa.schema([pa.field("pair", pa.string()), *fields_schema(LengthShift)])

# curves.parquet column -> metric key of a curve point; "time" is elapsed seconds.
CURVE_COLUMNS = {
    "step": vocabulary.STEP,
    "tokens": vocabulary.TOKENS,
    "train_loss": vocabulary.TRAIN_LOSS,
    "val_loss": vocabulary.VAL_LOSS,
    "lr": vocabulary.LR,
    "time": vocabulary.ELAPSED_S,
}
CURVE_INTEGER_COLUMNS = ("step", "tokens")
CURVES_SCHEMA = pa.schema(
    [
        pa.field("trial_id", pa.string()),
        *(
            pa.field(c, pa.int64() if c in CURVE_INTEGER_COLUMNS else pa.float64())
            for c in CURVE_COLUMNS
        ),
    ]
)

# pair_deltas.parquet: every paired Δ of the refine stage, one row per (pair, point, seed).
# delta in nats (±inf for a failed training of one side); extra_sd (nats) is shared by the
# point's Δs; failures_deep/_shallow count the point's failed, diverged or unstable trainings
# of each net; unstable says which of this seed's two trainings the instability rule flagged
# ("deep", "shallow", "deepshallow" or "", dwtune.core.pair_points).
PAIR_DELTAS_SCHEMA = pa.schema(
    [
        pa.field("pair", pa.string(), nullable=False),
        pa.field("depth_shallow", pa.int64(), nullable=False),
        pa.field("depth_deep", pa.int64(), nullable=False),
        pa.field("n", pa.float64(), nullable=False),
        pa.field("seed", pa.int64()),
        pa.field("delta", pa.float64()),
        pa.field("extra_sd", pa.float64()),
        pa.field(vocabulary.SIMULATED_COLUMN, pa.bool_(), nullable=False),
        pa.field("failures_deep", pa.int64()),
        pa.field("failures_shallow", pa.int64()),
        pa.field("unstable", pa.string()),
    ]
)
# The columns every pair_deltas.parquet has had (failures and unstable came later).
PAIR_DELTAS_REQUIRED = tuple(PAIR_DELTAS_SCHEMA.names[:6])

# projections.parquet: the fit stage's projections of every law, one row per query.
PROJECTION_SCHEMA = pa.schema(
    [
        pa.field("law", pa.string(), nullable=False),  # "study" or a reference name
        pa.field("query", pa.string(), nullable=False),  # "budget" or "depth": the given input
        pa.field("n_params", pa.float64()),  # budget, or transition size N* (12·L·dx²)
        pa.field("n_params_lo", pa.float64()),
        pa.field("n_params_hi", pa.float64()),
        pa.field("depth", pa.float64()),  # optimal depth (layers), or the given depth
        pa.field("depth_lo", pa.float64()),
        pa.field("depth_hi", pa.float64()),
        pa.field("width", pa.float64()),  # dx at the projection
        pa.field("width_lo", pa.float64()),
        pa.field("width_hi", pa.float64()),
        pa.field("level", pa.float64()),  # confidence level of every _lo/_hi pair
        pa.field(vocabulary.SIMULATED_COLUMN, pa.bool_(), nullable=False),
    ]
)

# What projections.parquet holds: every law at budgets log-spaced from the study's smallest size
# (or 1e6) to CURVE_MAX, CURVE_STEPS_PER_DECADE per decade (figure 4's curve), and at the
# budgets tabulated (the spec's fit.budgets, else DEFAULT_BUDGETS: GPT-3, 1T, the curve's end);
# the transition size of every measured depth and of GPT-3's.
CURVE_MAX = 1e13  # parameters
CURVE_STEPS_PER_DECADE = 8
DEFAULT_BUDGETS = (1.75e11, 1e12, 1e13)
GPT3 = {"budget": 1.75e11, "depth": 96, "width": 12288}


def columns(schema: pa.Schema, *names: str) -> tuple[str, ...]:
    """``names``, each checked to be a column of ``schema`` (a renamed column fails at import)."""
    unknown = [n for n in names if n not in schema.names]
    if unknown:
        raise AssertionError(f"not columns of the schema: {unknown}")
    return names
