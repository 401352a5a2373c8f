"""The pipeline's fit stage: fit ``ln dx* = a + b·L`` through the bracketed transitions,
project the optimal depth and width, check the law, and write ``fit.json`` and
``projections.parquet`` once.

It reads and writes the experiment folder through the store alone
(:class:`~dwtune.storage.experiment.ExperimentReader` and ``ExperimentWriter``) and computes
with :mod:`dwtune.core.fit` and :mod:`dwtune.core.projection`. The report
(:mod:`dwtune.outputs.report`) and the library's results read these files back; nothing else
fits.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dwtune.core.errors import InputError
from dwtune.core.fit.checks import law_checks
from dwtune.core.projection import (
    LEVINE2020,
    DepthWidthLaw,
    no_projection_reason,
    project_budget,
    project_depth,
)
from dwtune.core.vocabulary import LEVEL, TRANSITIONS_FILE
from dwtune.storage.experiment import Experiment, ExperimentReader, ExperimentWriter
from dwtune.storage.fit_json import (
    COMPETING_LAWS,
    FitOutcome,
    competing_laws_dict,
    fit_to_dict,
    metadata_json,
    no_fit_dict,
)
from dwtune.storage.fit_points import FitInput
from dwtune.storage.schemas import CURVE_MAX, CURVE_STEPS_PER_DECADE
from dwtune.storage.tables import projection_row


@dataclasses.dataclass(frozen=True)
class FitFiles:
    fit_json: Path
    projections: Path


def fit_experiment(experiment: Experiment) -> FitOutcome:
    """The fit over bracketed transitions, or the plain reason there is none."""
    points = experiment.fit_points()
    if points is None:
        return FitOutcome(None, None, None, f"no {TRANSITIONS_FILE} yet")
    try:
        fit = points.fit()
    except InputError as exc:
        return FitOutcome(points, None, None, str(exc))
    if not fit.b > 0:
        return FitOutcome(points, fit, None, no_projection_reason(fit))
    return FitOutcome(points, fit, DepthWidthLaw.from_fit(fit, source=points.source), "")


def curve_budgets(experiment: Experiment) -> np.ndarray:
    """Budgets for figure 4: from the study's smallest size (or 1e6) to 1e13, log-spaced."""
    sizes = experiment.completed["params_non_embedding"].astype(float)
    low = min(1e6, float(sizes.min())) if not sizes.empty else 1e6
    start = math.floor(math.log10(low))
    exponents = np.arange(start, math.log10(CURVE_MAX) + 1e-9, 1.0 / CURVE_STEPS_PER_DECADE)
    return 10.0**exponents


def projection_rows(
    experiment: Experiment, outcome: FitOutcome, budgets: list[float]
) -> pd.DataFrame:
    """projections.parquet's rows: every law x (curve and table budgets, depths)."""
    laws = [(outcome.law, experiment.simulated)] if outcome.law is not None else []
    laws.append((LEVINE2020, False))
    grid = sorted(set(curve_budgets(experiment).tolist()) | set(budgets))
    rows = []
    for law, simulated in laws:
        rows += [projection_row(project_budget(law, n, LEVEL), simulated) for n in grid]
        depths = outcome.depths()
        rows += [projection_row(project_depth(law, d, LEVEL), simulated) for d in depths]
    return pd.DataFrame(rows)


def fit_record(experiment: Experiment, outcome: FitOutcome, meta: dict) -> dict:
    """fit.json's content: the fit, or what was found instead; plus the file metadata."""
    source = TRANSITIONS_FILE  # relative to the folder fit.json sits in: it moves with it
    simulated = experiment.simulated
    if outcome.fit is not None:
        seeds = outcome.points.seeds if outcome.points is not None else ()
        record = fit_to_dict(outcome.fit, LEVEL, simulated, source, seeds)
        observations = outcome.points.observations if outcome.points is not None else ()
        record[COMPETING_LAWS] = competing_laws_dict(observations)
    else:
        empty = FitInput((), (), (), (), (), simulated, source)
        record = no_fit_dict(outcome.points or empty, outcome.reason)
    return record | {"metadata": meta}


def checks_record(reader: ExperimentReader, outcome: FitOutcome, budgets) -> dict | None:
    """Law forms, leave-one-pair-out and the study bootstrap of a fitted study (None without
    a fit or without per-pair observations): computed once, here, with the fit."""
    observations = outcome.points.observations if outcome.points is not None else ()
    if outcome.fit is None or not observations:
        return None
    pairs, missing = reader.pair_deltas()
    return law_checks(observations, pairs, budgets, missing=missing)


def write_fit(exp_dir: str | Path) -> FitFiles:
    """Fit the experiment's transitions and write fit.json and projections.parquet."""
    reader = ExperimentReader(exp_dir)
    experiment = reader.read()
    budgets, _ = experiment.fit_budgets()  # the report notes a bad fit.budgets
    outcome = fit_experiment(experiment)
    rows = projection_rows(experiment, outcome, budgets)
    record = fit_record(experiment, outcome, metadata_json(experiment.spec))
    checks = checks_record(reader, outcome, budgets)
    if checks is not None:
        record["law_checks"] = checks
    writer = ExperimentWriter(reader.store, experiment.spec)
    return FitFiles(writer.fit(record), writer.projections(rows.to_dict("records")))
