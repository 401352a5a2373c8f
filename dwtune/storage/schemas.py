"""Every Parquet schema of an experiment folder, in one place.

A column of ``trials.parquet`` is a :class:`~dwtune.core.records.TrialRecord` field and a column
of ``transitions.parquet`` a :class:`~dwtune.core.refine.transition.Transition` field (of
``length_check.parquet`` a :class:`~dwtune.core.length_check.LengthShift` field), with the Arrow
type of the field's annotation; adding a field to a record adds its column. ``curves.parquet``,
``pair_deltas.parquet`` and ``projections.parquet`` are written out here field by field.
Readers (the report, the fit stage, ``dwtune fit``) take their column names from here.

Every column of every table has a description (:data:`DESCRIPTIONS`, one line with its unit):
written into the file as the field's ``description`` metadata, into ``df.attrs["columns"]``
of a table read back, and rendered as ``docs/outputs_columns.md``
(:func:`dwtune.outputs.columns_doc.columns_markdown`). A column without one fails at import.
A renamed column is listed in :data:`RENAMED`: tables written before the rename read back under
the new name.
"""

from __future__ import annotations

import dataclasses
import typing

import pyarrow as pa

from dwtune.core import vocabulary
from dwtune.core.length_check import LengthShift
from dwtune.core.records import TrialRecord
from dwtune.core.refine.transition import Transition
from dwtune.core.vocabulary import (
    CURVES_FILE,
    LENGTH_CHECK_FILE,
    PAIR_DELTAS_FILE,
    PROJECTIONS_FILE,
    TRANSITIONS_FILE,
    TRIALS_FILE,
)

ARROW_TYPES = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
    tuple[float, ...]: pa.list_(pa.float64()),  # e.g. every crossing of a non-monotone pair
}


# --------------------------------------------------------------------------- descriptions

# Columns several tables share, described once.
_PAIR = {
    "pair": "depth pair label '<shallower>-<deeper>' (e.g. '6-12')",
    "depth_shallow": "the pair's shallower depth Ls (layers)",
    "depth_deep": "the pair's deeper depth Ld (layers)",
}
_SIMULATED = {
    vocabulary.SIMULATED_COLUMN: "True when the row comes from the simulated trainer (a planted "
    "loss surface), never a measurement of a model"
}
_N_STAR = {
    "n_star": "transition size N* (parameters, the size convention's axis) where Δ = loss_Ld − "
    "loss_Ls turns from positive to negative; NaN unless bracketed",
    "n_star_low": "lower end of N*'s 95% interval (parameters); a censored pair's known bound",
    "n_star_high": "upper end of N*'s 95% interval (parameters); a censored pair's known bound",
    "sigma_ln": "standard error of ln N* (e-folds)",
}
_NOISE = {
    "noise_source": "where the paired-Δ noise came from: 'measured' (seeds gave degrees of "
    "freedom) or 'prior' (the spec's refine.noise_prior alone)",
}

