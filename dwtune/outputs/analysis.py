"""`dwtune analyze`: analyse a loaded runs table, and print it as a table or as JSON.

Orchestration layer: the logic is in :mod:`dwtune.core.analysis` (matching, trends, agreement)
and :mod:`dwtune.core.crossing` (N* and its intervals); the fit is :mod:`dwtune.core.fit`'s.
Everything the text table and report.md show is read from the one dictionary ``--json`` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dwtune.core import vocabulary
from dwtune.core.analysis import (
    Checkpoints,
    LawView,
    PairAnalysis,
    agreement_line,
    analyse_pair,
    choose_pairs,
    fit_points,
    pair_verdicts,
    select_checkpoints,
    size_groups,
    validate,
)
from dwtune.core.errors import InputError
from dwtune.core.fit import MIN_POINTS, FitResult, fit_transitions
from dwtune.core.projection import (
    DepthWidthLaw,
    project_budget,
    project_depth,
    reference,
    transition_size,
)
from dwtune.core.vocabulary import FIT_FILE
from dwtune.outputs.fit_files import fit_to_dict, json_ready, law_from_json
from dwtune.outputs.runs_table import LoadedRuns

LEVEL = 0.95
PROJECTION_BUDGETS = (1.75e11, 1e12, 1e13)  # parameters: GPT-3, 1T, 10T (as a study's report)
STATUS_TEXT = {
    vocabulary.ANALYSIS_CROSSES: "crosses",
    vocabulary.ANALYSIS_DEEPER_WINS: "deeper wins throughout",
    vocabulary.ANALYSIS_DEEPER_LOSES: "deeper loses throughout",
    vocabulary.TransitionStatus.NON_MONOTONE: "non-monotone (several sign changes)",
    vocabulary.TransitionStatus.UNDECIDED: "undecided (Δ within noise)",
}
SIM_BANNER = "SIMULATED DATA: a planted loss surface, not a measurement of any model"


@dataclass(frozen=True)
class Reference:
    law: DepthWidthLaw
    label: str  # how the summary line names it


def load_reference(text: str | None) -> Reference | None:
    """``levine2020`` or an experiment directory (or its fit.json) holding a fitted law."""
    if text is None:
        return None
    path = Path(text)
    if not path.exists() and "/" not in text and not text.endswith(".json"):
        law = reference(text)
        return Reference(law, law.name)
    fit_json = path / FIT_FILE if path.is_dir() else path
    if not fit_json.is_file():
        raise InputError(
            f"--reference: {text!r} is neither levine2020 nor an experiment directory with a "
            f"{FIT_FILE}; run `dwtune report` on it first"
        )
    law, _ = law_from_json(fit_json)
    return Reference(law, f"the fit of {fit_json.parent if path.is_dir() else fit_json}")


def parse_window(text: str) -> float:
    """``0.25`` (e-folds of size, |ln N_d − ln N_s|) or ``1.3x`` (a size ratio)."""
    raw = str(text).strip()
    try:
        value = math.log(float(raw[:-1])) if raw.lower().endswith("x") else float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InputError(
            f"--window: got {text!r}; expected e-folds of size >= 0 such as 0.25, or a size "
            "ratio >= 1 such as 1.3x"
        )
    return value


def law_view(law: DepthWidthLaw, depth: float) -> LawView:
    """The law's N* of ``depth`` and, for a fitted law, its 95% interval."""
    if law.has_intervals:
        p = project_depth(law, depth, LEVEL)
        return LawView(law.name, p.n_star, p.n_lo, p.n_hi)
    return LawView(law.name, transition_size(law, depth), math.nan, math.nan)


# ---------------------------------------------------------------- the analysis


def analyse(
    loaded: LoadedRuns,
    *,
    pairs=None,
    window: float,
    tokens: float | None = None,
    ref: Reference | None = None,
    n_boot: int = 2000,
) -> dict:
    """Every pair's points, status and N*; agreement with ``ref``; the fit where it can be."""
    try:
        validate(loaded.table)
    except InputError as exc:  # name the file: the row numbers are its rows
        raise InputError(f"{loaded.source}: {exc}") from None
    table, checkpoints = select_checkpoints(loaded.table, tokens)
    groups = size_groups(table)
    usable = [d for d, gs in groups.items() if any(g.ok.any() for g in gs)]
    chosen = choose_pairs(usable, pairs)
    analyses = [analyse_pair(groups, pair, window, n_boot=n_boot) for pair in chosen]
    result = {
        "source": loaded.source,
        "simulated": loaded.simulated,
        "window": window,
        "checkpoints": _checkpoints_dict(checkpoints),
        "reference": None,
        "pairs": [],
    }
    verdicts_all: list[str] = []
    for pair in analyses:
        view = law_view(ref.law, pair.depth_deep) if ref else None
        verdicts = pair_verdicts(pair, view) if view else None
        verdicts_all += list(verdicts or ())
        result["pairs"].append(pair_dict(pair, view, verdicts))
    if ref:
        agree, decided, line = agreement_line(verdicts_all, ref.label)
        result["reference"] = {
            "law": ref.law.name,
            "source": ref.law.source,
            "a": ref.law.a,
            "b": ref.law.b,
            "agree": agree,
            "decided": decided,
            "summary": line,
        }
    result["fit"] = fit_section(analyses, loaded.source, loaded.simulated)
    return json_ready(result)


