"""Parquet schemas, derived from the record dataclasses rather than restated by hand.

A column of ``trials.parquet`` is a :class:`~dwtune.core.records.TrialRecord` field and a column
of ``transitions.parquet`` a :class:`~dwtune.core.transitions.Transition` field (of
``length_check.parquet`` a :class:`~dwtune.core.length_check.LengthShift` field), with the Arrow
type of the field's annotation; adding a field to a record adds its column. Readers (the report,
``dwtune fit``) take their column names from here.
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
