"""The law's checks, computed once by the fit stage and stored in fit.json (pure).

- forms (:mod:`.forms`): linear, quadratic and power law on the same censored likelihood,
  AIC/AICc/BIC and the likelihood-ratio test of curvature;
- leave-one-pair-out (:mod:`.loo`): the projections at 175B and 1T without each pair;
- study bootstrap (:mod:`.bootstrap`): seeds resampled jointly across pairs, points within
  pairs, every transition re-estimated by ``estimate_crossing``. It needs the refine stage's
  paired Δs (``pair_deltas.parquet``); without them the record says why.

The record holds NaN where a number is undefined; fit.json writes it as null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dwtune.core.errors import InputError
from dwtune.core.fit.bootstrap import PairPoints, bootstrap_fit, build_replicates
from dwtune.core.fit.censored import TransitionObservation
from dwtune.core.fit.forms import compare_forms
from dwtune.core.fit.loo import LOO_BUDGETS, leave_one_pair_out

BOOTSTRAP_REPLICATES = 200  # percentile intervals at 95%: 5 replicates in each tail
# (the sensitivity check with resampled points runs half as many)
BOOTSTRAP_SEED = 0
BOOTSTRAP_DONE, BOOTSTRAP_NOT_RUN = "done", "not run"
_METHOD = (
    "seeds drawn jointly across pairs (one draw of seed ids serves every pair); each pair "
    "re-estimated as the refine stage estimates N*; refit by the interval-censored likelihood; "
    "percentile intervals (docs/statistics.md)"
)
_POINTS = (
    "; points also drawn with replacement within each pair (sensitivity check: it discards the "
    "bracket the bisection built, so it over-states the spread)"
)


def _bootstrap(
    pairs: Sequence[PairPoints] | None,
    missing: str,
    budgets: Sequence[float],
    replicates: int,
    points: bool,
) -> dict[str, Any]:
    """The bootstrap's record, or why it was not run (``missing``: why there are no pairs)."""
    if pairs is None:
        return {"status": BOOTSTRAP_NOT_RUN, "reason": missing}
    try:
        studies = build_replicates(pairs, replicates, seed=BOOTSTRAP_SEED, points=points)
    except InputError as exc:
        return {"status": BOOTSTRAP_NOT_RUN, "reason": str(exc)}
    result = bootstrap_fit(studies, budgets)
    method = _METHOD + (_POINTS if points else "")
    return {"status": BOOTSTRAP_DONE, "seed": BOOTSTRAP_SEED, "method": method} | result.to_dict()


def law_checks(
    observations: Sequence[TransitionObservation],
    pairs: Sequence[PairPoints] | None,
    budgets: Sequence[float] = (),
    replicates: int = BOOTSTRAP_REPLICATES,
    missing: str = "",
) -> dict[str, Any]:
    """Forms, leave-one-pair-out and the bootstrap of a study's fit (each says why if it
    cannot); ``pairs``: the refine stage's paired Δs per pair, None (``missing`` says why)
    where there are none."""
    wanted = sorted({*LOO_BUDGETS, *(float(b) for b in budgets)})
    record: dict[str, Any] = {"budgets": wanted}
    record["forms"] = compare_forms(observations, wanted).to_dict()
    try:
        rows = leave_one_pair_out(observations, LOO_BUDGETS)
        record["leave_one_pair_out"] = [r.to_dict() for r in rows]
    except InputError as exc:
        record["leave_one_pair_out"] = []
        record["leave_one_pair_out_reason"] = str(exc)
    record["bootstrap"] = _bootstrap(pairs, missing, wanted, replicates, points=False)
    half = replicates // 2
    record["bootstrap_with_points"] = _bootstrap(pairs, missing, wanted, half, points=True)
    return record