def _checkpoints_dict(c: Checkpoints) -> dict:
    return {
        "rule": c.rule,
        "tokens": c.target,
        "order": c.order,
        "runs": c.runs,
        "rows": c.rows,
        "picked_low": c.picked_low,
        "picked_high": c.picked_high,
        "description": c.describe(),
    }


def _agrees(verdict: str) -> bool | None:
    return {vocabulary.AGREEMENT_AGREES: True, vocabulary.AGREEMENT_DISAGREES: False}.get(verdict)


def point_dicts(pair: PairAnalysis, verdicts) -> list[dict]:
    out = []
    for i, m in enumerate(pair.points):
        entry = {
            "n": m.point.n,
            "delta": pair.delta[i],
            "delta_err": pair.delta_err[i],
            "seeds": len(m.point.deltas),
            "n_shallow": m.n_shallow,
            "width_deep": m.width_deep,
            "width_shallow": m.width_shallow,
            "paired": m.paired,
            "trend": m.trend,
            "trend_sd": m.trend_sd,
            "failures_deep": m.point.failures_deep,
            "failures_shallow": m.point.failures_shallow,
        }
        if verdicts is not None:
            entry["agrees"] = _agrees(verdicts[i])
            entry["verdict"] = verdicts[i]
        out.append(entry)
    return out


def pair_dict(pair: PairAnalysis, view: LawView | None, verdicts) -> dict:
    """One entry of the JSON ``pairs`` list."""
    est = pair.estimate
    entry = {
        "pair": pair.label,
        "depth_shallow": pair.depth_shallow,
        "depth_deep": pair.depth_deep,
        "status": pair.status,
        "transition_status": est.status,
        "n_star": est.n_star,
        "n_star_low": est.n_star_low,
        "n_star_high": est.n_star_high,
        "n_star_low_68": est.n_star_low_68,
        "n_star_high_68": est.n_star_high_68,
        "sigma_ln": est.sigma_ln,
        "crossings": list(est.crossings),
        "noise_source": est.noise_source,
        "trend": pair.trends,
        "points": point_dicts(pair, verdicts),
    }
    if view is not None:
        entry["law_n_star"] = view.n_star
        entry["law_n_star_low"] = view.n_low
        entry["law_n_star_high"] = view.n_high
    return entry


def fit_section(analyses: list[PairAnalysis], source: str, simulated: bool) -> dict:
    """The study-style fit and projections where at least MIN_POINTS pairs cross."""
    points = fit_points(analyses)
    crossing = len(points.depths)
    if crossing < MIN_POINTS:
        reason = f"{crossing} pair(s) cross; the fit needs at least {MIN_POINTS}"
        return {"status": "insufficient", "reason": reason, "source": source}
    try:
        fit = fit_transitions(
            points.depths,
            points.widths,
            points.width_errs,
            labels=points.labels,
            censored=points.censored,
        )
    except InputError as exc:
        return {"status": "insufficient", "reason": str(exc), "source": source}
    record = fit_to_dict(fit, LEVEL, simulated, source)
    record["projections"] = projections(fit, source)
    return record


def projections(fit: FitResult, source: str) -> list[dict]:
    """Optimal depth and width at the report's budgets, from the table's fit."""
    law = DepthWidthLaw.from_fit(fit, name="table fit", source=source)
    if not law.b > 0:
        return []
    rows = []
    for budget in PROJECTION_BUDGETS:
        p = project_budget(law, budget, LEVEL)
        rows.append(
            {
                "budget": budget,
                "depth": p.depth,
                "depth_lo": p.depth_lo,
                "depth_hi": p.depth_hi,
                "width": p.width,
                "width_lo": p.width_lo,
                "width_hi": p.width_hi,
                "level": LEVEL,
            }
        )
    return rows
