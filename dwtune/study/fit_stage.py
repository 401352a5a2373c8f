"""The pipeline's fit stage: fit ``ln dx* = a + b·L`` through the bracketed transitions,
project the optimal depth and width, and write ``fit.json`` and ``projections.parquet`` once.

The report (:mod:`dwtune.outputs.report`) and the library's results read these files back;
nothing else fits.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dwtune.core.errors import InputError
from dwtune.core.projection import (
    LEVINE2020,
    DepthWidthLaw,
    no_projection_reason,
    project_budget,
    project_depth,
)
from dwtune.core.vocabulary import TRANSITIONS_FILE
from dwtune.outputs import law_checks
from dwtune.outputs.report.load import (
    CURVE_MAX,
    CURVE_STEPS_PER_DECADE,
    LEVEL,
    FitOutcome,
    Study,
    load_study,
    study_depths,
    table_budgets,
)
from dwtune.storage.experiment import ExperimentWriter
from dwtune.storage.fit_json import fit_to_dict, metadata_json, no_fit_dict
from dwtune.storage.fit_points import FitInput, points_from_transitions
from dwtune.storage.store import ExperimentStore
from dwtune.storage.tables import projection_row


@dataclasses.dataclass(frozen=True)
class FitFiles:
    fit_json: Path
    projections: Path


def fit_study(study: Study) -> FitOutcome:
    """The fit over bracketed transitions, or the plain reason there is none."""
    if study.transitions is None:
        return FitOutcome(None, None, None, f"no {TRANSITIONS_FILE} yet")
    points = points_from_transitions(study.transitions, study.exp_dir / TRANSITIONS_FILE)
    try:
        fit = points.fit()
    except InputError as exc:
        return FitOutcome(points, None, None, str(exc))
    if not fit.b > 0:
        return FitOutcome(points, fit, None, no_projection_reason(fit))
    return FitOutcome(points, fit, DepthWidthLaw.from_fit(fit, source=points.source), "")


def curve_budgets(study: Study) -> np.ndarray:
    """Budgets for figure 4: from the study's smallest size (or 1e6) to 1e13, log-spaced."""
    sizes = study.completed["params_non_embedding"].astype(float)
    low = min(1e6, float(sizes.min())) if not sizes.empty else 1e6
    start = math.floor(math.log10(low))
    exponents = np.arange(start, math.log10(CURVE_MAX) + 1e-9, 1.0 / CURVE_STEPS_PER_DECADE)
    return 10.0**exponents


def projection_rows(study: Study, outcome: FitOutcome, budgets: list[float]) -> pd.DataFrame:
    """projections.parquet's rows: every law x (curve and table budgets, depths)."""
    laws = [(outcome.law, study.simulated)] if outcome.law is not None else []
    laws.append((LEVINE2020, False))
    grid = sorted(set(curve_budgets(study).tolist()) | set(budgets))
    rows = []
    for law, simulated in laws:
        rows += [projection_row(project_budget(law, n, LEVEL), simulated) for n in grid]
        depths = study_depths(outcome)
        rows += [projection_row(project_depth(law, d, LEVEL), simulated) for d in depths]
    return pd.DataFrame(rows)


def fit_record(study: Study, outcome: FitOutcome, meta: dict) -> dict:
    """fit.json's content: the fit, or what was found instead; plus the file metadata."""
    source = str(study.exp_dir / TRANSITIONS_FILE)
    if outcome.fit is not None:
        seeds = outcome.points.seeds if outcome.points is not None else ()
        record = fit_to_dict(outcome.fit, LEVEL, study.simulated, source, seeds)
    else:
        empty = FitInput((), (), (), (), (), study.simulated, source)
        record = no_fit_dict(outcome.points or empty, outcome.reason)
    return record | {"metadata": meta}


def write_fit(exp_dir: str | Path) -> FitFiles:
    """Fit the experiment's transitions and write fit.json and projections.parquet."""
    study = load_study(exp_dir)
    budgets, _ = table_budgets(study)  # the report notes a bad fit.budgets
    outcome = fit_study(study)
    rows = projection_rows(study, outcome, budgets)
    record = fit_record(study, outcome, metadata_json(study.spec))
    # Law forms, leave-one-pair-out and the study bootstrap: computed once, here, with the fit.
    observations = outcome.points.observations if outcome.points is not None else ()
    checks = law_checks.for_report(study.exp_dir, observations, outcome.fit is not None, budgets)
    if checks is not None:
        record["law_checks"] = checks.record
    writer = ExperimentWriter(ExperimentStore(study.exp_dir), study.spec)
    fit_json = writer.fit(record)
    projections = writer.projections(rows.to_dict("records"))
    return FitFiles(fit_json, projections)
