"""report.md's "Cost against the oracle floor": what the study spent (trials.parquet) against
the oracle floor (:mod:`dwtune.core.oracle_floor`): each pair's two depths x seeds trained
once at the reference law's N*. Both sides are training FLOPs (tokens trained x FLOPs/token,
evaluation excluded), so η = floor ÷ spent compares like with like."""

from __future__ import annotations

import math

import pandas as pd

from dwtune.core.errors import InputError
from dwtune.core.oracle_floor import OracleFloor, efficiency, oracle_floor, spent_flops
from dwtune.core.projection import reference
from dwtune.core.spec import ExperimentSpec
from dwtune.storage.experiment import Experiment

TITLE = "## Cost against the oracle floor"
COLUMNS = ("depth", "width", "heads", "tokens")


def floor_numbers(experiment: Experiment) -> dict | None:
    """Spent and floor FLOPs, η and trainings per pair as numbers; None without a readable
    spec, trials or pairs (the section then says why)."""
    if not experiment.spec:
        return None
    spec = ExperimentSpec.from_dict(experiment.spec)
    oracle = oracle_floor(spec, reference(spec.fit.reference))
    trials = experiment.trials
    if not oracle.pairs or trials.empty or not set(COLUMNS) <= set(trials.columns):
        return None
    rows = trials[list(COLUMNS)].astype(float).itertuples(index=False, name=None)
    spent = spent_flops(spec.shape_template(), rows)
    hours = _trial_hours(trials, spec.resources.gpu)
    eta = efficiency(oracle.flops, spent)
    return {
        "oracle": oracle,
        "spent_flops": spent,
        "eta": eta,
        "spent_hours": hours,
        "floor_hours": eta * hours if math.isfinite(eta) else math.nan,
        "gpu": spec.resources.gpu > 0,
        "trainings": len(trials),
        "trainings_per_pair": len(trials) / len(oracle.pairs),
        "sigma_ln_median": _median_sigma(experiment.transitions),
    }


def _median_sigma(transitions: pd.DataFrame | None) -> float:
    """Median σ(ln N*) over the bracketed pairs (NaN without one): the precision bought."""
    if transitions is None or "sigma_ln" not in transitions.columns:
        return math.nan
    sigmas = pd.to_numeric(transitions["sigma_ln"], errors="coerce").dropna()
    return float(sigmas.median()) if len(sigmas) else math.nan


def _trial_hours(trials: pd.DataFrame, gpu_per_trial: float) -> float:
    """GPU-hours (GPU trials: wall time x resources.gpu) or trial-hours (CPU trials)."""
    if "wall_time_s" not in trials.columns:
        return math.nan
    seconds = pd.to_numeric(trials["wall_time_s"], errors="coerce").fillna(0.0).sum()
    return float(seconds) * (gpu_per_trial if gpu_per_trial > 0 else 1.0) / 3600


def _pair_rows(oracle: OracleFloor) -> list[str]:
    lines = ["| pair | N* (reference) | widths | trainings | FLOPs |", "|---|---|---|---|---|"]
    for p in oracle.pairs:
        lines.append(
            f"| {p.shallow}-{p.deep} | {p.n_star:.3g} | {p.width_shallow} / {p.width_deep} | "
            f"{p.trainings} | {p.flops:.3g} |"
        )
    return lines


def efficiency_section(experiment: Experiment) -> list[str]:
    try:
        numbers = floor_numbers(experiment)
    except InputError as exc:
        return [TITLE, "", f"Not computed: {exc}", ""]
    if numbers is None:
        return [TITLE, "", "Not computed: no spec.yaml, trials with token counts or pairs.", ""]
    oracle: OracleFloor = numbers["oracle"]
    unit = "GPU-hours" if numbers["gpu"] else "trial-hours"
    return [
        TITLE,
        "",
        f"The oracle floor trains each pair's two depths × {oracle.seeds} seed(s) once at "
        f"{oracle.law}'s N*: {oracle.trainings} trainings, {oracle.flops:.3g} FLOPs. This study "
        f"spent {numbers['trainings']} trainings, {numbers['spent_flops']:.3g} FLOPs "
        f"({_hours(numbers['spent_hours'])} {unit}; the floor at the same rate: "
        f"{_hours(numbers['floor_hours'])}).",
        "",
        f"**η = floor FLOPs ÷ spent FLOPs = {_percent(numbers['eta'])}**; trainings per pair: "
        f"{numbers['trainings_per_pair']:,.1f} spent, {oracle.trainings_per_pair:g} at the floor "
        "(training FLOPs: tokens trained × FLOPs per token, evaluation excluded).",
        "",
        *_precision_line(numbers, unit),
        *_pair_rows(oracle),
        "",
    ]


def _precision_line(numbers: dict, unit: str) -> list[str]:
    """What the spending bought: the pairs' median σ(ln N*) beside the hours per pair."""
    sigma = numbers["sigma_ln_median"]
    if not math.isfinite(sigma):
        return []
    per_pair = numbers["spent_hours"] / len(numbers["oracle"].pairs)
    return [
        f"Precision: median σ(ln N*) = {sigma:.3g} e-folds over the bracketed pairs, for "
        f"{_hours(per_pair)} {unit} per pair.",
        "",
    ]


def _hours(value: float) -> str:
    """1,234.5 for long studies; 0.0123 for short (simulated) ones; – when unknown."""
    if not math.isfinite(value):
        return "–"
    return f"{value:,.1f}" if value >= 100 else f"{value:.3g}"


def _percent(value: float) -> str:
    return f"{100 * value:.3g}%" if math.isfinite(value) else "–"