# table file -> column -> one line: what the column holds, with its unit.
DESCRIPTIONS: dict[str, dict[str, str]] = {
    TRIALS_FILE: {
        "trial_id": "content identity of the training: a hash of shape, training config, data, "
        "seed and trainer (16 hex digits); its record is the JSON file of that name under trials/",
        "stage": "the stage that first asked for the training: grid (a pair's first points, "
        "a later refine.waves wave's too), refine, lr_search or length_check",
        "depth": "number of transformer layers L",
        "width": "model width dx (embedding dimension)",
        "heads": "attention heads per layer",
        "budget": "target size the shape was solved for (parameters); the trained size is "
        "params_non_embedding",
        "params_non_embedding": "non-embedding parameters 12·L·dx² (parameters)",
        "params_total": "every parameter, embeddings included (parameters)",
        "seed": "random seed (initialisation and data order)",
        "status": "how the training ended: finished, early_stopped, diverged or failed",
        "final_val_loss": "validation loss at the last evaluation (nats/token)",
        "best_val_loss": "lowest validation loss over the evaluations (nats/token): the loss "
        "every comparison uses",
        "steps": "optimiser steps trained",
        "tokens": "training tokens seen (tokens)",
        "wall_time_s": "wall-clock time of the training (seconds)",
        "tokens_per_s": "training throughput at the last report (tokens/second)",
        "mfu": "model FLOPs utilisation over the training (fraction of the peak of the devices "
        "it ran on: each report's weighted by the training time it covers); NaN for a "
        "simulated trial (no device)",
        "node": "the Ray node (IP address) that trained it; '' in process",
        "error": "the error of a failed training (one line); '' otherwise",
        **_SIMULATED,
        "surface": "the simulated loss surface (simulated.surface) of a simulated trial; '' "
        "otherwise",
        "val_loss_se": "standard error of final_val_loss over its evaluation batches (nats/token)",
        "lr": "peak learning rate the training used",
        "lr_source": "where the rate came from: spec (train.lr), search (the cell's own search), "
        "interpolated (between searched widths) or proposed (an lr_search trial)",
        "parametrization": "model.parametrization: sp, mup or completep",
        "head_dim": "width per attention head dx / heads",
        "compare": "space.compare: the axis shapes are compared at (params or flops)",
        "tokens_per_param": "training tokens per non-embedding parameter when the spec sets the "
        "length so (tokens/parameter); NaN otherwise",
        "pair": "the depth pair whose refine (or length_check) point asked for the training "
        "('6-12'); '' for a grid trial (it serves every pair of its depth) and an lr_search "
        "trial",
        "round": "the pair's refine round that asked for it (its Optuna trial number + 1); 0 "
        "for a grid or lr_search trial",
        "workers": "processes the training spanned: 1, or its workers when it was sharded "
        "(resources.workers_per_trial)",
        "gpu_seconds": "wall_time_s x the GPUs it held (seconds): its workers x resources.gpu, "
        "a packed trial's fraction of one GPU; 0 for a CPU or simulated trial (it held no "
        "GPU; its CPU time is wall_time_s x resources.cpu per worker)",
        "point_kind": "the kind of pair point it trains: grid, verify (more seeds at a point), "
        "bisect (a size inside the bracket) or scan (a probe beside it); a length_check trial "
        "has its retrained point's kind; '' for an lr_search trial",
        "stopped_step": "the step the training stopped at before its planned end (status "
        "early_stopped: refine.early_stop once its pair point's sign was settled, the lr "
        "search's ASHA, or train.patience); 0 when it ran to its end",
        "resumed_from_step": "the largest step an attempt of the training resumed from (the "
        "checkpoint of an attempt that failed, or of a driver that was stopped); 0 when every "
        "attempt started from step 0",
    },
    CURVES_FILE: {
        "trial_id": "the training (a trial_id of trials.parquet)",
        "step": "optimiser step of the report",
        "tokens": "training tokens seen at the report (tokens)",
        "train_loss": "training loss at the report (nats/token)",
        "val_loss": "validation loss at the report (nats/token); NaN between evaluations",
        "lr": "learning rate at the step (schedule applied)",
        "time_s": "wall-clock time since the training started (seconds)",
    },
    TRANSITIONS_FILE: {
        **_PAIR,
        "status": "where the pair's transition stands: bracketed, censored_low (the deeper net "
        "already wins at the smallest size), censored_high (it never wins), non_monotone or "
        "undecided",
        **{k: v for k, v in _N_STAR.items() if k != "sigma_ln"},
        "width_deep": "dx*: the deeper net's width at N*, sqrt(N* / (12·Ld)), the quantity the "
        "law fits (a real number, not a trained model's width); NaN unless bracketed",
        "width_deep_err": "standard error of dx* (width_deep · σ(ln N*) / 2)",
        "width_shallow": "the shallower net's width at N*, sqrt(N* / (12·Ls))",
        "trials": "new trainings the refine stage spent on the pair",
        "seeds": "most seeds used at one point of the pair",
        "rounds": "bisection rounds of the pair's refine stage",
        **_SIMULATED,
        "n_star_low_68": "lower end of N*'s 68% interval (parameters)",
        "n_star_high_68": "upper end of N*'s 68% interval (parameters)",
        "sigma_ln": _N_STAR["sigma_ln"],
        "crossings": "every sign change of Δ found (parameters); a non_monotone pair lists them "
        "all",
        **_NOISE,
        "failures_deep": "trainings of the deeper net that diverged, failed or went unstable",
        "failures_shallow": "trainings of the shallower net that diverged, failed or went unstable",
        "noise_dof": "degrees of freedom the seeds gave the noise estimate (the prior's excluded)",
        "unstable_deep": "of failures_deep, trainings flagged unstable (a loss far above its "
        "twins)",
        "unstable_shallow": "of failures_shallow, trainings flagged unstable",
        "statement": "the pair's answer in one sentence, as the report's Answer section quotes it",
        "capped_wide": "the pair stopped on its round cap with its bracket still wider than two "
        "tolerances, so its 95% interval spans the bracket",
        "kinked": "the pair is bracketed across a bend: beside the bracket Δ rises against ln N "
        "where one smooth crossing would fall",
    },
    LENGTH_CHECK_FILE: {
        **_PAIR,
        "factor": "the checked training length as a multiple of the spec's",
        "status": "the transition status at this length, from the checked points alone",
        **_N_STAR,
        "n_star_check": "N* at this training length (parameters); NaN unless bracketed",
        "n_star_check_low": "lower end of the checked N*'s 95% interval (parameters)",
        "n_star_check_high": "upper end of the checked N*'s 95% interval (parameters)",
        "sigma_ln_check": "standard error of the checked ln N* (e-folds)",
        "shift": "ln(N*_factor / N*): how far the transition moved (e-folds)",
        "shift_sigma": "shift / σ(ln N*) (standard errors)",
        "shift_interval": "shift over N*'s 95% half-interval on its side (1 = at the interval's "
        "edge)",
        "moved": "True when the checked N* lies outside N*'s 95% interval",
        "points": "points retrained at this length",
        "seeds": "most seeds at one of them",
        "trials": "trainings of this check (stage length_check)",
        **_SIMULATED,
        **_NOISE,
    },
    PAIR_DELTAS_FILE: {
        **_PAIR,
        "n": "size of the point (parameters, the deeper net's on the size convention's axis)",
        "seed": "the seed both nets trained with (paired); null for a point without per-seed ids",
        "delta": "Δ = best_val_loss(deeper) − best_val_loss(shallower) at equal size (nats/token); "
        "±inf where one side's training failed",
        "extra_sd": "error shared by every Δ of the point: evaluation and size-trend (nats/token)",
        **_SIMULATED,
        "failures_deep": "the point's failed, diverged or unstable trainings of the deeper net",
        "failures_shallow": "the point's failed, diverged or unstable trainings of the shallower "
        "net",
        "unstable": "which of this seed's trainings the instability rule flagged: 'deep', "
        "'shallow', 'deepshallow' or ''",
    },
    PROJECTIONS_FILE: {
        "law": "the law projected: 'study' (this study's fit) or a reference law's name",
        "query": "the given input: 'budget' (n_params given, depth and width projected) or "
        "'depth' (depth given, its transition size n_params projected)",
        "n_params": "the budget, or the transition size N*(L) = 12·L·exp(2(a + b·L)) (parameters)",
        "n_params_lo": "lower end of n_params' interval (parameters); NaN where it is given",
        "n_params_hi": "upper end of n_params' interval (parameters); NaN where it is given",
        "depth": "optimal depth L* at the budget (layers, real-valued), or the given depth",
        "depth_lo": "lower end of L*'s interval (layers); NaN where it is given",
        "depth_hi": "upper end of L*'s interval (layers); NaN where it is given",
        "width": "width dx = exp(a + b·L) at the projection",
        "width_lo": "lower end of the width's interval",
        "width_hi": "upper end of the width's interval",
        "level": "confidence level of every _lo/_hi pair (e.g. 0.95)",
        **_SIMULATED,
    },
}

