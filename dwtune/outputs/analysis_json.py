"""`dwtune analyze --json`: an :class:`~dwtune.core.analysis.result.AnalysisResult` as one JSON
object (NaN and inf as null; the keys are docs/analyze.md's)."""

from __future__ import annotations

import math

from dwtune.core import vocabulary
from dwtune.core.analysis.jitter import JITTER_DEGREE, JITTER_MIN_POINTS, JITTER_SHARE, JitterModel
from dwtune.core.analysis.result import (
    RULE_TEST,
    AnalysedPair,
    AnalysisResult,
    NoiseSummary,
    ReferenceCheck,
    TableFit,
    TokenSummary,
)
from dwtune.core.analysis.table import Checkpoints
from dwtune.core.analysis.tokens import TOKEN_TOLERANCE
from dwtune.core.analysis.verdicts import noise_range, to_decide
from dwtune.core.refine.signs import SignRule
from dwtune.core.vocabulary import LEVEL, FitStatus
from dwtune.storage.fit_json import COMPETING_LAWS, comparison_dict, fit_to_dict, json_ready

AGREES = {vocabulary.AGREEMENT_AGREES: True, vocabulary.AGREEMENT_DISAGREES: False}


def analysis_dict(analysis: AnalysisResult) -> dict:
    """The whole analysis, as ``--json`` prints it."""
    result = {
        "source": analysis.source,
        vocabulary.SIMULATED_COLUMN: analysis.simulated,
        "window": analysis.window,
        "checkpoints": checkpoints_dict(analysis.checkpoints),
        "rule": rule_dict(analysis.rule),
        "noise": noise_dict(analysis.noise),
        "tokens": tokens_dict(analysis.tokens, analysis.pairs),
        "skipped": [{"pair": s.pair, "reason": s.reason} for s in analysis.skipped],
        "reference": reference_dict(analysis.reference) if analysis.reference else None,
        "pairs": [pair_dict(pair) for pair in analysis.pairs],
        "fit": fit_dict(analysis.fit),
    }
    return json_ready(result)


def checkpoints_dict(c: Checkpoints) -> dict:
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


def rule_dict(rule: SignRule) -> dict:
    return {"alpha": rule.alpha, "looks": rule.max_looks, "test": RULE_TEST}


def reference_dict(check: ReferenceCheck) -> dict:
    law, test = check.reference.law, check.test
    return {
        "law": law.name,
        "source": law.source,
        "a": law.a,
        "b": law.b,
        "agree": test.agree,
        "decided": test.agree + test.disagree,
        "test": {
            "predicted": test.predicted,
            "agree": test.agree,
            "disagree": test.disagree,
            "within_noise": test.within_noise,
            "no_prediction": test.no_prediction,
            "rate_if_right": test.rate,
            "p_value": test.p_value,
            "alpha": test.alpha,
            "rejected": test.rejected,
            "method": "one-sided binomial test of the disagreements at rate α/2 per point",
            "conclusion": test.conclusion,
        },
        "summary": test.summary,
    }


def noise_dict(noise: NoiseSummary) -> dict:
    return {
        "method": noise.method,
        "description": dict(noise.descriptions),
        "pairs": dict(noise.pair_sources),
        "delta_sd_median": noise.sd_median,
        "delta_sd_low": noise.sd_low,
        "delta_sd_high": noise.sd_high,
        "dof_low": noise.dof_low,
        "jitter": jitter_dict(noise.jitter) if noise.jitter is not None else None,
        "limits": noise.limits,
    }


def jitter_dict(jitter: JitterModel) -> dict:
    def depth_entry(d) -> dict:
        flagged = [{"run": r.name, "sd": math.sqrt(r.variance), "dof": r.dof} for r in d.flagged]
        return {"depth": d.depth, "sd": d.sd, "dof": d.dof, "runs": d.runs, "flagged": flagged}

    return {
        "curve": f"polynomial of degree {JITTER_DEGREE} in ln {jitter.order}",
        "share": JITTER_SHARE,
        "min_checkpoints": JITTER_MIN_POINTS,
        "runs_measured": jitter.runs_measured,
        "runs_total": jitter.runs_total,
        "per_depth": [depth_entry(d) for d in jitter.depths],
        "overall_sd": jitter.overall.sd,
        "overall_dof": jitter.overall.dof,
    }


def tokens_dict(tokens: TokenSummary, pairs: tuple[AnalysedPair, ...]) -> dict:
    return {
        "tolerance": TOKEN_TOLERANCE,
        "checked": tokens.checked,
        "warnings": list(tokens.warnings),
        "target_warning": tokens.target_warning,
        "pairs": {p.analysis.label: g is not None for p, g in zip(pairs, tokens.gaps, strict=True)},
    }


def point_dicts(held: AnalysedPair) -> list[dict]:
    pair, out = held.analysis, []
    for i, m in enumerate(pair.points):
        entry = {
            "n": m.point.n,
            "delta": pair.delta[i],
            "delta_err": pair.delta_err[i],
            "z": pair.delta[i] / pair.delta_err[i] if pair.delta_err[i] > 0 else None,
            "boundary": pair.boundary[i],  # |Δ|/se the rule needed for a sign here
            "sign": pair.signs[i],
            "noise_sd": float(pair.noise.sd[i]),
            "noise_dof": float(pair.noise.dof[i]),
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
        if held.verdicts is not None:
            entry["agrees"] = AGREES.get(held.verdicts[i])
            entry["verdict"] = held.verdicts[i]
            entry["law_depth"] = held.law_depth(m.point.n)
        out.append(entry)
    return out


def pair_dict(held: AnalysedPair) -> dict:
    """One entry of the JSON ``pairs`` list."""
    pair, est, view = held.analysis, held.analysis.estimate, held.view
    sd_low, sd_high, dof_low = noise_range(pair)
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
        "bound_low": est.bound_low,
        "bound_high": est.bound_high,
        "crossings": list(est.crossings),
        "noise_source": est.noise_source,
        "noise": {
            "method": pair.noise.source,
            "sd_low": sd_low,
            "sd_high": sd_high,
            "dof_low": dof_low,
        },
        "trend": pair.trends,
        "to_decide": to_decide(pair),
        "points": point_dicts(held),
    }
    if view is not None:
        entry["law_n_star"] = view.n_star
        entry["law_n_star_low"] = view.n_low
        entry["law_n_star_high"] = view.n_high
        entry["law_first_depth"] = view.first_depth if math.isfinite(view.first_depth) else None
        entry["law_first_n_star"] = view.first_n_star
        entry["law_loses_below"] = view.loses_below
        entry["law_wins_above"] = view.wins_above
    return entry


def fit_dict(table: TableFit) -> dict:
    """The table's fit as fit.json writes a fit, with its projections; or why there is none."""
    if table.fit is None:
        return {
            "status": FitStatus.INSUFFICIENT.value,
            "reason": table.reason,
            "source": table.source,
        }
    record = fit_to_dict(table.fit, LEVEL, table.simulated, table.source)
    record[COMPETING_LAWS] = comparison_dict(table.competing)
    losses = table.loss_fit
    record["separable_loss_fit"] = json_ready(losses.to_dict()) if losses is not None else None
    record["projections"] = [
        {
            "budget": p.budget,
            "depth": p.depth,
            "depth_lo": p.depth_lo,
            "depth_hi": p.depth_hi,
            "width": p.width,
            "width_lo": p.width_lo,
            "width_hi": p.width_hi,
            "level": LEVEL,
        }
        for p in table.projections
    ]
    return record
