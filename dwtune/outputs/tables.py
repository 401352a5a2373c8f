"""Derived artefacts of an experiment: Parquet tables and TensorBoard event files.

Everything here is computed from the trial records of
:class:`~dwtune.storage.store.ExperimentStore`,
so it can be rebuilt at any time (``dwtune export``) and is never the only copy of a result.

- ``trials.parquet``: one row per trial, exactly the :class:`~dwtune.core.records.TrialRecord`
  fields except the curve.
- ``curves.parquet``: one row per report of every trial (step, tokens, losses, lr, time).
- ``tb/<trial name>/``: TensorBoard scalars of every trial (each key of
  :data:`dwtune.core.vocabulary.CURVE_SCALARS` against step, train and validation loss also against
  tokens) and its HParams entry (depth, width, budget, seed -> final validation loss).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import pyarrow as pa

from dwtune.core import vocabulary
from dwtune.core.records import TrialRecord
from dwtune.core.vocabulary import CURVES_FILE, TB_DIR, TRIALS_FILE
from dwtune.storage.provenance import refuse_losing_trials, write_parquet_atomic
from dwtune.storage.schemas import CURVE_COLUMNS, CURVES_SCHEMA, TRIALS_SCHEMA
from dwtune.storage.store import ExperimentStore

# TensorBoard: losses also plotted against tokens seen, under these tags.
BY_TOKENS = {
    key: f"{key}_by_{vocabulary.TOKENS}" for key in (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS)
}
SIMULATED_SUFFIX = "-SIMULATED"
SIMULATED_NOTE = "SIMULATED backend: a synthetic loss surface, not a measurement of a real model."
HPARAMS = (
    "depth",
    "width",
    "heads",
    "budget",
    "seed",
    "stage",
    "status",
    "params_non_embedding",
    "simulated",
)
HPARAM_METRICS = ("final_val_loss", "best_val_loss")


# --------------------------------------------------------------------------- Parquet


def trials_table(records: list[TrialRecord]) -> pa.Table:
    rows = [{name: getattr(r, name) for name in TRIALS_SCHEMA.names} for r in records]
    return pa.Table.from_pylist(rows, schema=TRIALS_SCHEMA)


def _curve_value(point: dict, key: str, integer: bool) -> float | int | None:
    value = point.get(key)
    if value is None:
        return None
    return int(value) if integer else float(value)


def curves_table(records: list[TrialRecord]) -> pa.Table:
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


def export_experiment(store: ExperimentStore) -> tuple[Path, Path]:
    """Write ``trials.parquet`` and ``curves.parquet`` of every recorded trial."""
    spec_dict = store.load_spec_dict()
    records = store.records()
    refuse_losing_trials(store.root / TRIALS_FILE, {r.trial_id for r in records})
    trials_path = write_parquet_atomic(trials_table(records), store.root / TRIALS_FILE, spec_dict)
    curves_path = write_parquet_atomic(curves_table(records), store.root / CURVES_FILE, spec_dict)
    return trials_path, curves_path


# --------------------------------------------------------------------------- TensorBoard


def tensorboard_problem() -> str | None:
    """None when event files can be written, else why not (one line)."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError as exc:
        return (
            f"tensorboardX is not importable ({exc}); no TensorBoard event files will be "
            f"written; install it with `pip install tensorboardX`"
        )
    return None


def run_dir(store_root: Path, name: str, simulated: bool) -> Path:
    """``<experiment>/tb/<trial name>``; simulated runs carry a suffix that says so."""
    return Path(store_root) / TB_DIR / (name + (SIMULATED_SUFFIX if simulated else ""))


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def add_point(writer, point: dict) -> None:
    """Write one curve point's scalars (against step, and losses against tokens)."""
    step = int(point.get(vocabulary.STEP, 0))
    for key in vocabulary.CURVE_SCALARS:
        if _finite(point.get(key)):
            writer.add_scalar(key, float(point[key]), global_step=step)
    tokens = point.get(vocabulary.TOKENS)
    for key, tag in BY_TOKENS.items():
        if _finite(point.get(key)) and tokens is not None:
            writer.add_scalar(tag, float(point[key]), global_step=int(tokens))


def open_writer(path: Path, simulated: bool):
    """An :class:`~dwtune.outputs.event_files.EventFile` in ``path`` (written in this thread,
    so a full disk is an OSError here); simulated runs get a text note saying so."""
    from dwtune.outputs.event_files import EventFile

    writer = EventFile(path)
    if simulated:
        writer.add_text("backend", SIMULATED_NOTE, global_step=0)
    return writer


def _add_hparams(writer, record: TrialRecord) -> None:
    from tensorboardX.summary import hparams

    values = dataclasses.asdict(record)
    hparam_dict = {name: values[name] for name in HPARAMS}
    metric_dict = {f"hparam/{name}": float(values[name]) for name in HPARAM_METRICS}
    for summary in hparams(hparam_dict, metric_dict):
        writer.add_summary(summary)
    for tag, value in metric_dict.items():
        if math.isfinite(value):  # a failed trial has none (and tensorboardX warns on NaN)
            writer.add_scalar(tag, value, global_step=record.steps)


def write_trial_board(store_root: Path, name: str, record: TrialRecord) -> Path:
    """(Re)write a finished trial's event files from its record: its whole curve and HParams.

    The directory is replaced, so points a live writer or an interrupted attempt left there
    never show twice.
    """
    path = run_dir(store_root, name, record.simulated)
    shutil.rmtree(path, ignore_errors=True)
    with open_writer(path, record.simulated) as writer:
        for point in record.curve:
            add_point(writer, point)
        _add_hparams(writer, record)
    return path