# One line per table, for the generated documentation.
TABLE_DESCRIPTIONS = {
    TRIALS_FILE: "one row per training (grid, refine, lr_search and length_check stages)",
    CURVES_FILE: "one row per report of every training: its loss curve",
    TRANSITIONS_FILE: "one row per depth pair: the refine stage's transition N*",
    LENGTH_CHECK_FILE: "one row per bracketed pair and length factor (refine.length_check)",
    PAIR_DELTAS_FILE: "one row per (pair, point, seed): every paired Δ of the refine stage",
    PROJECTIONS_FILE: "one row per projection of the fit stage, for every law",
}

# Columns renamed since tables were first written: file -> {old name: new name}. A table
# written before reads back under the new names.
RENAMED = {CURVES_FILE: {"time": "time_s"}}

DESCRIPTION_KEY = b"description"  # Arrow field metadata key of a column's description


def described(table: str, fields: list[pa.Field]) -> pa.Schema:
    """The schema of ``table`` with each field's description as its metadata; a column
    without a description (or a description without a column) fails at import."""
    wanted = DESCRIPTIONS[table]
    names = [f.name for f in fields]
    missing = [n for n in names if n not in wanted]
    stale = [n for n in wanted if n not in names]
    if missing or stale:
        raise AssertionError(
            f"{table}: columns without a description {missing}, descriptions of no column {stale}"
        )
    return pa.schema([f.with_metadata({DESCRIPTION_KEY: wanted[f.name].encode()}) for f in fields])


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
TRIALS_SCHEMA = described(TRIALS_FILE, fields_schema(TrialRecord, exclude=TRIAL_RECORD_ONLY))

