"""What a pair's journal and board say: each trial's value and attributes, the study's
attributes (its N*, status, interval) and the one line the console prints per pair."""

from __future__ import annotations

import math

import optuna

from dwtune.core import vocabulary
from dwtune.core.refine.points import (
    PairPoint,
)
from dwtune.core.refine.transition import Transition
from dwtune.core.vocabulary import (
    TransitionStatus,
)
from dwtune.study.refine.sampler import KIND_ATTR

# The value each trial is told, minimised: the point's |mean Δ| (nats), so a study's best
# trial is its point nearest the sign change. N* itself is the study attribute ``n_star``
# (an interpolation between points, never one trial). Journals written before this told the
# signed mean Δ; their earlier trials keep those values.
OBJECTIVE = "abs_mean_delta"


OBJECTIVE_NOTE = (
    "minimised: |mean Δ| (nats) of the point, so best_trial is the point nearest the sign "
    "change; N* and its interval are study attributes (n_star, n_star_low, n_star_high)"
)


# Transition fields copied to the study's user attributes (besides pair, status and final).
STUDY_ATTRS = (
    "depth_shallow",
    "depth_deep",
    "n_star",
    "n_star_low",
    "n_star_high",
    "n_star_low_68",
    "n_star_high_68",
    "sigma_ln",
    "width_deep",
    "width_deep_err",
    "rounds",
    "seeds",
    "statement",
    "simulated",
)


def objective(point: PairPoint) -> float:
    """|mean Δ| of the point; inf where no seed gave a Δ (every training failed)."""
    mean = point.decision.mean
    return abs(float(mean)) if point.n and not math.isnan(mean) else math.inf


def _number(value: float) -> float | None:
    """A finite number, else None (JSON has no NaN: optuna-dashboard could not read it)."""
    value = float(value)
    return value if math.isfinite(value) else None


def point_attrs(point: PairPoint) -> dict:
    """A trial's numeric user attributes: the point's size, Δ, se, sign and seeds."""
    decision = point.decision
    return {
        KIND_ATTR: str(point.kind),
        "n_params": _number(math.exp(point.log_n)),
        "width_deep": int(point.width_deep),
        "width_shallow": int(point.width_shallow),
        "delta": _number(decision.mean),
        "delta_se": _number(decision.se),
        "sign": decision.sign,  # +1 deeper loses, -1 deeper wins, 0 within noise
        "seeds": int(point.n),
    }


# Transition fields drawn as scalars on the pair's decisions board, at its last round.
BOARD_SUMMARY = ("n_star", "n_star_low", "n_star_high", "width_deep", "sigma_ln")


def decision_scalars(point: PairPoint) -> dict:
    """One round's point on the decisions board: Δ (nats), its se, ln N, sign and seeds."""
    decision = point.decision
    return {
        "delta": decision.mean,
        "delta_se": decision.se,
        "ln_n": point.log_n,
        "sign": decision.sign,
        "seeds": point.n,
    }


def set_study_attrs(study: optuna.Study, t: Transition, final: bool) -> None:
    """The pair's N*, status and 95% interval as study user attributes (provisional after
    each round, ``final`` when the pair is done)."""
    values = {
        "pair": t.pair,
        "status": str(t.status),
        "final": final,
        "objective": OBJECTIVE,
        "objective_note": OBJECTIVE_NOTE,
    }
    for name in STUDY_ATTRS:
        value = getattr(t, name)
        values[name] = _number(value) if isinstance(value, float) else value
    values["crossings"] = [_number(c) for c in t.crossings]
    for key, value in values.items():
        study.set_user_attr(key, value)


def describe(t: Transition) -> str:
    """One line: status and the pair's decided statement, then what it cost."""
    cost = f"{t.trials} new training(s), {t.rounds} round(s), up to {t.seeds} seed(s)"
    failures = f", failed trainings {t.failures_deep}/{t.failures_shallow} (deeper/shallower)"
    cost += failures if t.failures_deep or t.failures_shallow else ""
    unstable = t.unstable_deep + t.unstable_shallow
    cost += f", {unstable} of them unstable" if unstable else ""
    noise = f"noise {t.noise_source} ({t.noise_dof:g} dof from the seeds)"
    detail = ""
    if t.status == vocabulary.TransitionStatus.BRACKETED:
        detail = (
            f" 68% [{t.n_star_low_68:.4g}, {t.n_star_high_68:.4g}], σ(ln N*) = "
            f"{t.sigma_ln:.3f}, dx* = {t.width_deep:.1f} ± {t.width_deep_err:.1f}."
        )
    hint = HINTS.get(t.status, "") if t.status != vocabulary.TransitionStatus.BRACKETED else ""
    return f"{t.status}: {t.statement}{detail} {hint}({t.reason}; {cost}; {noise})"


HINTS = {
    TransitionStatus.CENSORED_LOW: "To bracket N*, lower space.budgets' minimum. ",
    TransitionStatus.CENSORED_HIGH: "To bracket N*, raise space.budgets' maximum. ",
    TransitionStatus.UNDECIDED: "More seeds (refine.max_seeds) or sizes further from N* decide "
    "the signs within noise. ",
    TransitionStatus.NON_MONOTONE: "",
}
