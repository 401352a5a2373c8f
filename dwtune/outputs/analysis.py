"""`dwtune analyze`: analyse a loaded runs table, and print it as a table or as JSON.

Orchestration layer: the logic is in :mod:`dwtune.core.analysis` (matching, trends, agreement)
and :mod:`dwtune.core.crossing` (N* and its intervals); the fit is :mod:`dwtune.core.fit`'s.
Everything the text table and report.md show is read from the one dictionary ``--json`` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.analysis import (
    DEFAULT_ALPHA,
    AgreementTest,
    Checkpoints,
    JitterModel,
    LawView,
    PairAnalysis,
    agreement_test,
    analyse_pair,
    analysis_rule,
    choose_pairs,
    fit_observations,
    jitter_model,
    noise_range,
    pair_token_gap,
    pair_verdicts,
    select_checkpoints,
    size_groups,
    target_misses,
    validate,
)
from dwtune.core.analysis.jitter import JITTER_DEGREE, JITTER_MIN_POINTS, JITTER_SHARE
from dwtune.core.analysis.tokens import TOKEN_TOLERANCE
from dwtune.core.errors import InputError
from dwtune.core.fit import MIN_POINTS, FitResult, fit_law
from dwtune.core.noise import DEFAULT_NOISE_PRIOR, DEFAULT_PRIOR_DOF
from dwtune.core.projection import (
    DepthWidthLaw,
    optimal_depth,
    project_budget,
    project_depth,
    reference,
    transition_size,
)
from dwtune.core.vocabulary import FIT_FILE
from dwtune.storage.fit_json import fit_to_dict, json_ready, law_from_json
from dwtune.storage.runs import LoadedRuns

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


def parse_alpha(text: str) -> float:
    """A false-sign rate strictly between 0 and 0.5 (``--alpha``)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    if not 0 < value < 0.5:
        raise InputError(f"--alpha: got {text!r}; expected a rate between 0 and 0.5 such as 0.05")
    return value


def _law_n(law: DepthWidthLaw, depth: float) -> tuple[float, float, float]:
    """The law's N* of ``depth`` and, for a fitted law, its 95% interval (NaN otherwise)."""
    if law.has_intervals:
        p = project_depth(law, depth, LEVEL)
        return p.n_star, p.n_lo, p.n_hi
    return transition_size(law, depth), math.nan, math.nan


def law_view(law: DepthWidthLaw, pair: tuple[float, float], depths) -> LawView:
    """What ``law`` says of ``pair`` given the table's ``depths`` between its two depths
    (dwtune.core.analysis: the deeper net wins above N*(Ld), loses below N*(L1))."""
    shallow, deep = pair
    first = min((d for d in depths if shallow < d <= deep), default=deep)
    n_star, low, high = _law_n(law, deep)
    if first == deep:
        return LawView(law.name, n_star, low, high)
    return LawView(law.name, n_star, low, high, first, *_law_n(law, first))


def law_depth(law: DepthWidthLaw, n: float) -> float | None:
    """The law's optimal depth L*(N) at size ``n`` (None where its slope is not positive)."""
    return optimal_depth(law, n) if law.b > 0 and math.isfinite(law.a) else None


# ---------------------------------------------------------------- the analysis


@dataclass(frozen=True)
class Analysed:
    """The pairs that could be analysed, and the others with their reasons."""

    pairs: list[PairAnalysis]
    skipped: list[dict]


def analyse_pairs(groups, chosen, window: float, **options) -> Analysed:
    """Every chosen pair; one that cannot be analysed (sizes that never meet, no Δ, no size
    trend) is skipped with its reason; InputError only where none can be."""
    pairs, skipped = [], []
    for pair in chosen:
        try:
            pairs.append(analyse_pair(groups, pair, window, **options))
        except InputError as exc:
            skipped.append({"pair": f"{pair[0]:g}-{pair[1]:g}", "reason": str(exc)})
    if not pairs:
        reasons = "; ".join(s["reason"] for s in skipped)
        many = len(skipped) > 1
        raise InputError(f"no depth pair can be analysed: {reasons}" if many else reasons)
    return Analysed(pairs, skipped)


def analyse(
    loaded: LoadedRuns,
    *,
    pairs=None,
    window: float,
    tokens: float | None = None,
    ref: Reference | None = None,
    alpha: float = DEFAULT_ALPHA,
    n_boot: int = 2000,
) -> dict:
    """Every pair's points, noise, signs, status and N*; agreement with ``ref`` as a test;
    token warnings; the censored fit where it can be."""
    try:
        validate(loaded.table)
    except InputError as exc:  # name the file: the row numbers are its rows
        raise InputError(f"{loaded.source}: {exc}") from None
    table, checkpoints = select_checkpoints(loaded.table, tokens)
    jitter = jitter_model(loaded.table, tokens)
    groups = size_groups(table)
    usable = sorted(d for d, gs in groups.items() if any(g.ok.any() for g in gs))
    rule = analysis_rule(alpha)
    done = analyse_pairs(
        groups, choose_pairs(usable, pairs), window, rule=rule, jitter=jitter, n_boot=n_boot
    )
    result = {
        "source": loaded.source,
        "simulated": loaded.simulated,
        "window": window,
        "checkpoints": _checkpoints_dict(checkpoints),
        "rule": rule_dict(rule),
        "noise": noise_section(done.pairs, jitter),
        "tokens": tokens_section(done.pairs, table, checkpoints, tokens),
        "skipped": done.skipped,
        "reference": None,
        "pairs": [],
    }
    verdicts_all: list[str] = []
    for pair in done.pairs:
        view = law_view(ref.law, (pair.depth_shallow, pair.depth_deep), usable) if ref else None
        verdicts = pair_verdicts(pair, view) if view else None
        verdicts_all += list(verdicts or ())
        result["pairs"].append(pair_dict(pair, view, verdicts, ref.law if ref else None))
    if ref:
        result["reference"] = reference_dict(ref, agreement_test(verdicts_all, ref.label, alpha))
    result["fit"] = fit_section(done.pairs, loaded.source, loaded.simulated)
    return json_ready(result)