# The pair label first; the stop reason is for the console and the report, not a column.
TRANSITION_SCHEMA = described(
    TRANSITIONS_FILE,
    [pa.field("pair", pa.string()), *fields_schema(Transition, exclude=("reason",))],
)

# length_check.parquet: the pair label first, then every LengthShift field.
LENGTH_CHECK_SCHEMA = described(
    LENGTH_CHECK_FILE, [pa.field("pair", pa.string()), *fields_schema(LengthShift)]
)

# curves.parquet column -> metric key of a curve point.
CURVE_COLUMNS = {
    "step": vocabulary.STEP,
    "tokens": vocabulary.TOKENS,
    "train_loss": vocabulary.TRAIN_LOSS,
    "val_loss": vocabulary.VAL_LOSS,
    "lr": vocabulary.LR,
    "time_s": vocabulary.ELAPSED_S,
}
CURVE_INTEGER_COLUMNS = ("step", "tokens")
CURVES_SCHEMA = described(
    CURVES_FILE,
    [
        pa.field("trial_id", pa.string()),
        *(
            pa.field(c, pa.int64() if c in CURVE_INTEGER_COLUMNS else pa.float64())
            for c in CURVE_COLUMNS
        ),
    ],
)

# pair_deltas.parquet: every paired Δ of the refine stage, one row per (pair, point, seed)
# (dwtune.core.refine.points for the unstable flags).
PAIR_DELTAS_SCHEMA = described(
    PAIR_DELTAS_FILE,
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
    ],
)
# The columns every pair_deltas.parquet has had (failures and unstable came later).
PAIR_DELTAS_REQUIRED = tuple(PAIR_DELTAS_SCHEMA.names[:6])

# projections.parquet: the fit stage's projections of every law, one row per query.
PROJECTION_SCHEMA = described(
    PROJECTIONS_FILE,
    [
        pa.field("law", pa.string(), nullable=False),
        pa.field("query", pa.string(), nullable=False),
        pa.field("n_params", pa.float64()),
        pa.field("n_params_lo", pa.float64()),
        pa.field("n_params_hi", pa.float64()),
        pa.field("depth", pa.float64()),
        pa.field("depth_lo", pa.float64()),
        pa.field("depth_hi", pa.float64()),
        pa.field("width", pa.float64()),
        pa.field("width_lo", pa.float64()),
        pa.field("width_hi", pa.float64()),
        pa.field("level", pa.float64()),
        pa.field(vocabulary.SIMULATED_COLUMN, pa.bool_(), nullable=False),
    ],
)

# Every table of an experiment folder and its schema (what the documentation lists).
TABLE_SCHEMAS = {
    TRIALS_FILE: TRIALS_SCHEMA,
    CURVES_FILE: CURVES_SCHEMA,
    TRANSITIONS_FILE: TRANSITION_SCHEMA,
    LENGTH_CHECK_FILE: LENGTH_CHECK_SCHEMA,
    PAIR_DELTAS_FILE: PAIR_DELTAS_SCHEMA,
    PROJECTIONS_FILE: PROJECTION_SCHEMA,
}


def column_descriptions(schema: pa.Schema) -> dict[str, str]:
    """Column -> description, from the fields' metadata (a file's schema or one of these)."""
    return {
        f.name: f.metadata[DESCRIPTION_KEY].decode()
        for f in schema
        if f.metadata and DESCRIPTION_KEY in f.metadata
    }


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


def column_rows(table: str) -> list[tuple[str, str, str]]:
    """(column, Arrow type, description) of every column of ``table``, in order."""
    schema = TABLE_SCHEMAS[table]
    described = column_descriptions(schema)
    return [(f.name, str(f.type), described[f.name]) for f in schema]
