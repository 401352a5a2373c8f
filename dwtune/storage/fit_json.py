"""``fit.json``: the fit stage's record of the law (or of why there is none), written and read.

:func:`fit_to_dict` is everything ``dwtune fit --json`` prints and a fitted ``fit.json`` holds;
:func:`no_fit_dict` what an unfitted one holds instead. JSON has no NaN or inf: they are
written as null (:func:`json_ready`) and read back as NaN. Reading is bounded
(:mod:`dwtune.storage.loaders`): a damaged file is one line naming it and the fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from dwtune.core.errors import InputError
from dwtune.core.fit import CensoredPair, FitResult, TransitionObservation
from dwtune.core.fit.competing import LawComparison, compare_laws
from dwtune.core.fit.loo import LOO_BUDGETS
from dwtune.core.intervals import SCALE_PRIOR_DOF
from dwtune.core.projection import DepthWidthLaw
from dwtune.core.vocabulary import SIMULATED_COLUMN, FitStatus
from dwtune.storage import loaders
from dwtune.storage.fit_points import FitInput
from dwtune.storage.provenance import provenance
from dwtune.storage.schemas import GPT3

GIT_KEY = "dwtune.git_revision"  # the provenance key that is plain text, not JSON
FIT_JSON_ADVICE = "rewrite it with `dwtune fit --json` or `dwtune report`"

MAX_LAW_ABS = 1e3  # |a|, |b| and |cov| of any plausible law of ln dx* (published: a≈5, b≈0.05)


@dataclass(frozen=True)
class FitOutcome:
    """An experiment's fit: its points, the fit and its law, or why there is none."""

    points: FitInput | None
    fit: FitResult | None
    law: DepthWidthLaw | None  # None when there is no fit or the slope is not positive
    reason: str  # why there is no fit / no projection ("" when there is)

    def depths(self) -> list[float]:
        """The depths projected to a transition size: the measured ones and GPT-3's."""
        measured = set(self.points.depths) if self.points is not None else set()
        return sorted(measured | {float(GPT3["depth"])})


def is_fitted(record: dict) -> bool:
    """Whether a fit.json record holds a law."""
    return record.get("status") == FitStatus.FITTED


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_law_numbers(law) -> None:
    numbers = [law.a, law.b, *law.cov[0], *law.cov[1]]
    if not all(math.isfinite(x) and abs(x) <= MAX_LAW_ABS for x in numbers):
        raise ValueError(f"a, b and cov must be finite and within ±{MAX_LAW_ABS:g}")
    if law.cov[0][0] < 0 or law.cov[1][1] < 0:
        raise ValueError("cov has a negative variance")
    if law.chi2_red < 0 or law.dof < 0:  # NaN (not recorded) passes: normal intervals
        raise ValueError("chi2_red must be a non-negative number and dof a count")


def law_from_json(path: Path) -> tuple[DepthWidthLaw, bool]:
    """(law, simulated) from a ``fit.json`` written by :func:`fit_to_dict` (a FitStatus.FITTED)."""
    data = loaders.read_json(path, FIT_JSON_ADVICE)
    if not isinstance(data, dict) or not is_fitted(data):
        reason = (
            data.get("reason", f"no 'status': '{FitStatus.FITTED}'")
            if isinstance(data, dict)
            else ""
        )
        raise InputError(f"{path}: holds no fit ({reason}); collect more transitions first")
    try:
        (c00, c01), (c10, c11) = data["cov"]
        cov = ((float(c00), float(c01)), (float(c10), float(c11)))
        # chi2_red and dof widen the intervals; a fit.json without them gets normal ones.
        scatter = float(data.get("chi2_red") or math.nan), int(data.get("dof") or 0)
        law = DepthWidthLaw("study", float(data["a"]), float(data["b"]), cov, str(path), *scatter)
        _check_law_numbers(law)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InputError(
            f"{path}: a, b, cov (2x2), chi2_red or dof missing or not numbers "
            f"({_first_line(exc)}); rewrite it with `dwtune fit --json` or `dwtune report`"
        ) from exc
    return law, bool(data.get(SIMULATED_COLUMN, False))


def read_fit_json(path: Path) -> dict:
    """A fit.json's record (bounded in size and nesting); anything else is one line."""
    data = loaders.read_json(path, FIT_JSON_ADVICE)
    if not isinstance(data, dict) or "status" not in data:
        raise InputError(f"{path}: not a dwtune fit.json (no 'status'); rerun `dwtune report`")
    return data


def _number(value: object) -> float:
    return math.nan if value is None else float(value)  # JSON null is a NaN (see json_ready)