def rule_dict(rule) -> dict:
    return {
        "alpha": rule.alpha,
        "looks": rule.max_looks,
        "test": "two-sided Student t on the noise's dof: a sign where |Δ|/se > t(1 − α/2, dof)",
    }


def reference_dict(ref: Reference, test: AgreementTest) -> dict:
    return {
        "law": ref.law.name,
        "source": ref.law.source,
        "a": ref.law.a,
        "b": ref.law.b,
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


# ---------------------------------------------------------------- noise and tokens

NOISE_TEXT = {
    vocabulary.NOISE_MEASURED: (
        "replicate runs: the seed-to-seed spread of each point's Δ, pooled along ln N, with "
        f"the {DEFAULT_NOISE_PRIOR:g}-nats guess worth {DEFAULT_PRIOR_DOF:g} pseudo-observations"
    ),
    vocabulary.NOISE_PRIOR: (
        f"assumed: no replicate runs and no checkpoints to measure it; the {DEFAULT_NOISE_PRIOR:g}"
        f"-nats guess on {DEFAULT_PRIOR_DOF:g} pseudo-observations, whose t boundary decides "
        "almost nothing"
    ),
}
JITTER_LIMITS = (
    "checkpoint jitter is the evaluation and optimisation noise of one run near its end, not "
    "seed-to-seed variation (data order, initialisation), which is usually larger: a sign "
    "decided on it says the two runs' curves end apart, not that reruns would order them so"
)


def noise_section(pairs: list[PairAnalysis], jitter: JitterModel | None) -> dict:
    """How the noise of every pair was found, in words and numbers (nats)."""
    sources = sorted({p.noise.source for p in pairs})
    sd = np.concatenate([np.asarray(p.noise.sd) for p in pairs])
    dof = np.concatenate([np.asarray(p.noise.dof) for p in pairs])
    used_jitter = vocabulary.NOISE_CHECKPOINT_JITTER in sources
    texts = dict(NOISE_TEXT)
    if jitter is not None:
        texts[vocabulary.NOISE_CHECKPOINT_JITTER] = jitter.describe()
    return {
        "method": sources[0] if len(sources) == 1 else "mixed",
        "description": {s: texts[s] for s in sources},
        "pairs": {p.label: p.noise.source for p in pairs},
        "delta_sd_median": float(np.median(sd)),
        "delta_sd_low": float(sd.min()),
        "delta_sd_high": float(sd.max()),
        "dof_low": float(dof.min()),
        "jitter": jitter_dict(jitter) if jitter is not None else None,
        "limits": JITTER_LIMITS if used_jitter else None,
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


def tokens_section(pairs, table, checkpoints: Checkpoints, tokens: float | None) -> dict:
    """Token warnings: once per pair whose points' runs differ, and runs far from --tokens."""
    gaps = [pair_token_gap(p.label, p.points, table) for p in pairs]
    miss = target_misses(table, tokens)
    ordered = table.tokens is not None or table.step is not None
    return {
        "tolerance": TOKEN_TOLERANCE,
        "checked": ordered,
        "warnings": [g.describe(checkpoints.rule) for g in gaps if g is not None],
        "target_warning": miss.describe() if miss is not None else None,
        "pairs": {p.label: g is not None for p, g in zip(pairs, gaps, strict=True)},
    }


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


def point_dicts(pair: PairAnalysis, verdicts, law: DepthWidthLaw | None) -> list[dict]:
    out = []
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
        if verdicts is not None:
            entry["agrees"] = _agrees(verdicts[i])
            entry["verdict"] = verdicts[i]
            entry["law_depth"] = law_depth(law, m.point.n)
        out.append(entry)
    return out


def pair_dict(
    pair: PairAnalysis, view: LawView | None, verdicts, law: DepthWidthLaw | None = None
) -> dict:
    """One entry of the JSON ``pairs`` list."""
    est = pair.estimate
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
        "points": point_dicts(pair, verdicts, law),
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


def fit_section(analyses: list[PairAnalysis], source: str, simulated: bool) -> dict:
    """The censored fit (bracketed, censored and bounded-undecided pairs) and its
    projections, where at least MIN_POINTS pairs are bracketed."""
    observations = fit_observations(analyses)
    crossing = sum(o.status == vocabulary.TransitionStatus.BRACKETED for o in observations)
    if crossing < MIN_POINTS:
        reason = f"{crossing} pair(s) cross; the fit needs at least {MIN_POINTS}"
        return {"status": "insufficient", "reason": reason, "source": source}
    try:
        fit = fit_law(observations)
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