def fit_from_dict(data: dict, path: Path) -> FitResult:
    """The FitResult a ``fit.json`` of a FitStatus.FITTED was written from (:func:`fit_to_dict`)."""
    try:
        points = data["points"]
        (c00, c01), (c10, c11) = data["cov"]
        return FitResult(
            **{k: _number(data[k]) for k in ("a", "b", "se_a", "se_b", "r2", "chi2_red")},
            cov=((_number(c00), _number(c01)), (_number(c10), _number(c11))),
            dof=int(data["dof"]),
            n_points=int(data["n_points"]),
            depths=tuple(_number(p["depth"]) for p in points),
            widths=tuple(_number(p["width"]) for p in points),
            width_errs=tuple(_number(p["width_err"]) for p in points),
            labels=tuple(str(p["label"]) for p in points),
            censored=tuple(_censored_from_dict(c) for c in data.get("censored", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            f"{path}: a fitted fit.json lacks a field or holds a non-number "
            f"({_first_line(exc)}); rewrite it with `dwtune report`"
        ) from exc


def _censored_from_dict(raw: dict) -> CensoredPair:
    numbers = {k: _number(raw[k]) for k in ("n_low", "n_high") if k in raw}
    return CensoredPair(**(raw | numbers))


def json_ready(value: object) -> object:
    """JSON has no NaN or inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def points_dicts(depths, widths, errs, labels, seeds=()) -> list[dict]:
    """One dict per fitted point; ``seeds`` (count behind each) where the table gives it."""
    counts = list(seeds) or [None] * len(depths)
    return [
        {"label": lab, "depth": d, "width": w, "width_err": e, "sigma_ln_width": e / w, "seeds": n}
        for d, w, e, lab, n in zip(depths, widths, errs, labels, counts, strict=True)
    ]


def fit_to_dict(
    fit: FitResult, level: float, simulated: bool, source: str, seeds: tuple[int, ...] = ()
) -> dict:
    """Everything ``dwtune fit --json`` prints and ``fit.json`` holds (NaN -> null)."""
    return json_ready(
        {
            "status": FitStatus.FITTED.value,
            "model": "ln dx* = a + b*L (natural log; N = 12*L*dx^2)",
            "source": source,
            SIMULATED_COLUMN: simulated,
            "a": fit.a,
            "b": fit.b,
            "se_a": fit.se_a,
            "se_b": fit.se_b,
            "cov": fit.cov,
            "level": level,
            "ci_a": fit.interval("a", level),
            "ci_b": fit.interval("b", level),
            "r2": fit.r2,
            "chi2_red": fit.chi2_red,
            "dof": fit.dof,
            "n_points": fit.n_points,
            "errors_scaled_by_chi2_red": False,
            # ci_a, ci_b and the projections' intervals: estimate ± interval_quantile·se.
            "interval_quantile": fit.quantile(level),
            "interval_rule": "t(n) * sqrt((scale_prior_dof + dof * chi2_red) / n), "
            "n = scale_prior_dof + dof",
            "scale_prior_dof": SCALE_PRIOR_DOF,
            "points": points_dicts(fit.depths, fit.widths, fit.width_errs, fit.labels, seeds),
            "censored": [asdict(c) for c in fit.censored],
            # Since the interval-censored fit: how it was fitted and what it left out.
            "method": fit.method,
            "errors_from": "observed information (inverse Hessian of -log L)",
            "log_likelihood": fit.log_likelihood,
            "censored_in_fit": list(fit.censored_fitted),
            "excluded": [{"label": label, "reason": why} for label, why in fit.excluded],
        }
    )


def no_fit_dict(points: FitInput, reason: str) -> dict:
    """``fit.json`` when there is nothing to fit: what was found instead."""
    return json_ready(
        {
            "status": FitStatus.INSUFFICIENT.value,
            "reason": reason,
            "source": points.source,
            SIMULATED_COLUMN: points.simulated,
            "points": points_dicts(
                points.depths, points.widths, points.width_errs, points.labels, points.seeds
            ),
            "censored": [asdict(c) for c in points.censored],
        }
    )


COMPETING_LAWS = "competing_laws"  # the key of fit.json's (and analyze's fit's) law comparison
NOT_COMPARED, COMPARED = "not compared", "compared"
NO_PAIRS = (
    "a table of depth,width,width_err names no pair's shallower depth, which the separable "
    "law's N* needs; fit a transitions table (an experiment directory) to compare laws"
)


def competing_laws_dict(observations: Sequence[TransitionObservation]) -> dict:
    """``competing_laws``: the published laws fitted to the same pairs, each with AIC(c),
    leave-one-pair-out error and projections at 175B and 1T, and the preferred one
    (:mod:`dwtune.core.fit.competing`); or why they were not compared."""
    if not observations:
        return {"status": NOT_COMPARED, "reason": NO_PAIRS}
    return comparison_dict(compare_laws(observations, LOO_BUDGETS))


def comparison_dict(comparison: LawComparison | None) -> dict:
    """A law comparison as ``competing_laws`` holds it (None: no pairs to compare)."""
    if comparison is None:
        return {"status": NOT_COMPARED, "reason": NO_PAIRS}
    if not comparison.fits:
        reasons = "; ".join(f"{law}: {why}" for law, why in comparison.skipped)
        return {"status": NOT_COMPARED, "reason": reasons}
    return json_ready({"status": COMPARED} | comparison.to_dict())


def metadata_json(spec: dict | None) -> dict:
    """The Parquet provenance (resolved spec, versions, git revision) as plain JSON."""
    raw = {key.decode(): value.decode() for key, value in provenance(spec).items()}
    return {key: value if key == GIT_KEY else json.loads(value) for key, value in raw.items()}


def fit_json_text(record: dict) -> str:
    """``record`` as fit.json's text (NaN and inf as null, as :func:`json_ready` writes them)."""
    return json.dumps(json_ready(record), indent=2, allow_nan=False) + "\n"
